-- inspect: a lock's state for Client.Inspect; it writes nothing.
-- state.lua comes first and reads info (see state.lua for KEYS and the
-- reply).
-- Returns  state.lua's info, then the queue: the first 100 waiters in line
--          whose place has not lapsed, first in line first, flat:
--          metadata (what follows \31 in the waiter's token, '' when
--          none), then how long it has been in line (µs, server TIME
--          minus its arrival), metadata, ... A multi waiter's watcher
--          ('~', see handover.lua) is no waiter and is left out, as are
--          lapsed places; never a token.
-- The walk goes a page at a time, in arrival order, until it has 100 or
-- the queue ends: the places that lapsed (or watchers) before them are
-- skipped, not counted.
local now, micros = serverTime()
local queue, from = {}, 0
repeat
  local page = redis.call('ZRANGE', KEYS[3], from, from + 99, 'WITHSCORES')
  for i = 1, #page, 2 do
    local member = page[i]
    -- (nothing read once 100 are listed)
    local lapses = #queue < 200 and string.sub(member, 1, 1) ~= '~' and tonumber(redis.call('ZSCORE', KEYS[4], member))
    if lapses and lapses > now then
      local arrival = tonumber(page[i + 1])
      if arrival < 1e14 then
        arrival = arrival * 1000 -- a waiter of a version that scored in ms
      end
      queue[#queue + 1] = string.match(member, '\31(.*)') or ''
      queue[#queue + 1] = math.max(micros - arrival, 0)
    end
  end
  from = from + 100
until #page < 200 or #queue >= 200
info[#info + 1] = queue
return info
