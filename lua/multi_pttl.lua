-- multi_pttl: the shortest remaining TTL among the lock keys of a multi
-- lock we hold (one hash slot's on a cluster).
-- KEYS     the lock keys
-- ARGV[1]  the holder's token
-- Returns  pttl     the shortest TTL in milliseconds (>= 0; -1 if someone
--                   removed a key's expiry and no other key has one)
--          {-2, i}  KEYS[i] is gone (expired or deleted)
--          {-3, i}  KEYS[i] holds another token, or a value of another type
local shortest = -1
for i = 1, #KEYS do
  local held, err = holds(KEYS[i], ARGV[1]) -- (see prelude.lua)
  if held ~= 1 then
    return held and {held - 2, i} or err
  end
  local pttl = redis.call('PTTL', KEYS[i])
  if pttl >= 0 and (shortest < 0 or pttl < shortest) then
    shortest = pttl
  end
end
return shortest
