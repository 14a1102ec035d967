-- break: end a lock whatever its token, for an operator's Client.Break,
-- and hand it to the first waiter in the queue whose place has not
-- lapsed, or else delete it, as release.lua does for its holder. The
-- function state comes first (see state.lua for KEYS).
-- ARGV[1]  PUBLISH, or SPUBLISH on a cluster, to announce as release.lua
--          does; '' for none
-- ARGV[2]  how long (ms) the lock handed to a waiter is held for it
--          (announced as release.lua does)
-- A lock held shared (AcquireShared) loses every share: the shared
-- holders' set is deleted with the marker. A semaphore loses every slot:
-- its holders and its limit are deleted, and the release announced, so
-- that its waiters take the slots.
-- Returns  state()'s reply as it was before the break, with an eleventh
--          element: 1 when the lock was handed to a waiter, else 0
local info, err, value = state()
if err then
  return err
end
info[11] = 0
local channel = KEYS[1] .. ':released'
if info[8] == 'semaphore' then
  redis.call('DEL', KEYS[1], KEYS[6])
  if ARGV[1] ~= '' then
    redis.pcall(ARGV[1], channel, '1')
  end
  return info
end
if not value then
  return info
end
if info[8] == 'shared' then
  redis.call('DEL', KEYS[5])
end
-- A hand-over is announced on the channel of the waiter's Client only:
-- channel .. ':' .. its tag, the token's part before a '.' (a token of a
-- Client without a tag goes on the shared channel).
local function handover(channel, waiter)
  local tag = string.match(waiter, '^([A-Z2-7]+)%.')
  if tag then
    return channel .. ':' .. tag
  end
  return channel
end
local head = redis.call('ZRANGE', KEYS[3], 0, 0)
if head[1] then
  local now = redis.call('TIME')
  now = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
  while head[1] do
    local waiter = head[1]
    redis.call('ZREM', KEYS[3], waiter)
    local lapses = tonumber(redis.call('ZSCORE', KEYS[4], waiter))
    redis.call('ZREM', KEYS[4], waiter)
    if lapses and lapses > now then
      redis.call('SET', KEYS[1], waiter, 'PX', ARGV[2])
      if ARGV[1] ~= '' then
        redis.pcall(ARGV[1], handover(channel, waiter), 'g:' .. string.sub(redis.sha1hex(waiter), 1, 16) .. '/' .. ARGV[2])
      end
      info[11] = 1
      return info
    end
    head = redis.call('ZRANGE', KEYS[3], 0, 0)
  end
end
redis.call('DEL', KEYS[1])
if ARGV[1] ~= '' then
  redis.pcall(ARGV[1], channel, '1')
end
return info
