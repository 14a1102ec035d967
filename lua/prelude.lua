-- prelude: the server's clock and the fence step, written once for every
-- script that reads the clock or takes a fence, which starts with it (see
-- scripts.go). Not a script of its own.
-- serverTime(reply): the server's clock as ms and µs, from TIME's reply
-- (read here when reply is nil). Leases and places' lapses are ms of this
-- clock, queue arrivals and fences µs. (About 1.8e15 µs today: exact in a
-- Lua number, an int64, a JavaScript number and SQL's BIGINT until the
-- 2250s.)
local function serverTime(reply)
  reply = reply or redis.call('TIME')
  local micros = tonumber(reply[1]) * 1000000 + tonumber(reply[2])
  return math.floor(micros / 1000), micros
end
-- fenceClock(): the server's clock in µs for a fence (or a queue join),
-- or nil and an error reply for a user not allowed to read it (an ACL
-- without +time): no fence that could repeat one.
local function fenceClock()
  local reply = redis.pcall('TIME')
  if type(reply) == 'table' and reply.err then
    return nil, redis.error_reply('ERR a fence needs the server clock (TIME), which this user may not read: ' .. reply.err)
  end
  return select(2, serverTime(reply))
end
-- takeFence(counter, micros): the next fence: the counter's next value
-- (INCR), raised to micros, the server's clock in µs (fenceClock's, read
-- after the INCR when micros is nil), when it is below. Fences never go
-- backwards, even when the counter was lost (a restart without
-- persistence, eviction, FLUSHALL), came back from an older snapshot, or
-- from a replica that missed writes: every fence handed out before was at
-- most the clock of its own acquisition, so this one is above them all, as
-- long as the clock has not stepped back by more than the outage lasted.
-- Returns the fence, or nil and an error reply: the counter's error, or a
-- counter below 1 (someone set it so: such a fence would read as "held",
-- and could repeat a number already handed out). On an error the caller
-- undoes what it took: a failed acquire leaves nothing held.
local function takeFence(counter, micros)
  local fence, err = redis.pcall('INCR', counter), nil
  if type(fence) == 'table' then
    return nil, fence -- (INCR's error)
  elseif fence < 1 then
    return nil, redis.error_reply('ERR the fence counter ' .. counter .. ' gave ' .. fence .. ', not a positive number')
  elseif not micros then
    micros, err = fenceClock()
  end
  if not micros then
    return nil, err
  elseif fence < micros then
    redis.call('SET', counter, string.format('%d', micros))
    fence = micros
  end
  return fence
end
-- heldFence(flag, counter, micros, ...): an acquire's reply once the
-- caller holds: 0 without a fence (flag not '1'); else takeFence's fence,
-- or its error once the command ... (the caller's write undone) ran: a
-- failed acquire must leave nothing held.
local function heldFence(flag, counter, micros, ...)
  if flag ~= '1' then
    return 0
  end
  local fence, err = takeFence(counter, micros)
  if not fence then
    redis.call(...)
  end
  return fence or err
end
-- hasLeft(mark): whether mark, the caller's left mark (a key, or nil for a
-- caller that does not wait), is set: the caller is a waiter that left,
-- and this a late command of its, which must neither take the lock nor
-- queue it again (a release would hand the lock to nobody). Only a caller
-- not in line reads it: one in line cannot be marked (the give-back that
-- marks it takes it out, and a marked one never gets back in). Read under
-- pcall: a user without the grant is never marked.
local function hasLeft(mark)
  return mark ~= nil and redis.pcall('GET', mark) == '1'
end
-- joinQueue(queue, expiries, member, wait, mark, micros): the queue join,
-- written once for every kind's acquire. member takes its place in queue,
-- scored by its arrival: micros, the server's clock in µs (read here when
-- nil), as every kind's (see handover.lua), so that two waiters of one
-- millisecond keep their order (a tie would fall back to the members'
-- order). NX: a waiter coming back keeps its place, and only its expiry
-- moves on: its place lapses wait ms from now unless it comes back again.
-- Both keys vanish wait ms after the last join: a queue everybody left
-- goes by itself. A member that was not in line and hasLeft(mark) does not
-- get back in: joinQueue returns false; else true. Every command runs under
-- pcall: a user not allowed to queue (or to read the clock) still takes
-- locks, and its waiters poll instead.
local function joinQueue(queue, expiries, member, wait, mark, micros)
  micros = micros or fenceClock()
  if not micros then
    return true -- (a user not allowed to read the clock)
  elseif redis.pcall('ZADD', queue, 'NX', micros, member) == 1 and hasLeft(mark) then
    redis.pcall('ZREM', queue, member)
    return false
  end
  redis.pcall('ZADD', expiries, math.floor(micros / 1000) + wait, member)
  redis.pcall('PEXPIRE', queue, wait)
  redis.pcall('PEXPIRE', expiries, wait)
  return true
end
-- loneMark(value): the mark of the caller whose token value, a lock key's
-- string, is, when it is exactly a token the library makes for a kind
-- that takes a name alone with SET NX (see singleStore.acquire): 's' a
-- reader's (see shared_acquire.lua), or a semaphore holder's limit, a
-- number ('n', the limit, '-' in its token, see lockRef.mark and
-- semaphore_acquire.lua); else nil. Exactly: its Client's tag and '.' (or
-- none), the mark, 26 base32 digits (rand.Text), then only metadata after
-- '\31': a value another program set that merely starts like one is
-- another holder's.
local function loneMark(value)
  -- The body's 26 digits are counted, not matched one class each: this
  -- runs on every read of a lock key that is not the reader's own.
  local token = string.match(value, '^[^\31]*')
  local body = string.match(token, '^[A-Z2-7]*%.?s([A-Z2-7]*)$')
  if body then
    return #body == 26 and 's' or nil
  end
  -- (limit is a local, not tonumber's argument: on miniredis gopher-lua's
  -- string.match gives no value at all when nothing matches, and tonumber
  -- of no value fails; loneMark always returns one, for loneSlot.)
  local limit
  limit, body = string.match(token, '^[A-Z2-7]*%.?n(%d+)%-([A-Z2-7]*)$')
  return limit and #body == 26 and tonumber(limit) or nil
end
-- loneSlot(value): a semaphore's limit when value is its lone holder's
-- token (loneMark). Every other kind refuses such a key as WRONGTYPE
-- (lockValue), as it does the semaphore's set.
local function loneSlot(value)
  return tonumber(loneMark(value)) -- (nil for 's', and for nil)
end
-- lockValue(key, name, own): the lock key's value, false when there is
-- none; or nil and the error: for a value of another type WRONGTYPE,
-- saying 'the lock key ' .. name .. 'holds a value that is not a lock'
-- (and true), else Redis' (no right to read it, out of memory). own, the
-- caller's token, is its own value whatever its shape: a key that holds it
-- is the caller's, and its lone-holder test is skipped (see loneMark's
-- cost): holds passes it, so a plain, shared or multi release, and a
-- shared or multi lock's extension or TTL read, skip it on their own key;
-- the acquire scripts read keys that are mostly another's and pass none.
local function lockValue(key, name, own)
  local value, other = redis.pcall('GET', key), 'a semaphore, not a lock'
  if type(value) == 'table' and not string.find(value.err, 'WRONGTYPE', 1, true) then
    return nil, value
  elseif type(value) == 'table' then
    other = 'a value that is not a lock'
  elseif not value or value == own or not loneSlot(value) then
    return value
  end
  return nil, redis.error_reply('WRONGTYPE the lock key ' .. name .. 'holds ' .. other), true
end
-- holds(key, token): whether the lock key holds token (the holder's whole
-- value: its token, then any metadata): 1 and the value; 0 and false when
-- the key is gone (expired or deleted); -1 and the value when it holds
-- another token, -1 and false when a value of another type (not a lock of
-- ours: a verdict); or nil and the error reply for any other error (no
-- permission, out of memory): an error, not a verdict.
local function holds(key, token)
  local value, err, other = lockValue(key, '', token)
  if other then
    return -1, false
  elseif err then
    return nil, err
  end
  return value == token and 1 or value and -1 or 0, value
end
-- kindOf(member): the kind of a member of a queue: the mark after its
-- Client's tag and '.' (see waiterToken), 's' a shared waiter, 'n' a
-- semaphore's, '' an exclusive one (or a multi lock's, which takes a lock
-- too); '~' a multi waiter's watcher (see multi_acquire.lua), which takes
-- nothing and waits for nobody's turn.
local function kindOf(member)
  return string.match(member, '^[A-Z2-7]*%.?([sn~]?)')
end
-- dequeue(queue, expiries, member): member out of queue and of its
-- expiries; returns how many places it had (0 or 1). The expiries' ZREM
-- runs under pcall: each caller read the expiries first, so only a user
-- refused that write (its ACL) could see it fail, and its place then
-- lapses by itself.
local function dequeue(queue, expiries, member)
  local had = redis.call('ZREM', queue, member)
  redis.pcall('ZREM', expiries, member)
  return had
end
-- waiters(queue, expiries, now): how many wait in queue once the places
-- that lapsed (see joinQueue) are dropped; one ZCARD when nobody waits.
local function waiters(queue, expiries, now)
  local waiting = redis.call('ZCARD', queue)
  if waiting > 0 then
    for _, gone in ipairs(redis.call('ZRANGEBYSCORE', expiries, '-inf', now)) do
      waiting = waiting - dequeue(queue, expiries, gone)
    end
  end
  return waiting
end
-- hasTurn(queue, member, waiting, mark, kinds, room): whether fewer than
-- room waiters of kinds (a set of kindOf's marks) are in line before
-- member, all in line when it is not (it would join at the back), with
-- waiting, waiters' count, in line (0: no queue to read); nil when member
-- is not in line and hasLeft(mark). Arrival order: a caller that finds a
-- name free still lets those ahead go first.
local function hasTurn(queue, member, waiting, mark, kinds, room)
  local rank = waiting > 0 and redis.call('ZRANK', queue, member)
  if not rank and hasLeft(mark) then
    return nil
  end
  if waiting > 0 and rank ~= 0 then
    for _, other in ipairs(redis.call('ZRANGE', queue, 0, rank and rank - 1 or -1)) do
      if kinds[kindOf(other)] then
        room = room - 1
      end
    end
  end
  return room > 0
end
