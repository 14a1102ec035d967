-- semaphore_pttl: the remaining lease of our semaphore slot.
-- KEYS[1]  the holders (see semaphore_acquire.lua)
-- ARGV[1]  the holder's token
-- Returns  ms >= 0  the lease left
--          -2       our slot is gone
--          -3       the key holds a value of another type
local kind = redis.call('TYPE', KEYS[1]).ok
if kind == 'none' then
  return -2
end
if kind ~= 'zset' then
  return -3
end
local lease = redis.call('ZSCORE', KEYS[1], ARGV[1])
local now = serverTime()
if not lease or tonumber(lease) <= now then
  return -2
end
return tonumber(lease) - now
