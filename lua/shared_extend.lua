-- shared_extend: reset the lease of our shared hold (see
-- shared_acquire.lua), and the lock key's TTL to the latest lease's end.
-- KEYS[1]  the lock key
-- KEYS[2]  the shared holders
-- ARGV[1]  the holder's token
-- ARGV[2]  the new TTL in milliseconds
-- Returns  1   extended
--          0   our share is gone (its lease ended, or it was broken)
--          -1  an exclusive holder (or a waiter handed the lock) holds the
--              key, or a key holds a value of another type
local MARK = '*shared*'
local value = redis.pcall('GET', KEYS[1])
if type(value) == 'table' and value.err then
  if string.find(value.err, 'WRONGTYPE', 1, true) then
    return -1
  end
  return redis.error_reply(value.err)
end
if not value then
  return 0
end
if value == ARGV[1] then
  -- a lone reader's hold (see shared_acquire.lua): the key is its lease
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if string.sub(value, 1, #MARK) ~= MARK then
  return -1
end
local kind = redis.call('TYPE', KEYS[2]).ok
if kind ~= 'zset' and kind ~= 'none' then
  return -1
end
local now = serverTime()
local lease = redis.call('ZSCORE', KEYS[2], ARGV[1])
if not lease or tonumber(lease) <= now then
  -- Ended: another holder's lease kept the key alive, not ours.
  redis.call('ZREM', KEYS[2], ARGV[1])
  return 0
end
redis.call('ZADD', KEYS[2], 'XX', now + tonumber(ARGV[2]), ARGV[1])
local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
local keep = math.max(tonumber(last[2]) - now, 1)
redis.call('PEXPIRE', KEYS[1], keep)
redis.call('PEXPIRE', KEYS[2], keep)
return 1
