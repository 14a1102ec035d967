-- semaphore_release: give back our slot, and announce it to the waiters.
-- A waiter giving up runs this script too (ARGV[4]): it leaves the queue,
-- and gives back a slot its lost reply may have taken.
-- KEYS[1]  the holders (see semaphore_acquire.lua)
-- KEYS[2]  the queue
-- KEYS[3]  the queue's expiries
-- ARGV[1]  the holder's token
-- ARGV[2]  PUBLISH, or SPUBLISH on a cluster: the announcement '1' goes to
--          the channel KEYS[1] .. ':released' when someone waits; '' for none
-- ARGV[3]  unused (the exclusive release's hand-over claim; same layout)
-- ARGV[4]  optional: '1' when the caller is a waiter giving up
-- Returns  1   released
--          0   our slot is gone (its lease ended, or it was deleted)
--          -1  the key holds a value of another type
local token = ARGV[1]
local left = 0
if ARGV[4] == '1' then
  left = redis.call('ZREM', KEYS[2], token)
  redis.call('ZREM', KEYS[3], token)
end
local kind = redis.call('TYPE', KEYS[1]).ok
local reply = 0
if kind ~= 'zset' and kind ~= 'none' then
  reply = -1
elseif kind == 'zset' then
  local lease = redis.call('ZSCORE', KEYS[1], token)
  if lease then
    redis.call('ZREM', KEYS[1], token)
    local clock = redis.call('TIME')
    local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
    if tonumber(lease) > now then
      reply = 1
    end
  end
end
if (reply == 1 or left == 1) and ARGV[2] ~= '' and redis.call('ZCARD', KEYS[2]) > 0 then
  -- pcall: a user not allowed to publish still releases; waiters then
  -- come back at their refresh.
  redis.pcall(ARGV[2], KEYS[1] .. ':released', '1')
end
return reply
