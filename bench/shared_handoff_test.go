package bench

import (
	"context"
	"testing"
	"time"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/internal/redistest"
)

// BenchmarkSharedHandoff measures the hand-over to a waiting shared holder:
// a writer (one Client) holds the name exclusively and releases it once a
// reader (another Client, with its own connections and pub/sub, as another
// process would have) waits in AcquireShared;
// one op is one such hand-over, timed from just before the writer's
// release to just after the reader's acquire returns. For comparison the
// same with an exclusive waiter (lib=exclusive):
//
//	go test -run '^$' -bench '^BenchmarkSharedHandoff$' -benchtime 2000x .
func BenchmarkSharedHandoff(b *testing.B) {
	srv := redistest.Start(b)
	for _, waiter := range []string{"shared", "exclusive"} {
		b.Run("waiter="+waiter, func(b *testing.B) {
			writerRDB, readerRDB := newGoRedis(srv.Addr(), nil), newGoRedis(srv.Addr(), nil)
			defer writerRDB.Close()
			defer readerRDB.Close()
			wait := redislock.WithRetry(redislock.LinearBackoff(pollInterval))
			writer, reader := redislock.New(writerRDB, wait), redislock.New(readerRDB, wait)
			ctx, cancel := context.WithTimeout(context.Background(), contendedTimeout)
			defer cancel()
			key := "lock:{bench:handoff:" + waiter + "}"
			channel := key + ":released"
			take := reader.Acquire
			if waiter == "shared" {
				take = reader.AcquireShared
			}
			handoffs := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				held, err := writer.Acquire(ctx, "bench:handoff:"+waiter)
				if err != nil {
					b.Fatal(err)
				}
				type result struct {
					l   *redislock.Lock
					at  time.Time
					err error
				}
				got := make(chan result, 1)
				go func() {
					l, err := take(ctx, "bench:handoff:"+waiter)
					got <- result{l, time.Now(), err}
				}()
				// The waiter queued and listens to the name's releases.
				for writerRDB.ZCard(ctx, key+":q").Val() == 0 || writerRDB.PubSubNumSub(ctx, channel).Val()[channel] == 0 {
					if ctx.Err() != nil {
						b.Fatal("the waiter never waited")
					}
				}
				released := time.Now()
				if err := held.Release(ctx); err != nil {
					b.Fatal(err)
				}
				r := <-got
				if r.err != nil {
					b.Fatal(r.err)
				}
				handoffs = append(handoffs, r.at.Sub(released))
				if err := r.l.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			reportHandoffs(b, handoffs)
		})
	}
}
