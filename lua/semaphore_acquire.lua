-- semaphore_acquire: take one of a semaphore's slots if one is free and
-- no earlier waiter of the semaphore is owed it; a waiter that finds none
-- free takes (or keeps) its place in the queue. Holders are members of a sorted set
-- scored by the time their lease ends, so a crashed holder's slot comes
-- back by itself: every script drops the members whose time has passed.
-- KEYS[1]  the holders: tokens scored by lease end (ms, server clock)
-- KEYS[2]  the limit the holders use (a string)
-- KEYS[3]  the queue: waiters' tokens by arrival time (µs)
-- KEYS[4]  the queue's expiries: when each waiter's place lapses (ms)
-- KEYS[5]  with ARGV[4] = '1': the fence counter
-- last, with ARGV[5] > 0: the caller's mark (as acquire.lua's)
-- (all in one hash slot)
-- ARGV[1]  the caller's token
-- ARGV[2]  the TTL in milliseconds
-- ARGV[3]  the limit
-- ARGV[4]  '1': take a fence (as acquire.lua); '0': no fence
-- ARGV[5]  the caller waits: keep its place in the queue for this many ms;
--          '0': it does not wait, and does not queue
-- Returns  fence >= 1   acquired, with ARGV[4] = '1' (also when the
--                       caller already held a slot: a retried command)
--          0            acquired, without a fence
--          -2 - ms      no slot for the caller; the first holder's lease
--                       ends in ms (a slot may come back then); -2 also
--                       when the caller is marked
--          an error     'SEMLIMIT n' when the holders use the limit n;
--                       WRONGTYPE when the key holds something else
local token, ttl, limit = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local wait = tonumber(ARGV[5])
-- The caller's left mark (see prelude.lua's hasLeft).
local mark = wait > 0 and KEYS[#KEYS] or nil
-- The common case, a name nobody holds and nobody waits for, takes the
-- commands it needs only: ZCARD (which also finds a key of another type),
-- TIME, ZCARD of the queue, then the ZADD, SET and PEXPIRE of the slot.
local now, micros = serverTime()
local held = redis.pcall('ZCARD', KEYS[1])
local lone = type(held) == 'table' and string.find(held.err, 'WRONGTYPE', 1, true) and redis.pcall('GET', KEYS[1])
if type(lone) == 'string' and loneSlot(lone) then
  -- One holder took the name alone with SET NX of its token (see
  -- singleStore.acquire): its slot goes into the set with the lease its
  -- key had, and its limit (in its token's mark) into the limit key, as if
  -- it had come through here. The set is the semaphore from now on.
  local left = math.max(redis.call('PTTL', KEYS[1]), 1)
  redis.call('DEL', KEYS[1])
  redis.call('ZADD', KEYS[1], now + left, lone)
  redis.call('PEXPIRE', KEYS[1], left)
  redis.call('SET', KEYS[2], loneSlot(lone), 'PX', left)
  held = 1
elseif type(held) == 'table' then
  -- lone is set (a string, or GET's error) exactly when ZCARD said
  -- WRONGTYPE; any other error stands as Redis gave it.
  return lone and redis.error_reply('WRONGTYPE the key holds a value that is not a semaphore (an exclusive lock of the same name?)') or held
end
if held > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
  held = redis.call('ZCARD', KEYS[1])
end
local waiting = waiters(KEYS[3], KEYS[4], now) -- (see prelude.lua)
local current = held > 0 and redis.call('GET', KEYS[2])
if current and current ~= ARGV[3] then
  return redis.error_reply('SEMLIMIT ' .. current)
end
local ours = held > 0 and redis.call('ZSCORE', KEYS[1], token) ~= false
if not ours and held < limit then
  -- Arrival order: the semaphore's waiters ahead of us (all in line when
  -- we are not) are owed the free slots first; a waiter of another kind or
  -- a watcher (see prelude.lua's kindOf), which could not take one, is not.
  ours = hasTurn(KEYS[3], token, waiting, mark, {n = true}, limit - held)
  if ours == nil then
    return -2 -- one that left takes nothing
  end
end
if ours then
  -- Every command that a user's ACL may refuse runs before the ZADD: a
  -- refused script stops where it is, and must not leave a slot held.
  if waiting > 0 then
    dequeue(KEYS[3], KEYS[4], token)
  end
  -- The set (and its limit) vanish with the last lease.
  -- (held > 0: the set has a member, after the prune above)
  local last = held > 0 and redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  local keep = last and math.max(tonumber(last[2]) - now, ttl) or ttl
  redis.call('ZADD', KEYS[1], now + ttl, token)
  redis.call('SET', KEYS[2], ARGV[3], 'PX', keep)
  redis.call('PEXPIRE', KEYS[1], keep)
  -- The fence step (prelude.lua): INCR, raised to the server's clock; a
  -- failed acquire leaves nothing held.
  return heldFence(ARGV[4], KEYS[5], micros, 'ZREM', KEYS[1], token)
end
-- The queue join (prelude.lua): one that left does not get back in.
if wait > 0 and not joinQueue(KEYS[3], KEYS[4], token, wait, mark, micros) then
  return -2
end
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return -2 - (first[2] and tonumber(first[2]) - now or 0)
