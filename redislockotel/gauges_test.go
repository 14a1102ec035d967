package redislockotel_test

import (
	"context"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/internal/redistest"
	"github.com/redislock/redislock/redislockotel"
)

// upDown returns the value of an up-down counter's point with exactly
// attrs, and whether there is one.
func upDown(t *testing.T, reader *sdkmetric.ManualReader, name string, attrs map[string]string) (int64, bool) {
	t.Helper()
	m, ok := collect(t, reader)[name]
	if !ok {
		return 0, false
	}
	sum, ok := m.Data.(metricdata.Sum[int64])
	require.True(t, ok, "%s is a %T, not an int64 sum", name, m.Data)
	require.False(t, sum.IsMonotonic, name+" goes down too")
	for _, p := range sum.DataPoints {
		if equalLabels(attributesOf(p.Attributes), attrs) {
			return p.Value, true
		}
	}
	return 0, false
}

// value is upDown's value, 0 when there is no point.
func value(t *testing.T, reader *sdkmetric.ManualReader, name string, attrs map[string]string) int64 {
	t.Helper()
	v, _ := upDown(t, reader, name, attrs)
	return v
}

// eventuallyValue waits until an up-down counter is want: the events that
// move it come from the callers' and the watchdog's goroutines.
func eventuallyValue(t *testing.T, reader *sdkmetric.ManualReader, name string, attrs map[string]string, want int64) {
	t.Helper()
	eventually(t, name+formatLabels(attrs)+" is "+strconv.FormatInt(want, 10), func() bool {
		return value(t, reader, name, attrs) == want
	})
}

func kind(k string) map[string]string { return map[string]string{"redislock.lock.kind": k} }

// forEachServer runs test on miniredis and on a real redis-server.
func forEachServer(t *testing.T, test func(t *testing.T, rdb *redis.Client)) {
	t.Run("miniredis", func(t *testing.T) {
		_, rdb := newMini(t)
		test(t, rdb)
	})
	t.Run("redis-server", func(t *testing.T) {
		test(t, newRedisClient(t, redistest.Start(t).Addr()))
	})
}

// elect runs Elect for name on c until the returned stop is called; each
// term is announced on the channel and lasts until its context ends.
func elect(t *testing.T, c *redislock.Client, name string) (terms chan struct{}, stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	terms, done := make(chan struct{}, 8), make(chan struct{})
	go func() {
		defer close(done)
		_ = c.Elect(ctx, name, func(ctx context.Context) error {
			terms <- struct{}{}
			<-ctx.Done()
			return nil
		})
	}()
	stop = func() {
		cancel()
		<-done
	}
	t.Cleanup(stop)
	return terms, stop
}

func nextTerm(t *testing.T, terms chan struct{}) {
	t.Helper()
	select {
	case <-terms:
	case <-time.After(10 * time.Second): // guards against a hang only
		t.Fatal("not elected within 10s")
	}
}

func TestGauges(t *testing.T) {
	t.Run("held and waiting count every kind over the Clients served, and return to 0", func(t *testing.T) {
		forEachServer(t, func(t *testing.T, rdb *redis.Client) {
			reader, obs := newObserver(t)
			one, two := newLocker(rdb, obs), newLocker(rdb, obs)
			ctx := context.Background()

			exclusive, err := one.Acquire(ctx, "report")
			require.NoError(t, err)
			multi, err := two.AcquireMulti(ctx, []string{"a", "b"})
			require.NoError(t, err)
			var kept []*redislock.Lock
			for _, c := range []*redislock.Client{one, two} {
				shared, err := c.AcquireShared(ctx, "catalog")
				require.NoError(t, err)
				kept = append(kept, shared)
			}
			slot, err := two.AcquireSemaphore(ctx, "partner-api", 3)
			require.NoError(t, err)
			require.Equal(t, int64(2), value(t, reader, "redislock.held", kind("lock")), "a multi lock counts once")
			require.Equal(t, int64(2), value(t, reader, "redislock.held", kind("shared")))
			require.Equal(t, int64(1), value(t, reader, "redislock.held", kind("semaphore")))

			waitCtx, giveUp := context.WithCancel(ctx)
			gaveUp := make(chan error, 1)
			go func() {
				_, err := two.Acquire(waitCtx, "report", redislock.WithRetry(redislock.LinearBackoff(5*time.Millisecond)))
				gaveUp <- err
			}()
			eventuallyValue(t, reader, "redislock.waiting", kind("lock"), 1)
			giveUp()
			require.ErrorIs(t, <-gaveUp, redislock.ErrNotAcquired)
			require.Equal(t, int64(0), value(t, reader, "redislock.waiting", kind("lock")))

			require.NoError(t, exclusive.Release(ctx))
			require.NoError(t, multi.Release(ctx))
			require.NoError(t, rdb.Del(ctx, slot.Key()).Err())
			require.ErrorIs(t, slot.Extend(ctx, time.Minute), redislock.ErrNotHeld) // lost
			require.NoError(t, one.Close(ctx))
			require.Equal(t, int64(1), value(t, reader, "redislock.held", kind("shared")), "the other Client's")
			require.NoError(t, two.Close(ctx))
			runtime.KeepAlive(kept) // not dropped before: a dropped Lock is released
			for _, k := range []string{"lock", "shared", "semaphore"} {
				held, ok := upDown(t, reader, "redislock.held", kind(k))
				require.True(t, ok, k)
				require.Equal(t, int64(0), held, k)
			}
			require.Equal(t, int64(0), value(t, reader, "redislock.waiting", kind("lock")))
		})
	})

	t.Run("leader is 1 while a Client served leads, 0 after, and a campaign is no wait", func(t *testing.T) {
		forEachServer(t, func(t *testing.T, rdb *redis.Client) {
			reader, obs := newObserver(t) // no WithNameAttribute: the election's name is an attribute all the same
			one, two := newLocker(rdb, obs), newLocker(rdb, obs)
			relay := map[string]string{"redislock.lock.name": "relay"}

			firstTerms, stopFirst := elect(t, one, "relay")
			nextTerm(t, firstTerms)
			require.Equal(t, int64(1), value(t, reader, "redislock.leader", relay))
			secondTerms, stopSecond := elect(t, two, "relay")
			// The follower campaigns: no wait, and the leader still leads.
			eventually(t, "the follower is queued", func() bool {
				info, err := one.Inspect(context.Background(), "relay")
				return err == nil && info.Waiters == 1
			})
			require.Equal(t, int64(0), value(t, reader, "redislock.waiting", kind("lock")))
			stopFirst() // hands leadership over
			nextTerm(t, secondTerms)
			require.Equal(t, int64(1), value(t, reader, "redislock.leader", relay))
			stopSecond()
			leads, ok := upDown(t, reader, "redislock.leader", relay)
			require.True(t, ok, "the point stays")
			require.Equal(t, int64(0), leads)

			for _, result := range []string{"acquired", "not_acquired", "redis_error"} {
				require.Equal(t, uint64(0), histogramCount(t, reader, "redislock.acquire.wait_time", acquireResult(result)), result)
			}
			require.Equal(t, uint64(2), histogramCount(t, reader, "redislock.campaign.duration", none), "one per campaign")
		})
	})

	t.Run("a follower's leader point is 0 before it ever leads", func(t *testing.T) {
		_, rdb := newMini(t)
		reader, obs := newObserver(t)
		require.NoError(t, rdb.Set(context.Background(), "lock:{relay}", "another-process", time.Minute).Err())
		elect(t, newLocker(rdb, obs), "relay")
		eventually(t, "redislock.leader{relay} has a point", func() bool {
			_, ok := upDown(t, reader, "redislock.leader", map[string]string{"redislock.lock.name": "relay"})
			return ok
		})
		require.Equal(t, int64(0), value(t, reader, "redislock.leader", map[string]string{"redislock.lock.name": "relay"}))
	})

	t.Run("with the name attribute, held is by name too", func(t *testing.T) {
		reader, obs := newObserver(t, redislockotel.WithNameAttribute())
		_, rdb := newMini(t)
		lock, err := newLocker(rdb, obs).AcquireSemaphore(context.Background(), "partner-api", 3)
		require.NoError(t, err)
		attrs := map[string]string{"redislock.lock.name": "partner-api", "redislock.lock.kind": "semaphore"}
		require.Equal(t, int64(1), value(t, reader, "redislock.held", attrs))
		require.NoError(t, lock.Release(context.Background()))
		require.Equal(t, int64(0), value(t, reader, "redislock.held", attrs))
	})

	t.Run("two Clients leading at once (a loss not yet noticed) still read 1", func(t *testing.T) {
		reader, obs := newObserver(t)
		relay := map[string]string{"redislock.lock.name": "relay"}
		for range 2 {
			obs.ObserveLeader(redislock.LeaderEvent{Name: "relay", Leading: true})
		}
		require.Equal(t, int64(1), value(t, reader, "redislock.leader", relay))
		obs.ObserveLeader(redislock.LeaderEvent{Name: "relay"})
		require.Equal(t, int64(1), value(t, reader, "redislock.leader", relay))
		obs.ObserveLeader(redislock.LeaderEvent{Name: "relay"})
		require.Equal(t, int64(0), value(t, reader, "redislock.leader", relay))
	})
}
