-- release: delete the lock key only if it still holds our token, and
-- announce the release to waiters.
-- KEYS[1]  the lock key
-- ARGV[1]  the holder's token
-- ARGV[2]  optional: PUBLISH, or SPUBLISH on a cluster, to announce the
--          release on the channel KEYS[1] .. ':released' (same hash slot)
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
    redis.pcall(ARGV[2], KEYS[1] .. ':released', '1')
  end
  return 1
end
if not value then
  return 0
end
return -1
