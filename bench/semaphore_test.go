package bench

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
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
			ctx := context.Background()
			names := make([]string, b.N)
			for i := range names {
				names[i] = "bench:sem:uncontended:" + lib.name + ":" + strconv.Itoa(i)
			}
			release, err := lib.acquire(ctx, "bench:sem:warmup:"+lib.name)
			if err != nil {
				b.Fatal(err)
			}
			release()
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				release, err := lib.acquire(ctx, names[i])
				if err != nil {
					b.Fatal(err)
				}
				release()
			}
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
			handoffs, err := contendSemaphore(b, lib)
			if err != nil {
				b.Fatal(err)
			}
			slices.Sort(handoffs)
			b.ReportMetric(float64(percentile(handoffs, 0.50).Nanoseconds())/1e3, "p50-handoff-µs")
			b.ReportMetric(float64(percentile(handoffs, 0.99).Nanoseconds())/1e3, "p99-handoff-µs")
		})
	}
}

// contendSemaphore runs b.N acquisitions among contendedGoroutines and
// returns the handoff of each acquisition that followed a release.
func contendSemaphore(b *testing.B, lib semLib) ([]time.Duration, error) {
	name := "bench:sem:contended:" + lib.name + ":" + strconv.Itoa(b.N)
	var (
		left     atomic.Int64
		released atomic.Int64 // monotonic ns (since base) of the last release sent
		mu       sync.Mutex
		handoffs []time.Duration
		firstErr error
		wg       sync.WaitGroup
	)
	base := time.Now()
	left.Store(int64(b.N))
	ctx, cancel := context.WithTimeout(context.Background(), contendedTimeout)
	defer cancel()
	b.ResetTimer()
	for range contendedGoroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for left.Add(-1) >= 0 {
				asked := time.Since(base)
				release, err := lib.acquire(ctx, name)
				got := time.Since(base)
				if err != nil {
					mu.Lock()
					firstErr = errors.Join(firstErr, fmt.Errorf("%s: %w", lib.name, err))
					mu.Unlock()
					return
				}
				if freed := time.Duration(released.Load()); freed > asked {
					mu.Lock()
					handoffs = append(handoffs, got-freed)
					mu.Unlock()
				}
				time.Sleep(contendedHold)
				released.Store(int64(time.Since(base)))
				release()
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	return handoffs, firstErr
}
