-- semaphore_release: give back our slot, and hand it to the first waiter
-- for a slot in line whose place has not lapsed: it becomes a holder for ARGV[2]'s ms,
-- announced to its Client as handover.lua announces a lock's hand-over
-- (which comes first), and takes the slot or claims it. A waiter giving up
-- runs this script too (ARGV[3]): it leaves the queue, gives back a slot
-- its lost reply may have taken (or that was handed to it), and tells the
-- waiters behind it, who may now be owed a slot.
-- KEYS[1]  the holders (see semaphore_acquire.lua)
-- KEYS[2]  the queue
-- KEYS[3]  the queue's expiries
-- KEYS[4]  the limit the holders use (see semaphore_acquire.lua)
-- KEYS[5]  optional, with ARGV[3]: the waiter's mark (see handover.lua's
--          leave), set for ARGV[4] ms
-- ARGV[1]  the holder's token
-- ARGV[2]  PUBLISH, or SPUBLISH on a cluster (nothing for none), a space,
--          how long (ms) the slot handed to a waiter is held for it, a
--          space, and the limit: 'PUBLISH 1000 3' (one argument, as
--          release.lua's). The hand-over keeps the set and its limit key
--          for at least that long.
-- ARGV[3]  optional: '1' when the caller is a waiter giving up
-- Announces 'g:' .. t .. '/' .. ms (see handover.lua) to the waiter
--          handed the slot; '1' on KEYS[1] .. ':released' when a waiter
--          left, or a slot none of them could take was freed, and others
--          wait
-- Returns  1   released
--          0   our slot is gone (its lease ended, or it was deleted)
--          -1  the key holds a value of another type
local token = ARGV[1]
local publish, lease, limit = string.match(ARGV[2], '^(%S*) (%d+) (%d+)$')
local left = leave(KEYS, ARGV) -- (see handover.lua)
local value, ours = redis.pcall('GET', KEYS[1]), false
if value == token then
  -- Our slot taken alone with SET NX (see semaphore_acquire.lua): with
  -- nobody in line the key goes as an exclusive lock's does (release.lua);
  -- else it goes and the slot is handed on below, the set made anew.
  local head = redis.call('ZRANGE', KEYS[2], 0, 0)
  redis.call('DEL', KEYS[1])
  if not head[1] then
    return 1
  end
  ours = true -- its key was there: its lease runs
elseif type(value) == 'table' and string.find(value.err, 'WRONGTYPE', 1, true) then
  ours = redis.pcall('ZSCORE', KEYS[1], token) -- the set: our lease's end
  if type(ours) == 'table' then
    return -1 -- a value of another type
  end
elseif value then
  return -1 -- another's token, or an error
end
local now = serverTime()
if ours then
  redis.call('ZREM', KEYS[1], token)
end
local reply = ours and (ours == true or tonumber(ours) > now) and 1 or 0
local member, waiting
if reply == 1 then
  -- The slot goes to the first live waiter for a slot, if any; a waiter of
  -- another kind (see handover.lua) stays in line.
  -- With none, the walk went through the whole queue and left in it the
  -- live places it skipped: how many wait.
  member, waiting = firstTaker(KEYS[2], KEYS[3], now, nil, {n = true})
  if member then
    dequeue(KEYS[2], KEYS[3], member)
    redis.call('ZADD', KEYS[1], now + tonumber(lease), member)
    -- The set (recreated when ours was its last member) and its limit
    -- last at least as long as the handed slot.
    local keep = math.max(redis.call('PTTL', KEYS[1]), tonumber(lease))
    redis.call('PEXPIRE', KEYS[1], keep)
    if redis.call('PTTL', KEYS[4]) < keep then
      redis.call('SET', KEYS[4], limit, 'PX', keep)
    end
    announceHandover(publish, KEYS[1] .. ':released', member, lease)
    return reply
  end
end
-- A waiter left (those behind it may now be owed a slot), or a slot
-- nobody in line could take was freed: those in line hear it. pcall: a
-- user not allowed to publish still lets go; waiters then come back at
-- their refresh. (The queue is counted only when no walk counted it.)
if (left == 1 or reply == 1) and publish ~= '' and (waiting or redis.call('ZCARD', KEYS[2])) > 0 then
  redis.pcall(publish, KEYS[1] .. ':released', '1')
end
return reply
