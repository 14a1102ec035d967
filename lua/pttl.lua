-- pttl: the remaining TTL of a lock we hold.
-- KEYS[1]  the lock key
-- ARGV[1]  the holder's token
-- Returns  the TTL in milliseconds (>= 0; -1 if someone removed the expiry)
--          -2  the key is gone (expired or deleted)
--          -3  the key holds another token, or a value of another type
-- (prelude.lua's holds: a value of another type is not our lock; any other
-- error is an error, not a verdict.)
local held, err = holds(KEYS[1], ARGV[1])
if held == 1 then
  return redis.call('PTTL', KEYS[1])
end
return held and held - 2 or err
