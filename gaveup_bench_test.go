package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/internal/faultproxy"
	"github.com/redislock/redislock/internal/redistest"
)

// BenchmarkGivingUpOnAStalledLink is issue 37's trial: 2,000 waiters of one
// Client, on 2,000 names held by another, each with a ctx deadline within
// the same 100 ms, on a go-redis client with ContextTimeoutEnabled, the
// link stalled (a black hole: every connection, new ones too) from 50 ms
// before the first deadline. It reports how long after its deadline each
// waiter returned (p50, p99 and the worst, over all runs), and how many had
// queued (saw the name held) before the stall:
//
//	REDISLOCK_REQUIRE_REDIS=1 go test -run '^$' -bench '^BenchmarkGivingUpOnAStalledLink$' -benchtime 3x .
func BenchmarkGivingUpOnAStalledLink(b *testing.B) {
	const (
		waiters     = 2000
		spread      = 100 * time.Millisecond // the deadlines' window
		stallBefore = 50 * time.Millisecond  // the stall begins this long before the first deadline
		settle      = 3 * time.Second        // for every waiter to queue and listen, before the first deadline
	)
	server := redistest.Start(b)
	admin := newRedisClient(b, server.Addr())
	ctx := context.Background()
	holders := redislock.New(admin, quiet, redislock.WithTTL(time.Minute))
	b.Cleanup(func() { _ = holders.Close(ctx) })
	names := make([]string, waiters)
	held := make([]*redislock.Lock, waiters) // kept: a dropped Lock is released
	for i := range names {
		names[i] = fmt.Sprintf("stalled-%d", i)
		var err error
		if held[i], err = holders.Acquire(ctx, names[i]); err != nil {
			b.Fatal(err)
		}
	}
	var delays []time.Duration
	queued := 0
	b.ResetTimer()
	for range b.N {
		proxy, err := faultproxy.New(server.Addr())
		if err != nil {
			b.Fatal(err)
		}
		rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ContextTimeoutEnabled: true})
		c := redislock.New(rdb, quiet)
		first := time.Now().Add(settle)
		late := make([]time.Duration, waiters)
		errs := make([]error, waiters)
		var wg sync.WaitGroup
		for i := range waiters {
			deadline := first.Add(spread * time.Duration(i) / waiters)
			wg.Go(func() {
				wctx, cancel := context.WithDeadline(ctx, deadline)
				defer cancel()
				_, errs[i] = c.Acquire(wctx, names[i], redislock.WithRetry(redislock.LinearBackoff(time.Minute)))
				late[i] = time.Since(deadline)
			})
		}
		time.Sleep(time.Until(first.Add(-stallBefore)))
		proxy.SetMode(faultproxy.Blackhole)
		wg.Wait()
		for i, err := range errs {
			if !errors.Is(err, context.DeadlineExceeded) {
				b.Fatalf("waiter %d: %v", i, err)
			}
			if errors.Is(err, redislock.ErrNotAcquired) {
				queued++
			}
		}
		delays = append(delays, late...)
		proxy.SetMode(faultproxy.Pass)
		proxy.ResetAll() // go-redis gives up on the stalled connections
		closeCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_ = c.Close(closeCtx) // the give-backs left for the background
		cancel()
		_ = rdb.Close()
		_ = proxy.Close()
	}
	b.StopTimer()
	runtime.KeepAlive(held)
	slices.Sort(delays)
	b.ReportMetric(float64(delays[len(delays)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(delays[len(delays)*99/100].Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(delays[len(delays)-1].Microseconds())/1000, "max-ms")
	b.ReportMetric(float64(queued)/float64(len(delays)), "queued-frac")
}
