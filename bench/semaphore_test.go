package bench

import (
	"context"
	"crypto/rand"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/internal/redistest"
)

// Semaphores (issue 16 part 3): AcquireSemaphore beside a hand-written
// go-redis semaphore, the raw baseline: one EVALSHA that prunes expired
// holders and takes a slot if fewer than the limit hold one (a sorted set
// scored by lease end), a ZREM to give it back, and polling every 1 ms to
// wait. The raw one has no queue (newcomers barge), no limit check and no
// watchdog: the floor, not a peer.

// rawSemAcquire: KEYS[1] the holders; ARGV token, ttl ms, limit.
var rawSemAcquire = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[3]) then
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0`)

const semLimit = 2

// semLib is one semaphore implementation: acquire waits (polling or
// queued) within ctx and returns the release.
type semLib struct {
	name    string
	acquire func(ctx context.Context, name string) (release func(), err error)
	close   func()
}

func semLibs(addr string) []semLib {
	rawRDB := redis.NewClient(&redis.Options{Addr: addr})
	oursRDB := redis.NewClient(&redis.Options{Addr: addr})
	ours := redislock.New(oursRDB, redislock.WithRetry(redislock.LinearBackoff(time.Millisecond)))
	raw := func(ctx context.Context, name string) (func(), error) {
		token := rand.Text()
		for {
			got, err := rawSemAcquire.Run(ctx, rawRDB, []string{name}, token, 30_000, semLimit).Int()
			if err != nil {
				return nil, err
			}
			if got == 1 {
				return func() { rawRDB.ZRem(context.Background(), name, token) }, nil
			}
			select {
			case <-time.After(time.Millisecond):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
	}
	oursSem := func(ctx context.Context, name string) (func(), error) {
		l, err := ours.AcquireSemaphore(ctx, name, semLimit)
		if err != nil {
			return nil, err
		}
		return func() { _ = l.Release(context.Background()) }, nil
	}
	oursLock := func(ctx context.Context, name string) (func(), error) {
		l, err := ours.Acquire(ctx, name)
		if err != nil {
			return nil, err
		}
		return func() { _ = l.Release(context.Background()) }, nil
	}
	return []semLib{
		{name: "raw-sem", acquire: raw, close: func() { _ = rawRDB.Close() }},
		{name: "ours-sem", acquire: oursSem, close: func() { _ = ours.Close(context.Background()); _ = oursRDB.Close() }},
		// The exclusive lock on the same Client, for scale (closed with ours-sem).
		{name: "ours-lock", acquire: oursLock, close: func() {}},
	}
}

// BenchmarkSemaphoreUncontended: take a slot and give it back, one
// goroutine, a fresh name each time.
func BenchmarkSemaphoreUncontended(b *testing.B) {
	srv := redistest.Start(b)
	libs := semLibs(srv.Addr())
	defer func() {
		for _, l := range libs {
			l.close()
		}
	}()
	for _, lib := range libs {
		b.Run("lib="+lib.name, func(b *testing.B) {
			uncontendedCycles(b, lib.acquire, "bench:sem:warmup:"+lib.name, func(i int) string {
				return "bench:sem:uncontended:" + lib.name + ":" + strconv.Itoa(i)
			})
		})
	}
}

// BenchmarkSemaphoreContended: 8 goroutines of one process on one
// semaphore of 2 slots, a 100µs hold; one op is one acquisition (run with
// -benchtime 2000x). Handoff = from just before a holder gives its slot
// back to just after the next waiter's acquire returns (the waiter was
// waiting when the slot was freed: at most limit holders, so the others
// always wait).
func BenchmarkSemaphoreContended(b *testing.B) {
	srv := redistest.Start(b)
	libs := semLibs(srv.Addr())
	defer func() {
		for _, l := range libs {
			l.close()
		}
	}()
	for _, lib := range libs[:2] {
		b.Run("lib="+lib.name, func(b *testing.B) {
			name := "bench:sem:contended:" + lib.name + ":" + strconv.Itoa(b.N)
			contendedHandoffs(b, lib.name, func(ctx context.Context) (func(), error) { return lib.acquire(ctx, name) })
		})
	}
}
