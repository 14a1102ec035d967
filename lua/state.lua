-- state: what holds a lock's name, read without writing anything. Not a
-- script of its own: inspect.lua, break.lua and break_holder.lua start
-- with it, after prelude.lua (see scripts.go): it reads the state for
-- them into info and value (below), or replies its error.
-- KEYS[1]  the lock key (a semaphore's holders, see semaphore_acquire.lua)
-- KEYS[2]  the fence counter
-- KEYS[3]  the queue (see acquire.lua)
-- KEYS[4]  the queue's expiries
-- KEYS[5]  the shared holders (see shared_acquire.lua)
-- KEYS[6]  a semaphore's limit
-- (all in one hash slot)
-- info is {held, pttl, metadata, fence, waiters, holder, count, kind,
-- limit, holders}, or the script replies an error:
--   held      1 when the name is held (a lock key, or a semaphore with a
--             running lease), else 0
--   pttl      the lock key's PTTL (ms; -1: no expiry; -2: not held): for
--             a semaphore or shared holders, the latest lease's end
--   metadata  what follows the first \31 (unit separator) in the key's
--             value: the exclusive holder's metadata; '' when none. The
--             token in front of it is a secret and does not leave the
--             server.
--   fence     the fence counter as a string, '' when there is none
--   waiters   the waiters in the queue whose place has not lapsed
--   holder    the first 16 hex digits of the value's SHA1 ('' when not
--             held, and for a semaphore): tells holders apart (a quorum's
--             nodes) without showing the token
--   count     how many shared holders' (or a semaphore's holders') leases
--             are running; 0 for an exclusive lock
--   kind      'lock', 'shared' (the key holds the shared marker, see
--             shared_acquire.lua) or 'semaphore'; '' when not held
--   limit     a semaphore's limit as its holders set it, '' when none
--   holders   every holder, flat: id, metadata, lease left (ms), id, ...;
--             for 'shared' and 'semaphore' the first 100 by lease end, for
--             'lock' the one (its lease left is pttl). The id is
--             redis.sha1hex('holder:' .. token):sub(1, 16) (holderID in
--             keys.go), never the token. Empty when not held.
--   the error WRONGTYPE naming the key when one of the keys holds a value
--             of another type, or KEYS[1] a sorted set that is no
--             semaphore's (see below); any other error as Redis gave it
-- and value is the lock key's value (false or nil when there is none,
-- and for a semaphore), for the break scripts.
-- read(what, command, key, ...) runs command on key: its reply; or nil,
-- the error, and for WRONGTYPE the type key holds (the error then says it
-- holds that, not what).
local function read(what, command, key, ...)
  local reply = redis.pcall(command, key, ...)
  if type(reply) == 'table' and reply.err then
    if string.find(reply.err, 'WRONGTYPE', 1, true) then
      local kind = redis.call('TYPE', key).ok
      return nil, redis.error_reply('WRONGTYPE ' .. key .. ' holds a ' .. kind .. ', not ' .. what), kind
    end
    return nil, reply
  end
  return reply
end
-- holder appends to list the holder whose value is value (its token, then
-- any metadata after \31): its id, its metadata, and left.
local function holder(list, value, left)
  list[#list + 1] = string.sub(redis.sha1hex('holder:' .. string.match(value, '^[^\31]*')), 1, 16)
  list[#list + 1] = string.match(value, '\31(.*)') or ''
  list[#list + 1] = left
  return list
end
-- holders lists the live members of a sorted set of holders (values as
-- holder's, scored by lease end), the first to end first.
local function holders(key, now)
  local list = {}
  local members = redis.call('ZRANGEBYSCORE', key, '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', 0, 100)
  for i = 1, #members, 2 do
    holder(list, members[i], tonumber(members[i + 1]) - now)
  end
  return list
end
-- The reads run before the functions that the scripts define after this
-- file (which run nothing). A plain GET first: a lock needs no TYPE (nor
-- the right to send it). A sorted set there is a semaphore's holders.
local value, err, kind = read('a lock', 'GET', KEYS[1])
if err and kind ~= 'zset' then
  return err
end
local fence, waiters
fence, err = read('a fence counter', 'GET', KEYS[2])
if err then return err end
-- The queue's type is checked; its places lapse unless their waiter
-- comes back (see acquire.lua): count those that have not.
err = select(2, read('a waiters\' queue', 'ZCARD', KEYS[3]))
if err then return err end
local now = serverTime()
waiters, err = read('a waiters\' queue', 'ZCOUNT', KEYS[4], '(' .. now, '+inf')
if err then return err end
fence = fence or ''
local info = {0, -2, '', fence, waiters, '', 0, '', '', {}} -- free
-- A lock key's PTTL, read first for every value; a semaphore's only once
-- its set is known to hold a running lease.
local pttl = value and redis.call('PTTL', KEYS[1])
if kind == 'zset' then
  local limit
  limit, err = read('a semaphore limit', 'GET', KEYS[6])
  if err then return err end
  -- A semaphore's holders set its limit, which lasts as long as they do.
  -- Without it the sorted set is one only if its members are tokens
  -- (base32 after the mark 'n', the limit, '-'; a waiter's after its
  -- Client's tag and '.', see waiterToken): another program's set is no
  -- lock, nor one to break. Checked on its first three members, each
  -- exactly a token's shape (26 base32 digits, after the mark, and a
  -- waiter's after its Client's 10-digit tag and '.'; an older
  -- version's without the limit nor, not waiting, the mark):
  -- one command, only when the limit is missing.
  if not limit then
    local body = string.rep('[A-Z2-7]', 26) .. '$'
    for _, member in ipairs(redis.call('ZRANGE', KEYS[1], 0, 2)) do
      local token = string.match(member, '^[^\31]*')
      if not (string.match(token, '^' .. body) or string.match(token, '^n%d*%-?' .. body) or string.match(token, '^' .. string.rep('[A-Z2-7]', 10) .. '%.n%d*%-?' .. body)) then
        return redis.error_reply('WRONGTYPE ' .. KEYS[1] .. ' holds a zset that is not a semaphore (no limit, and members that are no tokens)')
      end
    end
  end
  local count = redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')
  if count > 0 then
    info = {1, redis.call('PTTL', KEYS[1]), '', fence, waiters, '', count, 'semaphore', limit or '', holders(KEYS[1], now)}
  end
elseif value and loneSlot(value) then
  -- a lone holder's slot (see semaphore_acquire.lua): a semaphore held once
  info = {1, pttl, '', fence, waiters, '', 1, 'semaphore', tostring(loneSlot(value)), holder({}, value, pttl)}
elseif value then
  local count, list, metadata = 0, {}, ''
  kind = 'lock'
  if string.sub(value, 1, 8) == '*shared*' then
    kind = 'shared'
    count, err = read('the shared holders', 'ZCOUNT', KEYS[5], '(' .. now, '+inf')
    if err then return err end
    if count > 0 then
      list = holders(KEYS[5], now)
    end
  elseif loneMark(value) == 's' then
    -- a lone reader's hold (a shared token, see shared_acquire.lua): a
    -- shared hold of one, its metadata with it in Holders
    kind, count = 'shared', 1
    list = holder(list, value, pttl)
  else
    list = holder(list, value, pttl)
    metadata = list[2] -- the exclusive holder's, as holder split it off
  end
  info = {1, pttl, metadata, fence, waiters, string.sub(redis.sha1hex(value), 1, 16), count, kind, '', list}
end
