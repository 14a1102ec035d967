-- handover: how a lock that is let go passes on, written once for
-- release.lua, shared_release.lua, semaphore_release.lua and break.lua,
-- which start with it (see scripts.go; shared_acquire.lua too, for
-- announceHandover). Not a script of its own.
-- The lock's queue (see acquire.lua) holds waiters' tokens, and watchers:
-- '~' then an id, the multi waiters this lock keeps out (see
-- multi_acquire.lua), which are never handed the lock but hear it freed.
-- A waiter's kind is the mark after its Client's tag and '.' (see
-- waiterToken; prelude.lua's kindOf): 's' shared, 'n' a semaphore's, none
-- exclusive.
-- Every kind queues by one clock, its arrival in µs (server TIME).
-- handOver(key, holders, queue, expiries, publish, lease, head): hands key
-- to the first waiter whose place has not lapsed and that takes a lock
-- (SET key waiter PX lease; a shared waiter gets a share in holders, the
-- shared holders' set, with the shared waiters right behind it, see
-- below), dropping lapsed places on the way;
-- a semaphore's waiter, which could not take it, stays in line, as a
-- watcher does. It announces the hand-over on the channel of the
-- waiter's Client only: key .. ':released:' .. its tag (the token's part
-- before a '.'; a token without a tag: key .. ':released'), as
-- 'g:' .. the first 16 hex digits of the token's SHA1 (the token is a
-- secret) .. '/' .. lease, the ms the lock is held for the waiter, which
-- takes it or claims it (see acquire.lua). When no waiter that takes it is
-- left it deletes key and, if the queue held anyone (a watcher, a waiter of
-- another kind), announces '1' on key .. ':released'. publish is PUBLISH,
-- SPUBLISH (a cluster) or '' for no announcement; announcing runs under
-- pcall, so a user not allowed to publish still lets go (waiters then come
-- back at their refresh).
-- head, when the caller read it already, is the queue's first member.
-- Returns true when the lock was handed to a waiter.
-- firstTaker(queue, expiries, now, head, takes) is the walk: the first
-- live member whose kind is in takes, how many live members before it stay
-- in line, and whether the queue held anyone.
-- announceHandover(publish, channel, member, lease) is that announcement
-- (without '/' .. lease when lease is nil: shared_acquire.lua's),
-- announceFreed(publish, key) the plain one, '1' on key .. ':released'.
-- leave(keys, argv): a release's KEYS and ARGV, every kind's release's
-- layout (see release.lua): with argv[3] '1' the caller, argv[1], is a
-- waiter giving up, and leaves the queue, keys[2], and its expiries,
-- keys[3]; with keys[5], its mark (see acquire.lua), it is marked for
-- argv[4] ms, as long as a command of its may be on its way, so that such
-- a command, arriving later, neither queues it again nor takes the lock (a
-- release would hand the lock to nobody). Returns how many places it had:
-- 0 for a holder's release, and one without the queue's keys.
local function announceHandover(publish, channel, member, lease)
  if publish ~= '' then
    local tag = string.match(member, '^([A-Z2-7]+)%.')
    channel = channel .. (tag and ':' .. tag or '')
    redis.pcall(publish, channel, 'g:' .. string.sub(redis.sha1hex(member), 1, 16) .. (lease and '/' .. lease or ''))
  end
end
local function announceFreed(publish, key)
  if publish ~= '' then
    redis.pcall(publish, key .. ':released', '1')
  end
end
local function leave(keys, argv)
  if argv[3] ~= '1' or #keys < 4 then
    return 0
  end
  if keys[5] then
    redis.call('SET', keys[5], '1', 'PX', argv[4])
  end
  redis.pcall('ZREM', keys[3], argv[1])
  return redis.pcall('ZREM', keys[2], argv[1])
end
local function firstTaker(queue, expiries, now, head, takes)
  local skipped = 0
  local member = head or redis.call('ZRANGE', queue, 0, 0)[1]
  local anyone = member ~= nil
  while member do
    local lapses = tonumber(redis.pcall('ZSCORE', expiries, member))
    if lapses and lapses > now and takes[kindOf(member)] then
      return member, skipped, true
    elseif lapses and lapses > now then
      skipped = skipped + 1
    else
      dequeue(queue, expiries, member)
    end
    member = redis.call('ZRANGE', queue, skipped, skipped)[1]
  end
  return nil, skipped, anyone
end
local function handOver(key, holders, queue, expiries, publish, lease, head)
  local now = serverTime()
  local member, skipped, anyone = firstTaker(queue, expiries, now, head, {[''] = true, s = true})
  if member and kindOf(member) == 's' then
    -- A shared waiter: key goes to the shared waiters from member on, up to
    -- the first waiter of another kind: a new epoch (the marker
    -- '*shared*', see shared_acquire.lua) whose holders are those waiters,
    -- each with a share of lease ms, announced to each; watchers stay,
    -- lapsed places go.
    redis.call('DEL', holders)
    while member and (kindOf(member) == 's' or kindOf(member) == '~') do
      local lapses = tonumber(redis.pcall('ZSCORE', expiries, member))
      if kindOf(member) == '~' and lapses and lapses > now then
        skipped = skipped + 1
      else
        dequeue(queue, expiries, member)
        if lapses and lapses > now then
          redis.call('ZADD', holders, now + lease, member)
          announceHandover(publish, key .. ':released', member, lease)
        end
      end
      member = redis.call('ZRANGE', queue, skipped, skipped)[1]
    end
    redis.call('SET', key, '*shared*', 'PX', lease)
    redis.call('PEXPIRE', holders, lease)
    return true
  elseif member then
    dequeue(queue, expiries, member)
    redis.call('SET', key, member, 'PX', lease)
    announceHandover(publish, key .. ':released', member, lease)
  else
    redis.call('DEL', key)
    if anyone then
      announceFreed(publish, key)
    end
  end
  return member ~= nil
end
-- letGo frees key, which its releaser held alone (a lock, a lone reader's
-- hold, or the last share): hands it to the first waiter in queue
-- (handOver); with nobody in line (the common case) deletes it, and nobody
-- is there to tell. A queue not read (queued false: a release without the
-- queue's keys; or an ACL without ZRANGE, whose pcall returns an error) may
-- hold anyone: the key goes, announced. holders, the shared holders' set,
-- goes with the key, and before a hand-over when clear (a shared epoch's).
-- how is the release's ARGV[2]: how to announce, a space, how long to hand
-- over for (see release.lua).
local function letGo(key, holders, queue, expiries, how, queued, clear)
  local publish, lease = string.match(how, '^(%S*) ?(%d*)$')
  local head = queued and redis.pcall('ZRANGE', queue, 0, 0)
  local read = type(head) == 'table' and not head.err
  if read and head[1] then
    if clear then
      redis.call('DEL', holders)
    end
    return handOver(key, holders, queue, expiries, publish, lease, head[1])
  end
  redis.call('DEL', key, holders or key)
  if not read then
    announceFreed(publish, key)
  end
end
