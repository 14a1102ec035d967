-- multi_extend: reset the lease of every lock key of a multi lock (one
-- hash slot's on a cluster), if every one still holds our token.
-- KEYS     the lock keys
-- ARGV[1]  the holder's token
-- ARGV[2]  the new TTL in milliseconds
-- Returns  1        every key extended (a bare number: no name, no
--                   array to read; likewise multi_release's and
--                   multi_pttl's verdicts on no name)
--          {0, i}   KEYS[i] is gone (expired or deleted); none extended
--          {-1, i}  KEYS[i] holds another token, or a value of another
--                   type; none extended
-- (Each key read as prelude.lua's holds reads it.)
for i = 1, #KEYS do
  local held, err = holds(KEYS[i], ARGV[1])
  if held ~= 1 then
    return held and {held, i} or err
  end
end
for i = 1, #KEYS do
  redis.call('PEXPIRE', KEYS[i], ARGV[2])
end
return 1
