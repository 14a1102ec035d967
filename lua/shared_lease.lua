-- shared_lease: reset the lease of our shared hold (see
-- shared_acquire.lua), and the lock key's TTL to the latest lease's end
-- (the extension); or read the remaining lease of our shared hold (the
-- TTL read: no ARGV[2]).
-- KEYS[1]  the lock key
-- KEYS[2]  the shared holders
-- ARGV[1]  the holder's token
-- ARGV[2]  the extension: the new TTL in milliseconds; none: the TTL read
-- Returns, the extension:
--          1   extended
--          0   our share is gone (its lease ended, or it was broken)
--          -1  an exclusive holder (or a waiter handed the lock) holds the
--              key, or a key holds a value of another type
-- the TTL read:
--          ms >= 0  the lease left
--          -2       our share is gone
--          -3       an exclusive holder holds the key, or a key holds a
--                   value of another type
-- The lock key first (prelude.lua's holds): it holds the marker while
-- shares run; our own token there is a lone reader's hold, ours (see
-- shared_acquire.lua): the key is its lease.
local held, value = holds(KEYS[1], ARGV[1])
if not held then
  return value
elseif held == 1 and ARGV[2] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
elseif held == 1 then
  return redis.call('PTTL', KEYS[1])
elseif not value or string.sub(value, 1, 8) ~= '*shared*' then
  return ARGV[2] and held or held - 2 -- (the verdicts as lease.lua's lease replies them)
end
-- Then our lease (lease.lua's lease): an ended one goes (another holder's
-- lease kept the key alive, not ours); the key and the set last as long
-- as the latest lease.
return lease(KEYS[2], KEYS[1], ARGV[1], ARGV[2])
