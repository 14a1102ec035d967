package redislock_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/internal/redistest"
)

// BenchmarkCloseOneLock times Client.Close giving back the one lock a
// Client holds (a leader's shutdown), after the Client has been idle for
// 60 ms as a pod between extensions is (long enough to have joined the
// restart watch, which Close closes); it reports the median and p99:
//
//	go test -run '^$' -bench '^BenchmarkCloseOneLock$' -benchtime 200x .
func BenchmarkCloseOneLock(b *testing.B) {
	server := redistest.Start(b)
	rdb := newRedisClient(b, server.Addr())
	ctx := context.Background()
	took := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		c := redislock.New(rdb, quiet)
		if _, err := c.Acquire(ctx, "leader"); err != nil {
			b.Fatal(err)
		}
		time.Sleep(60 * time.Millisecond) // idle, as between extensions (and past the restart watch's 50 ms)
		b.StartTimer()
		start := time.Now()
		if err := c.Close(ctx); err != nil {
			b.Fatal(err)
		}
		took = append(took, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(took[len(took)*99/100].Microseconds()), "p99-µs")
}
