-- shared_pttl: the remaining lease of our shared hold.
-- KEYS[1]  the lock key
-- KEYS[2]  the shared holders
-- ARGV[1]  the holder's token
-- Returns  ms >= 0  the lease left
--          -2       our share is gone
--          -3       an exclusive holder holds the key, or a key holds a
--                   value of another type
local MARK = '*shared*'
local value = redis.pcall('GET', KEYS[1])
if type(value) == 'table' and value.err then
  if string.find(value.err, 'WRONGTYPE', 1, true) then
    return -3
  end
  return redis.error_reply(value.err)
end
if not value then
  return -2
end
if value == ARGV[1] then
  return redis.call('PTTL', KEYS[1]) -- a lone reader's hold (see shared_acquire.lua)
end
if string.sub(value, 1, #MARK) ~= MARK then
  return -3
end
local lease = redis.pcall('ZSCORE', KEYS[2], ARGV[1])
if type(lease) == 'table' then
  return -3
end
local now = serverTime()
if not lease or tonumber(lease) <= now then
  return -2
end
return tonumber(lease) - now
