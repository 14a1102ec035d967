package redislock_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/internal/redistest"
)

// BenchmarkAcquireRelease is the uncontended cycle on a real redis-server:
// two round trips. The peers and the raw go-redis floor are compared in the
// bench module (see BENCHMARKS.md).
func BenchmarkAcquireRelease(b *testing.B) {
	for _, fencing := range []bool{false, true} {
		b.Run("fencing="+strconv.FormatBool(fencing), func(b *testing.B) {
			server := redistest.Start(b)
			opts := []redislock.Option{quiet}
			if fencing {
				opts = append(opts, redislock.WithFencing())
			}
			benchCycles(b, redislock.New(newRedisClient(b, server.Addr()), opts...), func() {})
		})
	}
}

// BenchmarkAcquireReleaseCPU is the uncontended cycle with Redis taken out:
// a stub client answers every command at once, in process (see
// scriptStub), so ns/op is the library's own CPU per acquire + release,
// go-redis's command objects included, and nothing of the network's.
func BenchmarkAcquireReleaseCPU(b *testing.B) {
	stub := &scriptStub{Client: redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})}
	defer stub.Client.Close()
	benchCycles(b, redislock.New(stub, quiet), func() { stub.sent = stub.sent[:0] }) // it records every token
}

// BenchmarkAcquireReleaseObservedCPU is BenchmarkAcquireReleaseCPU with an
// Observer that does nothing: what reporting the events costs the library,
// with a plain Observer and with a GaugeObserver (the hold's beginning and
// end besides). BenchmarkAcquireReleaseCPU is the cost without one.
func BenchmarkAcquireReleaseObservedCPU(b *testing.B) {
	for _, obs := range []redislock.Observer{nopObserver{}, nopGauges{}} {
		_, gauges := obs.(redislock.GaugeObserver)
		b.Run("gauges="+strconv.FormatBool(gauges), func(b *testing.B) {
			stub := &scriptStub{Client: redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})}
			defer stub.Client.Close()
			benchCycles(b, redislock.New(stub, quiet, redislock.WithObserver(obs)), func() { stub.sent = stub.sent[:0] })
		})
	}
}

// benchCycles acquires and releases one lock on c per op, calling after
// after each cycle.
func benchCycles(b *testing.B, c *redislock.Client, after func()) {
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		l, err := c.Acquire(ctx, "bench")
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			b.Fatal(err)
		}
		after()
	}
}
