-- release: delete the lock key only if it still holds our token, and
-- announce the release to waiters.
-- KEYS[1]  the lock key
-- ARGV[1]  the holder's token
-- ARGV[2]  optional: the release channel (same hash slot as KEYS[1])
-- ARGV[3]  with ARGV[2]: PUBLISH, or SPUBLISH on a cluster
-- Returns  1   deleted (and announced)
--          0   the key is gone (expired or deleted)
--          -1  the key holds another token, or a value of another type
local value = redis.pcall('GET', KEYS[1])
if type(value) == 'table' and value.err then
  -- A value of another type is not our lock; any other error (no
  -- permission, out of memory) is an error, not a verdict.
  if string.find(value.err, 'WRONGTYPE', 1, true) then
    return -1
  end
  return redis.error_reply(value.err)
end
if value == ARGV[1] then
  redis.call('DEL', KEYS[1])
  if ARGV[2] then
    -- pcall: a user not allowed to publish still releases; waiters then
    -- fall back to their backoff.
    redis.pcall(ARGV[3], ARGV[2], '1')
  end
  return 1
end
if not value then
  return 0
end
return -1
