-- pttl: the remaining TTL of a lock we hold.
-- KEYS[1]  the lock key
-- ARGV[1]  the holder's token
-- Returns  the TTL in milliseconds (>= 0; -1 if someone removed the expiry)
--          -2  the key is gone (expired or deleted)
--          -3  the key holds another token, or a value of another type
local value = redis.pcall('GET', KEYS[1])
if type(value) == 'table' and value.err then
  -- A value of another type is not our lock; any other error (no
  -- permission, out of memory) is an error, not a verdict.
  if string.find(value.err, 'WRONGTYPE', 1, true) then
    return -3
  end
  return redis.error_reply(value.err)
end
if value == ARGV[1] then
  return redis.call('PTTL', KEYS[1])
end
if not value then
  return -2
end
return -3
