-- release: delete the lock key only if it still holds our token.
-- KEYS[1]  the lock key
-- ARGV[1]  the holder's token
-- Returns  1   deleted
--          0   the key is gone (expired or deleted)
--          -1  the key holds another token, or a value of another type
local value = redis.pcall('GET', KEYS[1])
if value == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
if not value then
  return 0
end
return -1
