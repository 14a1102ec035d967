-- acquire: take the lock if nobody holds it, and a fencing token with it.
-- KEYS[1]  the lock key
-- KEYS[2]  optional: the fence counter key (same hash slot as KEYS[1])
-- ARGV[1]  the holder's token
-- ARGV[2]  the TTL in milliseconds
-- Returns  {1, fence}  acquired (also when the key already holds ARGV[1]: a
--                      retried command whose first reply was lost);
--                      fence is 0 when KEYS[2] is absent
--          {0, pttl}   held by someone else; pttl is their remaining TTL in ms
--                      (-1: the key has no expiry)
--          an error    WRONGTYPE when the key holds a non-string value, or the
--                      counter's error (then nothing is left set)
local ours = redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
if not ours and redis.pcall('GET', KEYS[1]) == ARGV[1] then
  -- Our own earlier attempt won but its reply was lost, and the client
  -- sent the command again: it is ours. Renew it; the fence below is a new,
  -- higher number, still ours alone.
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  ours = true
end
if ours then
  if #KEYS < 2 then
    return {1, 0}
  end
  local fence = redis.pcall('INCR', KEYS[2])
  if type(fence) == 'table' and fence.err then
    -- A failed acquire must leave nothing held.
    redis.call('DEL', KEYS[1])
    return fence
  end
  return {1, fence}
end
if redis.call('TYPE', KEYS[1]).ok ~= 'string' then
  return redis.error_reply('WRONGTYPE the lock key holds a value that is not a lock')
end
return {0, redis.call('PTTL', KEYS[1])}
