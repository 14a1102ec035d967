-- semaphore_extend: reset the lease of a semaphore slot we hold.
-- KEYS[1]  the holders (see semaphore_acquire.lua)
-- KEYS[2]  the limit the holders use
-- ARGV[1]  the holder's token
-- ARGV[2]  the new TTL in milliseconds
-- Returns  1   extended
--          0   our slot is gone (its lease ended, or it was deleted)
--          -1  the key holds a value of another type
local kind = redis.call('TYPE', KEYS[1]).ok
if kind == 'none' then
  return 0
end
if kind ~= 'zset' then
  return -1
end
local now = serverTime()
local lease = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not lease or tonumber(lease) <= now then
  -- Ended: the slot may already be someone else's.
  redis.call('ZREM', KEYS[1], ARGV[1])
  return 0
end
redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[2]), ARGV[1])
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
local keep = math.max(tonumber(last[2]) - now, 1)
redis.call('PEXPIRE', KEYS[1], keep)
redis.call('PEXPIRE', KEYS[2], keep)
return 1
