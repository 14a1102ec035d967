-- shared_extend: reset the lease of our shared hold (see
-- shared_acquire.lua), and the lock key's TTL to the latest lease's end.
-- KEYS[1]  the lock key
-- KEYS[2]  the shared holders
-- ARGV[1]  the holder's token
-- ARGV[2]  the new TTL in milliseconds
-- Returns  1   extended
--          0   our share is gone (its lease ended, or it was broken)
--          -1  an exclusive holder (or a waiter handed the lock) holds the
--              key, or a key holds a value of another type
-- The lock key first (prelude.lua's holds): it holds the marker while
-- shares run; our own token there is a lone reader's hold, ours (see
-- shared_acquire.lua).
local held, value = holds(KEYS[1], ARGV[1])
if not held then
  return value
end
if held == 1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2]) -- a lone reader's hold: the key is its lease
  return 1
end
if not value or string.sub(value, 1, 8) ~= '*shared*' then
  return held == 0 and 0 or -1
end
-- Then our lease (lease.lua's extendLease): an ended one goes (another
-- holder's lease kept the key alive, not ours); the key and the set last
-- as long as the latest lease.
return extendLease(KEYS[2], KEYS[1], ARGV[1], ARGV[2])
