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
-- Returns  1        every key held the token and is deleted
--          {0, i}   KEYS[i], the first key not ours, was gone
--          {-1, i}  KEYS[i], the first key not ours, holds another token
--                   or a value of another type
--          (the keys that held the token are deleted in every case)
local token = ARGV[1]
local publish = string.match(ARGV[2], '^%S*')
local reply, failed = 1, nil
local n = #KEYS / 2
local ours, queues = {}, {}
for i = 1, n do
  local value = redis.pcall('GET', KEYS[i])
  if value == token then
    ours[#ours + 1], queues[#queues + 1] = KEYS[i], KEYS[n + i]
  elseif type(value) == 'table' and not string.find(value.err, 'WRONGTYPE', 1, true) then
    failed = value
    break
  elseif reply == 1 then
    reply = {value and -1 or 0, i}
  end
end
-- One DEL, and one EXISTS of their queues: the common case, nobody in
-- line, costs two commands however many keys. Nobody in line, nobody to
-- tell (a waiter keeps its place for as long as it listens); a queue
-- that cannot be read counts as someone's. pcall: a user not allowed to
-- publish still releases; waiters then come back at their backoff.
if #ours > 0 then
  redis.call('DEL', unpack(ours))
  if publish ~= '' and redis.pcall('EXISTS', unpack(queues)) ~= 0 then
    for j, key in ipairs(ours) do
      if #ours == 1 or redis.pcall('EXISTS', queues[j]) ~= 0 then
        redis.pcall(publish, key .. ':released', '1')
      end
    end
  end
end
return failed or reply
