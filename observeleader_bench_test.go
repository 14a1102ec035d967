package redislock_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/internal/redistest"
)

// BenchmarkObserveLeaderAfterRelease is how soon ObserveLeader, on a
// Client and connections of its own, yields "nobody leads" after the
// leader gives leadership up with nobody in line, on a real redis-server on
// loopback: one op is from lead returning to the yield (the release, Elect's
// announcement of the term's end, the observer's read). The leader then
// campaigns again, outside the timer. It reports the p50 and p99 besides
// the mean (ns/op).
func BenchmarkObserveLeaderAfterRelease(b *testing.B) {
	server := redistest.Start(b)
	ctx, cancel := context.WithCancel(context.Background())
	leader := redislock.New(newRedisClient(b, server.Addr()), quiet, redislock.WithTTL(time.Minute), redislock.WithMetadata("leader"))
	campaign, leading := make(chan struct{}), make(chan chan struct{})
	done := make(chan struct{}, 2)
	go func() {
		defer func() { done <- struct{}{} }()
		for {
			select {
			case <-campaign:
			case <-ctx.Done():
				return
			}
			_ = leader.Elect(ctx, "bench-observed", func(ctx context.Context) error {
				resign := make(chan struct{})
				select {
				case leading <- resign:
				case <-ctx.Done():
					return ctx.Err()
				}
				select {
				case <-resign:
					return nil // gives leadership up, and Elect returns
				case <-ctx.Done():
					return ctx.Err()
				}
			})
		}
	}()
	seen := make(chan redislock.HolderInfo)
	observer := redislock.New(newRedisClient(b, server.Addr()), quiet)
	go func() {
		defer func() { done <- struct{}{} }()
		for h := range observer.ObserveLeader(ctx, "bench-observed") {
			select {
			case seen <- h:
			case <-ctx.Done():
				return
			}
		}
	}()
	defer func() {
		cancel()
		<-done
		<-done
	}()
	if h := <-seen; h.Metadata != "" {
		b.Fatalf("a leader before the first campaign: %v", h)
	}
	var took []time.Duration
	for b.Loop() {
		b.StopTimer()
		campaign <- struct{}{}
		resign := <-leading
		if h := <-seen; h.Metadata != "leader" {
			b.Fatalf("yielded %v, not the leader", h)
		}
		b.StartTimer()
		start := time.Now()
		close(resign)
		if h := <-seen; h.Metadata != "" {
			b.Fatalf("yielded %v, not nobody", h)
		}
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(took[(len(took)*99)/100].Nanoseconds()), "p99-ns")
}

// BenchmarkObserveLeaderQuiet counts the commands ObserveLeader sends
// while nothing changes: a leader (Elect, TTL 300 ms, extended every
// 100 ms) leads throughout; one op is 3 s of observing, after the first
// yield. It reports the observer's commands per TTL/3 (the bound
// is 1) and the reads per op; subscribing is once per loop and not a
// command of the observer's client counted here.
func BenchmarkObserveLeaderQuiet(b *testing.B) {
	const ttl, window = 300 * time.Millisecond, 3 * time.Second
	server := redistest.Start(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cp := campaign(b, redislock.New(newRedisClient(b, server.Addr()), quiet, redislock.WithTTL(ttl), redislock.WithMetadata("leader")), "leader", "bench-quiet")
	cp.nextTerm(b, 10*time.Second)
	rdb := newRedisClient(b, server.Addr())
	cmds := &commandLog{}
	rdb.AddHook(cmds)
	observer := redislock.New(rdb, quiet)
	var commands int
	var observed time.Duration
	for b.Loop() {
		b.StopTimer()
		observing, stop := context.WithCancel(ctx)
		var start time.Time
		for h := range observer.ObserveLeader(observing, "bench-quiet") {
			if h.Metadata != "leader" {
				b.Fatalf("yielded %v while the leader led", h)
			}
			if start.IsZero() {
				cmds.take() // from the first yield on
				start = time.Now()
				time.AfterFunc(window, stop)
				b.StartTimer()
			}
		}
		stop()
		observed += time.Since(start)
		commands += len(cmds.take())
	}
	b.ReportMetric(float64(commands)/(float64(observed)/float64(ttl/3)), "cmds/ttl3")
	b.ReportMetric(float64(commands)/float64(b.N), "reads/op")
}
