-- multi_release: delete every lock key of a multi lock (one hash slot's on
-- a cluster) that holds our token, and announce each release that someone
-- waits for. It hands no key to the waiters queued by acquire.lua: they
-- hear the announcement and try at once, as do multi waiters.
-- KEYS     the n lock keys, then their n queues (see acquire.lua)
-- ARGV[1]  the holder's token
-- ARGV[2]  PUBLISH, or SPUBLISH on a cluster: '1' goes to the channel
--          KEY .. ':released' of each key deleted whose queue holds
--          someone (a waiter, or a multi waiter's watcher: see
--          release.lua), or cannot be read; nothing for none; then
--          what the other kinds' releases read after a space (the
--          lockRef's release argument, see release.lua), unused here
-- Returns  {1}      every key held the token and is deleted
--          {0, i}   KEYS[i], the first key not ours, was gone
--          {-1, i}  KEYS[i], the first key not ours, holds another token
--                   or a value of another type
--          (the keys that held the token are deleted in every case)
local token = ARGV[1]
local publish = string.match(ARGV[2], '^%S*')
local reply = {1}
local n = #KEYS / 2
for i = 1, n do
  local value = redis.pcall('GET', KEYS[i])
  if type(value) == 'table' and value.err then
    if not string.find(value.err, 'WRONGTYPE', 1, true) then
      return redis.error_reply(value.err)
    end
    value = nil
    if reply[1] == 1 then
      reply = {-1, i}
    end
  elseif value == token then
    redis.call('DEL', KEYS[i])
    if publish ~= '' and redis.pcall('EXISTS', KEYS[n + i]) ~= 0 then
      -- Nobody in line, nobody to tell (a waiter keeps its place for as
      -- long as it listens). pcall: a user not allowed to publish still
      -- releases; waiters then come back at their backoff.
      redis.pcall(publish, KEYS[i] .. ':released', '1')
    end
  elseif reply[1] == 1 then
    if value then
      reply = {-1, i}
    else
      reply = {0, i}
    end
  end
end
return reply
