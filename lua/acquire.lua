-- acquire: take the lock if nobody holds it, and a fencing token with it;
-- a waiter that finds it held takes (or keeps) its place in the lock's
-- queue, so that the holder's release hands the lock to it (release.lua).
-- KEYS[1]  the lock key
-- KEYS[2]  with ARGV[3] = '1': the fence counter key
-- then, with ARGV[4] > 0, the last three:
--   the queue: waiters' tokens by arrival time (µs, as every kind's:
--   see handover.lua)
--   the queue's expiries: waiters' tokens by the time (ms) their place
--   lapses unless they come back
--   the caller's mark: set when it left while a command of its was on its
--   way (see handover.lua's leave); a marked caller takes nothing. A caller
--   in line cannot be marked (the give-back that marks takes it out, and a
--   marked one never gets back in): only one not in line reads its mark.
-- (all in one hash slot)
-- ARGV[1]  the caller's token
-- ARGV[2]  the TTL in milliseconds
-- ARGV[3]  '1': take a fence (INCR KEYS[2]); '0': no fence
-- ARGV[4]  the caller waits: keep its place in the queue for this many ms;
--          '0': it does not wait, and does not queue
-- Returns one integer (an array would cost the client more to read):
--          fence >= 1   acquired with ARGV[3] = '1': the counter's next
--                       value, raised to the server's TIME in microseconds
--                       if it is below (also when the key
--                       already holds ARGV[1]: the lock was handed to this
--                       waiter by a release, or a retried command whose
--                       first reply was lost)
--          0            acquired, without a fence
--          -2 - pttl    held by someone else, for pttl ms more; -1: the key
--                       has no expiry (PTTL -1), or the caller is marked
--          an error     WRONGTYPE when the key holds a non-string value, or
--                       the counter's error, or a counter that did not give
--                       a positive number (then nothing is left set)
-- The queue commands run under pcall: a user not allowed to queue still
-- takes locks, and its waiters poll instead.
local token, ttl = ARGV[1], ARGV[2]
local wait = tonumber(ARGV[4])
local queue, expiries = KEYS[#KEYS - 2], KEYS[#KEYS - 1]
-- The caller's left mark (see prelude.lua's hasLeft).
local mark = wait > 0 and KEYS[#KEYS] or nil
-- A waiter mostly finds the lock held by someone else, or handed to it:
-- reading first spares a SET that would fail. (A script runs alone: a key
-- found missing is still missing for the SET.) A caller that does not
-- wait sets first, and reads only what it did not get.
local ours = wait == 0 and redis.call('SET', KEYS[1], token, 'NX', 'PX', ttl)
local value, err = false, nil
if not ours then
  value, err = lockValue(KEYS[1], '') -- (see prelude.lua)
  if err then
    return err
  end
end
if wait > 0 and not value then
  -- Out of line first: one that was not in line may have left.
  if redis.pcall('ZREM', queue, token) ~= 1 and hasLeft(mark) then
    return -1
  end
  ours = redis.call('SET', KEYS[1], token, 'NX', 'PX', ttl)
end
if value == token then
  -- Handed to us by a release, or our own earlier attempt won and its
  -- reply was lost. Either way it is ours: renew it to our TTL. The fence
  -- below is a new, higher number, still ours alone. Our place in the
  -- queue is gone already: the release (or break) that handed it to us
  -- took it, as did the earlier attempt that won.
  redis.call('PEXPIRE', KEYS[1], ttl)
  ours = true
elseif ours and wait > 0 then
  redis.pcall('ZREM', expiries, token) -- (and out of line, above)
end
if ours then
  -- The fence step (prelude.lua): INCR, raised to the server's clock. A
  -- failed acquire must leave nothing held.
  return heldFence(ARGV[3], KEYS[2], nil, 'DEL', KEYS[1])
end
-- The queue join (prelude.lua): a waiter coming back keeps its place; one
-- that was not in line and left does not get back in.
if wait > 0 and not joinQueue(queue, expiries, token, wait, mark) then
  return -1
end
return -2 - redis.call('PTTL', KEYS[1])
