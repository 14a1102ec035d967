package bench

import (
	"context"
	"crypto/rand"
	"errors"
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

// Shared locks (issue 16 part 2): AcquireShared beside a hand-written
// go-redis readers-writer lock, the raw baseline: a reader's EVALSHA
// enters unless the writer's key exists (a sorted set of readers scored by
// lease end), a ZREM to leave; a writer's EVALSHA takes the key with SET
// NX once no live reader is left, a compare-and-delete to leave; both
// poll every 1 ms to wait. The raw one has no queue, so nothing keeps a
// stream of readers from starving a writer, and no watchdog: the floor for
// the uncontended cycle, not a peer.

// rawReadAcquire: KEYS[1] the writer's key, KEYS[2] the readers; ARGV
// token, ttl ms.
var rawReadAcquire = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[2]), ARGV[1])
redis.call('PEXPIRE', KEYS[2], ARGV[2])
return 1`)

// rawWriteAcquire: KEYS as rawReadAcquire; ARGV token, ttl ms.
var rawWriteAcquire = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
if redis.call('ZCARD', KEYS[2]) > 0 then return 0 end
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
return 0`)

var rawWriteRelease = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`)

// rwLib is one readers-writer implementation: read and write wait
// (polling or queued) within ctx and return the release.
type rwLib struct {
	name  string
	read  func(ctx context.Context, name string) (release func(), err error)
	write func(ctx context.Context, name string) (release func(), err error)
	close func()
}

func rwLibs(addr string) []rwLib {
	rawRDB := redis.NewClient(&redis.Options{Addr: addr})
	oursRDB := redis.NewClient(&redis.Options{Addr: addr})
	ours := redislock.New(oursRDB, redislock.WithRetry(redislock.LinearBackoff(time.Millisecond)))
	poll := func(ctx context.Context, script *redis.Script, name, token string) error {
		keys := []string{"raw:{" + name + "}", "raw:{" + name + "}:r"}
		for {
			got, err := script.Run(ctx, rawRDB, keys, token, 30_000).Int()
			if err != nil || got == 1 {
				return err
			}
			select {
			case <-time.After(time.Millisecond):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	rawRead := func(ctx context.Context, name string) (func(), error) {
		token := rand.Text()
		if err := poll(ctx, rawReadAcquire, name, token); err != nil {
			return nil, err
		}
		return func() { rawRDB.ZRem(context.Background(), "raw:{"+name+"}:r", token) }, nil
	}
	rawWrite := func(ctx context.Context, name string) (func(), error) {
		token := rand.Text()
		if err := poll(ctx, rawWriteAcquire, name, token); err != nil {
			return nil, err
		}
		return func() { rawWriteRelease.Run(context.Background(), rawRDB, []string{"raw:{" + name + "}"}, token) }, nil
	}
	hold := func(acquire func(context.Context, string, ...redislock.Option) (*redislock.Lock, error)) func(context.Context, string) (func(), error) {
		return func(ctx context.Context, name string) (func(), error) {
			l, err := acquire(ctx, name)
			if err != nil {
				return nil, err
			}
			return func() { _ = l.Release(context.Background()) }, nil
		}
	}
	return []rwLib{
		{name: "raw-rw", read: rawRead, write: rawWrite, close: func() { _ = rawRDB.Close() }},
		{name: "ours-shared", read: hold(ours.AcquireShared), write: hold(ours.Acquire),
			close: func() { _ = ours.Close(context.Background()); _ = oursRDB.Close() }},
	}
}

// BenchmarkSharedUncontended: take a shared hold and give it back, one
// goroutine, a fresh name each time; ours-lock is the exclusive lock on
// the same Client, for scale.
func BenchmarkSharedUncontended(b *testing.B) {
	srv := redistest.Start(b)
	libs := rwLibs(srv.Addr())
	defer func() {
		for _, l := range libs {
			l.close()
		}
	}()
	cases := []struct {
		name    string
		acquire func(ctx context.Context, name string) (func(), error)
	}{
		{"raw-rw", libs[0].read}, {"ours-shared", libs[1].read}, {"ours-lock", libs[1].write},
	}
	for _, lib := range cases {
		b.Run("lib="+lib.name, func(b *testing.B) {
			uncontendedCycles(b, lib.acquire, "bench:shared:warmup:"+lib.name, func(i int) string {
				return "bench:shared:uncontended:" + lib.name + ":" + strconv.Itoa(i)
			})
		})
	}
}

// Writer wait under a stream of readers: readerGoroutines take shared
// holds of one name over and over, each staying readerHold, so that the
// name is held shared nearly all the time; one op is one writer's
// Acquire, timed from the call to its return, held writerHold (run with
// -benchtime 200x). A writer that waits more than writerGiveUp counts as
// starved (the raw baseline has no queue to stop readers from barging).
const (
	readerGoroutines = 4
	readerHold       = 2 * time.Millisecond
	writerHold       = 100 * time.Microsecond
	writerGiveUp     = time.Second
)

func BenchmarkSharedWriterWait(b *testing.B) {
	srv := redistest.Start(b)
	libs := rwLibs(srv.Addr())
	defer func() {
		for _, l := range libs {
			l.close()
		}
	}()
	for _, lib := range libs {
		b.Run("lib="+lib.name, func(b *testing.B) {
			name := "bench:shared:writer:" + lib.name + ":" + strconv.Itoa(b.N)
			stop := make(chan struct{})
			var wg sync.WaitGroup
			var reads atomic.Int64
			for range readerGoroutines {
				wg.Go(func() {
					for {
						select {
						case <-stop:
							return
						default:
						}
						ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
						release, err := lib.read(ctx, name)
						cancel()
						if err != nil {
							continue
						}
						reads.Add(1)
						time.Sleep(readerHold)
						release()
					}
				})
			}
			for reads.Load() < readerGoroutines*4 { // the stream is flowing
				time.Sleep(time.Millisecond)
			}
			waits := make([]time.Duration, 0, b.N)
			starved := 0
			b.ResetTimer()
			for range b.N {
				ctx, cancel := context.WithTimeout(context.Background(), writerGiveUp)
				start := time.Now()
				release, err := lib.write(ctx, name)
				wait := time.Since(start)
				cancel()
				switch {
				case errors.Is(err, redislock.ErrNotAcquired) || errors.Is(err, context.DeadlineExceeded):
					starved++
					waits = append(waits, wait)
					continue
				case err != nil:
					b.Fatal(err)
				}
				waits = append(waits, wait)
				time.Sleep(writerHold)
				release()
			}
			b.StopTimer()
			close(stop)
			wg.Wait()
			slices.Sort(waits)
			b.ReportMetric(float64(percentile(waits, 0.50).Microseconds()), "p50-writer-wait-µs")
			b.ReportMetric(float64(percentile(waits, 0.99).Microseconds()), "p99-writer-wait-µs")
			b.ReportMetric(float64(starved), "starved")
			b.ReportMetric(float64(reads.Load())/float64(b.N), "reads/write")
		})
	}
}
