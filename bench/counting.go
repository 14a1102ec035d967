package bench

import (
	"context"
	"net"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// callCounter counts what a client sends: commands, and round trips (a
// pipeline of n commands is n commands and one round trip). It sees only
// what passes through the client's command path: commands that go-redis
// writes on a pub/sub connection (SUBSCRIBE and the like) bypass hooks, so
// the server-side count (INFO commandstats) is reported next to it.
type callCounter struct {
	commands   atomic.Int64
	roundTrips atomic.Int64
}

func (c *callCounter) add(commands int) {
	c.commands.Add(int64(commands))
	c.roundTrips.Add(1)
}

// snapshot returns the counts so far.
func (c *callCounter) snapshot() (commands, roundTrips int64) {
	return c.commands.Load(), c.roundTrips.Load()
}

// goRedisHook counts for a go-redis client; install it with AddHook.
type goRedisHook struct{ counter *callCounter }

func (h goRedisHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		return next(ctx, network, addr)
	}
}

func (h goRedisHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.counter.add(1)
		return next(ctx, cmd)
	}
}

func (h goRedisHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.counter.add(len(cmds))
		return next(ctx, cmds)
	}
}

// countingRueidis wraps a rueidis.Client to count its calls. rueidis may
// write several concurrent calls in one batch (auto-pipelining), so its
// round trips are an upper bound: one per Do, one per DoMulti.
type countingRueidis struct {
	rueidis.Client
	counter *callCounter
}

func (c countingRueidis) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	c.counter.add(1)
	return c.Client.Do(ctx, cmd)
}

func (c countingRueidis) DoMulti(ctx context.Context, multi ...rueidis.Completed) []rueidis.RedisResult {
	c.counter.add(len(multi))
	return c.Client.DoMulti(ctx, multi...)
}

func (c countingRueidis) DoCache(ctx context.Context, cmd rueidis.Cacheable, ttl time.Duration) rueidis.RedisResult {
	c.counter.add(1)
	return c.Client.DoCache(ctx, cmd, ttl)
}

func (c countingRueidis) DoMultiCache(ctx context.Context, multi ...rueidis.CacheableTTL) []rueidis.RedisResult {
	c.counter.add(len(multi))
	return c.Client.DoMultiCache(ctx, multi...)
}
