-- shared_pttl: the remaining lease of our shared hold.
-- KEYS[1]  the lock key
-- KEYS[2]  the shared holders
-- ARGV[1]  the holder's token
-- Returns  ms >= 0  the lease left
--          -2       our share is gone
--          -3       an exclusive holder holds the key, or a key holds a
--                   value of another type
-- The lock key first, as shared_extend.lua reads it; then our lease.
local held, value = holds(KEYS[1], ARGV[1])
if not held then
  return value
end
if held == 1 then
  return redis.call('PTTL', KEYS[1]) -- a lone reader's hold (see shared_acquire.lua)
end
if not value or string.sub(value, 1, 8) ~= '*shared*' then
  return held == 0 and -2 or -3
end
local left = leaseLeft(KEYS[2], ARGV[1]) -- (see lease.lua)
return left > 0 and left or left - 2
