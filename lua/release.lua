-- release: if the lock key holds our token, hand the lock to the first
-- waiter in the lock's queue whose place has not lapsed and that takes a
-- lock (not a semaphore's), or else delete it;
-- and announce either to the waiters (handOver, see handover.lua, which
-- comes first). A waiter giving up runs this script too (ARGV[3]): it
-- leaves the queue, and passes on a lock handed to it.
-- KEYS[1]  the lock key
-- KEYS[2]  optional: the queue (see acquire.lua)
-- KEYS[3]  with KEYS[2]: the queue's expiries
-- KEYS[4]  with KEYS[2]: the shared holders' set, which a hand-over to a
--          shared waiter fills (see handover.lua)
-- KEYS[5]  optional, with ARGV[3]: the waiter's mark (see handover.lua's
--          leave), set for ARGV[4] ms
-- ARGV[1]  the holder's token
-- ARGV[2]  how to announce, a space, how long to hand over for:
--          'PUBLISH 1000' (one argument: every kind's release has one
--          layout, see lockRef.releaseArgs). First PUBLISH, or SPUBLISH on
--          a cluster: a plain release is announced
--          on the channel KEYS[1] .. ':released', a hand-over on that
--          channel .. ':' .. the tag of the waiter's Client (the token's
--          part before a '.'), which only that Client hears (same hash
--          slot); nothing for none. Then how long (ms) the lock handed to
--          a waiter is held for it: the
--          waiter takes it at the announcement, without a claim, or claims
--          it with the acquire script (a fenced waiter, or one that cannot
--          tell its lease is long enough); unclaimed and unextended, it
--          lapses after that. Without the queue's keys, the command alone.
-- ARGV[3]  optional: '1' when the caller is a waiter giving up: its place
--          in the queue is removed first
-- Announces '1'        released: anyone may take it; not announced when
--                      the queue is empty (a waiter, and a multi waiter's
--                      watcher, keeps its place for as long as it
--                      listens, so nobody is left to tell); also when the
--                      queue cannot be read
--           'g:' .. t .. '/' .. ms
--                      handed to the waiter whose token's SHA1 starts
--                      with the 16 hex digits t (the token itself is
--                      a secret and is not published), for ARGV[2]'s ms
--                      from now
-- Returns  1   released (deleted or handed on)
--          0   the key is gone (expired or deleted)
--          -1  the key holds another token, or a value of another type
leave(KEYS, ARGV) -- (see handover.lua)
-- A value of another type is not our lock; any other error (no
-- permission, out of memory) is an error, not a verdict (prelude.lua's
-- holds).
local held, err = holds(KEYS[1], ARGV[1])
if held ~= 1 then
  return held or err
end
-- Nobody in line: nobody to tell (see above), the common case, kept to the
-- commands it needs; without the right to ZRANGE, announced (see letGo).
letGo(KEYS[1], KEYS[4], KEYS[2], KEYS[3], ARGV[2], #KEYS >= 4)
return 1
