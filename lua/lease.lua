-- lease: a holder's lease in a sorted set of holders (a semaphore's, or
-- shared holders': tokens scored by the end of their lease, ms of the
-- server's clock), written once for the lease scripts of both
-- (semaphore_lease.lua, shared_lease.lua), which start with it, after
-- prelude.lua (see scripts.go). Not a script of its own.
-- Each lease script serves both the extension and the TTL read: with a TTL
-- (ARGV[2], the extension's) it starts the lease again, without it (the
-- pttl command's layout: the token alone) it reads what is left.
-- lease(set, also, token, ttl): token's lease in set. A semaphore's lock
-- key may hold the token itself, a lone holder's (see
-- semaphore_acquire.lua): its key is its lease, its PTTL read first. TYPE,
-- not an error caught: a user not allowed these commands gets Redis'
-- refusal, not a verdict.
-- With ttl: token's lease starts again, for ttl ms, and set and also (the
-- key that lives as long as the holders) last until the latest lease ends:
-- 1. Or 0 when the lease ended or set has no such member (or is gone): an
-- ended lease goes (the hold may already be someone else's); -1 when set
-- holds a value of another type.
-- Without ttl: the ms left of token's lease (> 0); -2 when it ended, set
-- has no such member or is gone; -3 when set holds a value of another
-- type. (The verdicts, 0 and -1, minus 2; so too a lone holder's PTTL
-- when not above 0.)
local function lease(set, also, token, ttl)
  local kind = redis.call('TYPE', set).ok
  local left, now = kind == 'none' and 0 or -1, nil
  if kind == 'string' and redis.call('GET', set) == token then
    left = redis.call('PTTL', set)
    if ttl then
      redis.call('PEXPIRE', set, ttl)
      return 1
    end
  elseif kind == 'zset' then
    local ends = redis.call('ZSCORE', set, token)
    now = serverTime()
    left = ends and math.max(tonumber(ends) - now, 0) or 0
  end
  if not ttl then
    return left > 0 and left or left - 2
  elseif left == 0 then
    redis.call('ZREM', set, token)
  elseif left > 0 then
    redis.call('ZADD', set, 'XX', now + tonumber(ttl), token)
    local last = redis.call('ZRANGE', set, -1, -1, 'WITHSCORES')
    local keep = math.max(tonumber(last[2]) - now, 1)
    redis.call('PEXPIRE', set, keep)
    redis.call('PEXPIRE', also, keep)
    return 1
  end
  return left
end
