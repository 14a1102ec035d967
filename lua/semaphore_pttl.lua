-- semaphore_pttl: the remaining lease of our semaphore slot.
-- KEYS[1]  the holders (see semaphore_acquire.lua)
-- ARGV[1]  the holder's token
-- Returns  ms >= 0  the lease left
--          -2       our slot is gone
--          -3       the key holds a value of another type
local left = leaseLeft(KEYS[1], ARGV[1]) -- (see lease.lua)
return left > 0 and left or left - 2
