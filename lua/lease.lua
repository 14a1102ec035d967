-- lease: a holder's lease in a sorted set of holders (a semaphore's, or
-- shared holders': tokens scored by the end of their lease, ms of the
-- server's clock), written once for the extend and pttl scripts of both,
-- which start with it, after prelude.lua (see scripts.go). Not a script of
-- its own.
-- leaseLeft(set, token): the ms left of token's lease (> 0), 0 when it
-- ended or set has no such member (or is gone), -1 when set holds a value
-- of another type; and the server's clock (ms). A semaphore's lock key may
-- hold the token itself, a lone holder's (see semaphore_acquire.lua): its
-- key's PTTL, and true. TYPE, not an error caught:
-- a user not allowed these commands gets Redis' refusal, not a verdict.
local function leaseLeft(set, token)
  local kind = redis.call('TYPE', set).ok
  if kind == 'string' and redis.call('GET', set) == token then
    return redis.call('PTTL', set), nil, true -- a lone holder's (see semaphore_acquire.lua)
  end
  if kind ~= 'zset' then
    return kind == 'none' and 0 or -1
  end
  local lease = redis.call('ZSCORE', set, token)
  local now = serverTime()
  return lease and math.max(tonumber(lease) - now, 0) or 0, now
end
-- extendLease(set, also, token, ttl): token's lease starts again, for ttl
-- ms, and set and also (the key that lives as long as the holders) last
-- until the latest lease ends: 1. Or leaseLeft's 0 (an ended lease goes:
-- the hold may already be someone else's) or -1.
local function extendLease(set, also, token, ttl)
  local left, now, lone = leaseLeft(set, token)
  if lone then
    redis.call('PEXPIRE', set, ttl) -- its key is its lease
    return 1
  end
  if left == 0 then
    redis.call('ZREM', set, token)
  end
  if left <= 0 then
    return left
  end
  redis.call('ZADD', set, 'XX', now + tonumber(ttl), token)
  local last = redis.call('ZRANGE', set, -1, -1, 'WITHSCORES')
  local keep = math.max(tonumber(last[2]) - now, 1)
  redis.call('PEXPIRE', set, keep)
  redis.call('PEXPIRE', also, keep)
  return 1
end
