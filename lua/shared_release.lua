-- shared_release: give back our shared hold (see shared_acquire.lua); the
-- last shared holder to leave frees the lock key, handing it to the first
-- waiter in the queue whose place has not lapsed (and that takes a
-- lock), as release.lua does
-- (handOver, see handover.lua, which comes first). A
-- shared waiter giving up runs this script too (ARGV[3]): it leaves the
-- queue, and passes on a lock handed to it or a share it was let in to.
-- KEYS[1]  the lock key
-- KEYS[2]  the queue
-- KEYS[3]  the queue's expiries
-- KEYS[4]  the shared holders
-- KEYS[5]  optional, with ARGV[3]: the waiter's mark (see handover.lua's
--          leave), set for ARGV[4] ms
-- ARGV[1]  the holder's token
-- ARGV[2]  how to announce and hand over: PUBLISH (SPUBLISH on a
--          cluster; nothing for no announcement), a space, then how long
--          (ms) a waiter the lock is handed to has to claim it:
--          'PUBLISH 1000'. (One argument: the command keeps the layout of
--          the exclusive release's, see lockRef.releaseArgs.)
-- ARGV[3]  optional: '1' when the caller is a waiter giving up
-- Announces as release.lua.
-- Returns  1   released (our share was live, or the key was handed to us)
--          0   our share is gone (its lease ended, or it was broken)
--          -1  the key holds an exclusive holder's token, or a value of
--              another type
local token = ARGV[1]
leave(KEYS, ARGV) -- (see handover.lua)
-- The lock key read as prelude.lua's holds reads it: its value, the
-- verdict on a value of another type, an error as an error.
local held, value = holds(KEYS[1], token)
if not held then
  return value
elseif held ~= 1 and (not value or string.sub(value, 1, 8) ~= '*shared*') then
  -- No shares now: ours ended with the epoch (nothing to do but tidy).
  local gone = redis.pcall('ZREM', KEYS[4], token)
  -- -1: another holder's token, or a key of another type
  return (held == -1 or type(gone) == 'table') and -1 or 0
end
local reply = 1
if held ~= 1 then
  local now = serverTime()
  -- The two latest leases, one command, tell the common cases: ours alone
  -- (the set goes whole below), or ours and the latest of the others'.
  -- Only a share below both is read on its own.
  local top = redis.pcall('ZRANGE', KEYS[4], -2, -1, 'WITHSCORES')
  if top.err then
    return -1 -- the set is of another type
  end
  local lease, last
  for i = #top - 1, 1, -2 do
    if top[i] == token then
      lease = top[i + 1]
    elseif not last then
      last = top[i + 1]
    end
  end
  if not lease and #top == 4 then
    lease = redis.call('ZSCORE', KEYS[4], token)
  end
  reply = lease and tonumber(lease) > now and 1 or 0
  if last and tonumber(last) > now then
    -- Others still hold it: the key lasts as long as the latest lease.
    redis.call('ZREM', KEYS[4], token)
    redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
    local keep = math.max(tonumber(last) - now, 1)
    redis.call('PEXPIRE', KEYS[1], keep)
    redis.call('PEXPIRE', KEYS[4], keep)
    return reply
  end
end
-- The last shared holder left, or a lone reader's hold ends (see
-- shared_acquire.lua): as release.lua, the lock goes to the first live
-- waiter, the epoch's holders' set with it; with nobody in line (the
-- common case), the key and the set just go.
letGo(KEYS[1], KEYS[4], KEYS[2], KEYS[3], ARGV[2], true, true)
return reply
