package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The lock family's benchmarks (semaphore_test.go, shared_test.go,
// multi_test.go) measure their members with the two loops below; each
// says only how a library takes a hold of a key K (a name, or a set of
// names) and gives it back.

// uncontendedCycles takes and gives back b.N holds, one goroutine, a fresh
// key key(i) each time, after one warm-up hold of warm.
func uncontendedCycles[K any](b *testing.B, acquire func(context.Context, K) (func(), error), warm K, key func(i int) K) {
	ctx := context.Background()
	keys := make([]K, b.N)
	for i := range keys {
		keys[i] = key(i)
	}
	release, err := acquire(ctx, warm)
	if err != nil {
		b.Fatal(err)
	}
	release()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		release, err := acquire(ctx, keys[i])
		if err != nil {
			b.Fatal(err)
		}
		release()
	}
}

// contendedHandoffs runs b.N holds of one key among contendedGoroutines,
// each held contendedHold, and reports the p50 and p99 handoff: from just
// before a holder gives its hold back to just after the next holder's
// acquire returns, counted only for an acquire that was waiting when the
// hold was given back.
func contendedHandoffs(b *testing.B, lib string, acquire func(context.Context) (func(), error)) {
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
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				asked := time.Since(base)
				release, err := acquire(ctx)
				got := time.Since(base)
				if err != nil {
					mu.Lock()
					firstErr = errors.Join(firstErr, fmt.Errorf("%s: %w", lib, err))
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
		})
	}
	wg.Wait()
	b.StopTimer()
	if firstErr != nil {
		b.Fatal(firstErr)
	}
	reportHandoffs(b, handoffs)
}
