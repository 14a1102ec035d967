-- extend: reset the lease of a lock we hold.
-- KEYS[1]  the lock key
-- ARGV[1]  the holder's token
-- ARGV[2]  the new TTL in milliseconds
-- Returns  1   extended
--          0   the key is gone (expired or deleted)
--          -1  the key holds another token, or a value of another type
local value = redis.pcall('GET', KEYS[1])
-- A value of another type is not our lock (GET's error, a table, is -1
-- below, as another token is); any other error (no permission, out of
-- memory) is an error, not a verdict.
if type(value) == 'table' and not string.find(value.err, 'WRONGTYPE', 1, true) then
  return redis.error_reply(value.err)
elseif value == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return value and -1 or 0
