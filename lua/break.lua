-- break: end a lock whatever its token, for an operator's Client.Break,
-- and hand it to the first waiter in the queue whose place has not
-- lapsed (and that takes a lock), or else delete it, as release.lua does
-- for its holder. state.lua comes first and reads info and value (see
-- state.lua for KEYS), then the function handOver (handover.lua).
-- ARGV[1]  PUBLISH, or SPUBLISH on a cluster, to announce as release.lua
--          does; '' for none
-- ARGV[2]  how long (ms) the lock handed to a waiter is held for it
--          (announced as release.lua does)
-- A lock held shared (AcquireShared) loses every share: the shared
-- holders' set is deleted with the marker. A semaphore loses every slot:
-- its holders and its limit are deleted, and the release announced, so
-- that its waiters take the slots.
-- Returns  state.lua's info as it was before the break, with an eleventh
--          element: 1 when the lock was handed to a waiter, else 0
info[11] = 0
if info[8] == 'shared' then
  redis.call('DEL', KEYS[5])
end
if info[8] == 'semaphore' then
  redis.call('DEL', KEYS[1], KEYS[6])
elseif not value then
  return info
elseif handOver(KEYS[1], KEYS[5], KEYS[3], KEYS[4], ARGV[1], ARGV[2]) then
  info[11] = 1
  return info
end
-- Announced even with nobody in line (handOver's rule): a broken lock
-- is rare, and a waiter that could not queue hears it; a semaphore's
-- waiters take the slots.
announceFreed(ARGV[1], KEYS[1])
return info
