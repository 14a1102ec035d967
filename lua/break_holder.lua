-- break_holder: end one hold of a lock, named by its ID, for an operator's
-- Client.BreakHolder, as that holder's own release would: the release
-- script of its kind runs with its token (release.lua for a lock key's
-- token, shared_release.lua for a shared holder, semaphore_release.lua for
-- a semaphore's), so the hold is handed on or deleted and announced the
-- same way. Each of those is made a function of its KEYS and ARGV
-- (releaseLock, releaseShare, releaseSlot; see scripts.go), after
-- state.lua, which reads info and value, and the functions of
-- handover.lua.
-- KEYS     state.lua's
-- ARGV[1]  the hold's ID: the first 16 hex digits of
--          SHA1('holder:' .. its token), the token without its metadata
--          (keys.go's holderID)
-- ARGV[2]  PUBLISH, or SPUBLISH on a cluster; '' for none
-- ARGV[3]  how long (ms) a lock or slot handed to a waiter is held for it
-- A lock key's one holder is an exclusive lock's, an election's, or a
-- multi lock's for this name alone (its other names are not here).
-- Returns  state.lua's info as it was before, with an eleventh element: 1
--          when a running hold had the ID and was released, else 0
-- ours tells whether a holder's value (its token, then any metadata after
-- \31) has the ID.
local function ours(member)
  return string.sub(redis.sha1hex('holder:' .. string.match(member, '^[^\31]*')), 1, 16) == ARGV[1]
end
-- find returns the member of the holders' sorted set that has the ID, or
-- nil. One whose lease ended is found too: its kind's release then tidies
-- it away and replies 0 (not a running hold), reading the clock itself.
local function find(set)
  for _, member in ipairs(redis.call('ZRANGE', set, 0, -1)) do
    if ours(member) then
      return member
    end
  end
end
local released = 0
if info[8] == 'semaphore' then
  -- (a lone holder's key holds its token, see semaphore_acquire.lua)
  local member = value and (ours(value) and value) or not value and find(KEYS[1])
  if member and info[9] ~= '' then
    released = releaseSlot({KEYS[1], KEYS[3], KEYS[4], KEYS[6]}, {member, ARGV[2] .. ' ' .. ARGV[3] .. ' ' .. info[9]})
  elseif member then
    -- No limit key to keep for a waiter handed the slot: the slot is
    -- freed and announced, and the waiters take it at their attempt.
    -- (state.lua saw a running lease; within one script it still runs.)
    released = redis.call('ZREM', KEYS[1], member)
    announceFreed(ARGV[2], KEYS[1])
  end
elseif info[8] == 'shared' then
  -- (or a lone reader's hold, the key's value: see shared_acquire.lua)
  local member = find(KEYS[5]) or value and ours(value) and value
  if member then
    released = releaseShare({KEYS[1], KEYS[3], KEYS[4], KEYS[5]}, {member, ARGV[2] .. ' ' .. ARGV[3]})
  end
elseif value and ours(value) then
  released = releaseLock({KEYS[1], KEYS[3], KEYS[4], KEYS[5]}, {value, ARGV[2] .. ' ' .. ARGV[3]})
  -- A release with nobody in line announces nothing; a break does, as
  -- Break's does: an election's observers (ObserveLeader) hear the leader
  -- gone at once, not at the broken leader's next extension.
  if released == 1 and ARGV[2] ~= '' and not redis.call('GET', KEYS[1]) then
    redis.call(ARGV[2], KEYS[1] .. ':released', '1')
  end
end
info[11] = released == 1 and 1 or 0
return info
