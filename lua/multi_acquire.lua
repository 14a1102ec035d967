-- multi_acquire: take every lock key given, or none, with a fencing token
-- for each. AcquireMulti runs it once on one server, or once per hash slot
-- on a cluster (see multi.go). A waiting caller kept out by a key watches
-- it: it puts a watcher ('~' and its id) in that key's queue, so that the
-- key's release is announced (see handover.lua); it is never handed a key.
-- KEYS[1..n]     the lock keys (in one hash slot on a cluster)
-- then, with ARGV[3] = '1': their fence counters, in the same order
-- then, with ARGV[4] > 0: their queues, and the queues' expiries
-- ARGV[1]  the caller's token (what each key holds: the token, then any
--          metadata, as for acquire.lua)
-- ARGV[2]  the TTL in milliseconds
-- ARGV[3]  '1': take a fence per key (as acquire.lua: the counter's next
--          value, raised to the server's TIME in microseconds); '0': none
-- ARGV[4]  the caller waits: keep its watcher for this many ms; '0': no
--          watcher, and no queue keys
-- ARGV[5]  with ARGV[4] > 0: the watcher, '~' and the caller's id
-- Returns  {1, f1, ..., fn}  acquired; fi is KEYS[i]'s fence (0 without
--                            ARGV[3] = '1'). A key that already holds
--                            ARGV[1] (a retried command whose first reply
--                            was lost) counts as free.
--          {0, i, pttl}      KEYS[i] is held by someone else, for pttl ms
--                            more (-1: no expiry); nothing was set but
--                            the watcher
--          an error          WRONGTYPE when a key holds a non-string value,
--                            or a counter's error; nothing is left set
local token, ttl = ARGV[1], ARGV[2]
local fenced = ARGV[3] == '1'
local wait = tonumber(ARGV[4])
-- n keys, then n counters when fenced, then 2n queue keys when waiting.
local n = #KEYS / (1 + (fenced and 1 or 0) + (wait > 0 and 2 or 0))
local queues = fenced and 2 * n or n -- the keys before the queues
-- All or none: each key is taken with SET NX, in order, so that the common
-- case, every key free, costs one command per key; at the first key taken
-- by someone else (or of another type) the keys this call set are deleted
-- before the script replies (it runs alone: nobody saw them), so nothing
-- is left set but the watcher. A key that already holds our token is ours
-- again, its lease renewed once all are taken.
local set, again = {}, {}
-- undo deletes the keys this call set, and replies reply.
local function undo(reply)
  if #set > 0 then
    redis.call('DEL', unpack(set))
  end
  return reply
end
for i = 1, n do
  if redis.call('SET', KEYS[i], token, 'NX', 'PX', ttl) then
    set[#set + 1] = KEYS[i]
  else
    local value, err = lockValue(KEYS[i], KEYS[i] .. ' ') -- (see prelude.lua)
    if err then
      return undo(err)
    end
    if value ~= token then
      undo()
      if wait > 0 then
        -- The watcher joins this key's queue as a waiter does (prelude.lua;
        -- under pcall: a user not allowed to queue still takes locks, and
        -- polls instead). A watcher has no left mark: it is never handed a
        -- key, so a late one takes nothing from anybody.
        joinQueue(KEYS[queues + i], KEYS[queues + n + i], ARGV[5], wait)
      end
      return {0, i, redis.call('PTTL', KEYS[i])}
    end
    again[#again + 1] = KEYS[i]
  end
end
for _, key in ipairs(again) do
  redis.call('PEXPIRE', key, ttl)
end
if wait > 0 then
  for i = 1, n do
    -- Not watching any more (its watcher may be on any of them).
    redis.pcall('ZREM', KEYS[queues + i], ARGV[5])
    redis.pcall('ZREM', KEYS[queues + n + i], ARGV[5])
  end
end
local reply, micros, err = {1}, nil, nil
if fenced then
  -- A failed acquire must leave nothing held: every key goes (those that
  -- held our token before too, as an acquire that fails after a lost reply).
  set = {unpack(KEYS, 1, n)}
  -- The clock once, then each name's fence step (prelude.lua).
  micros, err = fenceClock()
  if not micros then
    return undo(err)
  end
end
for i = 1, n do
  reply[i + 1] = 0
  if fenced then
    reply[i + 1], err = takeFence(KEYS[n + i], micros)
    if not reply[i + 1] then
      return undo(err)
    end
  end
end
return reply
