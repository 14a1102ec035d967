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
-- fenceClock(): the server's clock in µs for a fence, or nil and an error
-- reply for a user not allowed to read it (an ACL without +time): no
-- fence that could repeat one.
local function fenceClock()
  local reply = redis.pcall('TIME')
  if type(reply) == 'table' and reply.err then
    return nil, redis.error_reply('ERR a fence needs the server clock (TIME), which this user may not read: ' .. reply.err)
  end
  local _, micros = serverTime(reply)
  return micros
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
  local fence = redis.pcall('INCR', counter)
  if type(fence) == 'table' and fence.err then
    return nil, fence
  end
  if fence < 1 then
    return nil, redis.error_reply('ERR the fence counter ' .. counter .. ' gave ' .. fence .. ', not a positive number')
  end
  if not micros then
    local err
    micros, err = fenceClock()
    if not micros then
      return nil, err
    end
  end
  if fence < micros then
    redis.call('SET', counter, string.format('%d', micros))
    fence = micros
  end
  return fence
end
