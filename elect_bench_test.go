package redislock_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/internal/redistest"
)

// BenchmarkElectHandover is a clean handover on a real redis-server on
// loopback: one op is from the leader's lead returning (leadership given
// up: a release, which hands the lock to the first in the server's queue
// and announces it) to the next campaigner's lead being called. Two
// campaigners, each with its own Client and go-redis client, as two
// processes would have; the one that gave leadership up campaigns again
// and is queued before the next op. It reports the p50 and p99 besides
// the mean (ns/op).
func BenchmarkElectHandover(b *testing.B) {
	server := redistest.Start(b)
	ctx, cancel := context.WithCancel(context.Background())
	leading := make(chan chan struct{}) // each term sends its resign channel
	done := make(chan struct{})
	for range 2 {
		c := redislock.New(newRedisClient(b, server.Addr()), quiet, redislock.WithTTL(5*time.Second))
		go func() {
			defer func() { done <- struct{}{} }()
			for ctx.Err() == nil {
				_ = c.Elect(ctx, "bench-leader", func(ctx context.Context) error {
					resign := make(chan struct{})
					select {
					case leading <- resign:
					case <-ctx.Done():
						return ctx.Err()
					}
					select {
					case <-resign:
						return nil // on its own: leadership is given up
					case <-ctx.Done():
						return ctx.Err()
					}
				})
			}
		}()
	}
	defer func() {
		cancel()
		<-done
		<-done
	}()
	rdb := newRedisClient(b, server.Addr())
	queued := func() {
		for rdb.ZCard(context.Background(), queueKey("bench-leader")).Val() != 1 {
			time.Sleep(100 * time.Microsecond) // polling interval, outside the timer
		}
	}
	resign := <-leading
	var took []time.Duration
	for b.Loop() {
		b.StopTimer()
		queued()
		b.StartTimer()
		start := time.Now()
		close(resign)
		resign = <-leading
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(took[(len(took)*99)/100].Nanoseconds()), "p99-ns")
}
