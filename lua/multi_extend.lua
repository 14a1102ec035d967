-- multi_extend: reset the lease of every lock key of a multi lock (one
-- hash slot's on a cluster), if every one still holds our token.
-- KEYS     the lock keys
-- ARGV[1]  the holder's token
-- ARGV[2]  the new TTL in milliseconds
-- Returns  {1}      every key extended
--          {0, i}   KEYS[i] is gone (expired or deleted); none extended
--          {-1, i}  KEYS[i] holds another token, or a value of another
--                   type; none extended
local token = ARGV[1]
for i = 1, #KEYS do
  local value = redis.pcall('GET', KEYS[i])
  if type(value) == 'table' and value.err then
    if string.find(value.err, 'WRONGTYPE', 1, true) then
      return {-1, i}
    end
    return redis.error_reply(value.err)
  end
  if value ~= token then
    if not value then
      return {0, i}
    end
    return {-1, i}
  end
end
for i = 1, #KEYS do
  redis.call('PEXPIRE', KEYS[i], ARGV[2])
end
return {1}
