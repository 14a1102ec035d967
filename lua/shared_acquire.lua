-- shared_acquire: take a shared hold (AcquireShared) of a lock, next to
-- the other shared holders; a caller that may not enter takes (or keeps)
-- its place in the lock's queue, the one exclusive waiters use.
-- While shared holders hold the name, the lock key holds the marker
-- '*shared*' (no token can equal it: tokens are base32), then, once a
-- fenced holder came, ' ' and the fence of this epoch; its TTL is the
-- latest shared lease's end. So an exclusive SET NX fails while they hold
-- it, and acquire.lua sees "held by someone else for pttl ms", unchanged.
-- The holders are a sorted set of their tokens scored by the end of their
-- lease (ms, server clock); every shared script drops those whose time
-- has passed, and the key and the set expire with the last lease, so a
-- crashed holder's share ends by itself.
-- A shared waiter's token has 's' after its Client's tag and '.' (see
-- sharedToken); any other token in the queue is an exclusive waiter's.
-- KEYS[1]  the lock key
-- KEYS[2]  the shared holders: tokens scored by lease end (ms)
-- KEYS[3]  the queue: waiters' tokens by arrival (µs, as acquire.lua)
-- KEYS[4]  the queue's expiries (ms)
-- KEYS[5]  with ARGV[3] = '1': the fence counter
-- last, with ARGV[4] > 0: the caller's mark (as acquire.lua's)
-- (all in one hash slot)
-- ARGV[1]  the caller's token
-- ARGV[2]  the TTL in milliseconds
-- ARGV[3]  '1': take the epoch's fence; '0': no fence
-- ARGV[4]  the caller waits: keep its place in the queue for this many ms;
--          '0': it does not wait, and does not queue
-- ARGV[5]  how to tell the shared waiters let in with the caller (see
--          below), and how long (ms) they have to claim their share:
--          PUBLISH (SPUBLISH on a cluster; nothing for no announcement), a
--          space, then the ms, as shared_release.lua's ARGV[2]
-- The caller enters when the key is absent or holds the marker and no
-- exclusive waiter is queued ahead of it (writers are not starved), when
-- the key was handed to it by a release (it holds the caller's token:
-- the hold becomes shared), or when it is in the set already (let in by
-- another shared holder, or a retried command). Entering, it lets in the
-- shared waiters at the head of the queue too, up to the first exclusive
-- one, each with ARGV[5]'s ms to claim, announced as release.lua announces
-- a hand-over.
-- Returns  fence >= 1   entered, with ARGV[3] = '1': the epoch's fence,
--                       taken by its first fenced holder as acquire.lua
--                       takes one; the next exclusive holder's is higher
--          0            entered, without a fence
--          -2 - pttl    not entered; the lock key ends in pttl ms
--          -1           not entered; the key is absent (an exclusive
--                       waiter ahead of the caller is about to take it),
--                       or the caller is marked
--          an error     WRONGTYPE when a key holds a value of another type
local MARK = '*shared*'
local token, ttl, wait = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[4])
local publish, claim = string.match(ARGV[5], '^(%S*) (%d+)$') -- (see above)
-- The caller's left mark (see prelude.lua's hasLeft).
local mark = wait > 0 and KEYS[#KEYS] or nil
local value, err = lockValue(KEYS[1], '') -- (see prelude.lua)
if err then
  return err
end
-- setError(reply): the error of a command on the holders' set that
-- failed: a key of another type says so.
local function setError(reply)
  if string.find(reply.err, 'WRONGTYPE', 1, true) then
    return redis.error_reply('WRONGTYPE ' .. KEYS[2] .. ' holds a ' .. redis.call('TYPE', KEYS[2]).ok .. ', not the shared holders')
  end
  return reply
end
local now, micros = serverTime()
local marked = value and string.sub(value, 1, #MARK) == MARK
-- While shares run, those whose lease ended go. Otherwise the set holds no
-- running share (it lives no longer than the marker): the common case, a
-- free name, skips the prune, and the set's type is told by our ZADD.
local pruned = marked and redis.pcall('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
if type(pruned) == 'table' then
  return setError(pruned)
end
local waiting = waiters(KEYS[3], KEYS[4], now) -- (see prelude.lua)
-- lone: the key holds another reader's token, the hold of a reader that
-- took the name alone with SET NX (see singleStore.acquire): read as a
-- shared hold of one; a reader admitted beside it makes it a share in the
-- holders' set (with the key's lease) before the key becomes the marker.
local lone = value and value ~= token and loneMark(value) == 's'
local ours = value == token or marked and redis.call('ZSCORE', KEYS[2], token) ~= false
if not ours and (not value or marked or lone) then
  -- Arrival order for writers: a waiter ahead of us that is neither a
  -- shared one nor a watcher (which waits for nobody's turn, see
  -- prelude.lua's kindOf) goes first. (Shared waiters ahead enter at their
  -- next attempt.)
  ours = hasTurn(KEYS[3], token, waiting, mark, {[''] = true, n = true}, 1)
  if ours == nil then
    return -1 -- one that left takes nothing
  end
end
if ours then
  -- Every command a user's ACL may refuse runs before the writes that
  -- make the hold: a refused script must not leave a share held.
  if waiting > 0 then
    dequeue(KEYS[3], KEYS[4], token)
  end
  -- A marker goes on; a handed key (our token) or a free one starts a
  -- new epoch.
  local epoch = marked and value or MARK
  local fence = ARGV[3] == '1' and tonumber(string.sub(epoch, #MARK + 2))
  if ARGV[3] == '1' and not fence then
    -- The epoch's first fenced holder: the fence step (prelude.lua).
    fence, err = takeFence(KEYS[5], micros)
    if not fence then
      return err
    end
    epoch = MARK .. ' ' .. string.format('%d', fence)
  end
  -- The shared waiters at the head of the queue come in with us.
  local admitted = {}
  if waiting > 0 then
    local skipped = 0
    local head = redis.call('ZRANGE', KEYS[3], 0, 0)
    while head[1] and (kindOf(head[1]) == 's' or kindOf(head[1]) == '~') do
      if kindOf(head[1]) == 's' then
        dequeue(KEYS[3], KEYS[4], head[1])
        redis.call('ZADD', KEYS[2], now + tonumber(claim), head[1])
        admitted[#admitted + 1] = head[1]
      else
        skipped = skipped + 1 -- a watcher
      end
      head = redis.call('ZRANGE', KEYS[3], skipped, skipped)
    end
  end
  -- Our share (a set of another type says so here, when no prune above
  -- told it), and the marker: the writes that make the hold.
  local added = lone and redis.pcall('ZADD', KEYS[2], now + math.max(redis.call('PTTL', KEYS[1]), 1), value)
  if not (type(added) == 'table' and added.err) then
    added = redis.pcall('ZADD', KEYS[2], now + ttl, token)
  end
  if type(added) == 'table' then
    return setError(added)
  end
  -- The key lasts as long as the latest lease: ours, in a new epoch.
  -- (the set has a member: ours, just added)
  local last = (marked or lone) and redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
  local keep = last and math.max(tonumber(last[2]) - now, 1) or ttl
  redis.call('SET', KEYS[1], epoch, 'PX', keep)
  redis.call('PEXPIRE', KEYS[2], keep)
  -- Each admitted waiter hears it on its Client's channel (handover.lua's
  -- announcement, without the ms: a share let in is always claimed).
  for _, waiter in ipairs(admitted) do
    announceHandover(publish, KEYS[1] .. ':released', waiter)
  end
  return fence or 0
end
-- The queue join (prelude.lua): one that left does not get back in. A key
-- found absent: an exclusive waiter ahead of the caller is about to take
-- it.
if wait > 0 and not joinQueue(KEYS[3], KEYS[4], token, wait, mark, micros) or not value then
  return -1
end
return -2 - redis.call('PTTL', KEYS[1])
