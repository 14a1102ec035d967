-- state: a lock's state, read without writing anything. Not a script of
-- its own: inspect.lua and break.lua start with it (see scripts.go).
-- KEYS[1]  the lock key
-- KEYS[2]  the fence counter
-- KEYS[3]  the queue (see acquire.lua)
-- KEYS[4]  the queue's expiries
-- KEYS[5]  the shared holders (see shared_acquire.lua)
-- (all in one hash slot)
-- state() returns {held, pttl, metadata, fence, waiters, holder, shared},
-- or nil
-- and an error reply:
--   held      1 when the lock key exists, else 0
--   pttl      the key's PTTL (ms; -1: no expiry; -2: no key)
--   metadata  what follows the first \31 (unit separator) in the key's
--             value: the holder's metadata; '' when none. The token in
--             front of it is a secret and does not leave the server.
--   fence     the fence counter as a string, '' when there is none
--   waiters   the waiters in the queue whose place has not lapsed
--   holder    the first 16 hex digits of the value's SHA1 ('' when not
--             held): tells holders apart (a quorum's nodes) without
--             showing the token
--   shared    how many shared holders' leases are running when the key
--             holds the shared marker (see shared_acquire.lua), else 0
--   the error WRONGTYPE naming the key when one of the keys holds a value
--             of another type; any other error as Redis gave it
-- and, third, the lock key's value (false when there is none), for
-- break.lua.
local function read(what, command, key, ...)
  local reply = redis.pcall(command, key, ...)
  if type(reply) == 'table' and reply.err then
    if string.find(reply.err, 'WRONGTYPE', 1, true) then
      return nil, redis.error_reply('WRONGTYPE ' .. key .. ' holds a ' ..
        redis.call('TYPE', key).ok .. ', not ' .. what)
    end
    return nil, reply
  end
  return reply
end
local function state()
  local value, fence, waiters, err
  value, err = read('a lock', 'GET', KEYS[1])
  if err then return nil, err end
  fence, err = read('a fence counter', 'GET', KEYS[2])
  if err then return nil, err end
  -- The queue's type is checked; its places lapse unless their waiter
  -- comes back (see acquire.lua): count those that have not.
  local queued
  queued, err = read('a waiters\' queue', 'ZCARD', KEYS[3])
  if err then return nil, err end
  local now = redis.call('TIME')
  now = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
  waiters, err = read('a waiters\' queue', 'ZCOUNT', KEYS[4], '(' .. now, '+inf')
  if err then return nil, err end
  fence = fence or ''
  if not value then
    return {0, -2, '', fence, waiters, '', 0}, nil, value
  end
  local shared = 0
  if string.sub(value, 1, 8) == '*shared*' then
    shared, err = read('the shared holders', 'ZCOUNT', KEYS[5], '(' .. now, '+inf')
    if err then return nil, err end
  end
  local metadata = ''
  local at = string.find(value, '\31', 1, true)
  if at then
    metadata = string.sub(value, at + 1)
  end
  return {1, redis.call('PTTL', KEYS[1]), metadata, fence, waiters, string.sub(redis.sha1hex(value), 1, 16), shared}, nil, value
end
