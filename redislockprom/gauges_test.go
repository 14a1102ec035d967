package redislockprom_test

import (
	"context"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/internal/redistest"
	"github.com/redislock/redislock/redislockprom"
)

// gauge returns the value of a gauge series.
func gauge(t *testing.T, reg prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	return series(t, reg, name, labels).GetGauge().GetValue()
}

// eventuallyGauge waits until a gauge series is want: the events that move
// it come from the callers' and the watchdog's goroutines.
func eventuallyGauge(t *testing.T, reg prometheus.Gatherer, name string, labels map[string]string, want float64) {
	t.Helper()
	eventually(t, name+formatLabels(labels)+" is "+strconv.FormatFloat(want, 'g', -1, 64), func() bool {
		return gauge(t, reg, name, labels) == want
	})
}

func kind(k string) map[string]string { return map[string]string{"kind": k} }

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
			reg, obs := newObserver(t)
			one, two := newLocker(rdb, obs), newLocker(rdb, obs)
			ctx := context.Background()
			for _, k := range []string{"lock", "shared", "semaphore"} {
				require.Equal(t, 0.0, gauge(t, reg, "redislock_held", kind(k)), "created at 0: "+k)
				require.Equal(t, 0.0, gauge(t, reg, "redislock_waiting", kind(k)), "created at 0: "+k)
			}

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
			require.Equal(t, 2.0, gauge(t, reg, "redislock_held", kind("lock")), "a multi lock counts once")
			require.Equal(t, 2.0, gauge(t, reg, "redislock_held", kind("shared")))
			require.Equal(t, 1.0, gauge(t, reg, "redislock_held", kind("semaphore")))

			waitCtx, giveUp := context.WithCancel(ctx)
			gaveUp := make(chan error, 1)
			go func() {
				_, err := two.Acquire(waitCtx, "report", redislock.WithRetry(redislock.LinearBackoff(5*time.Millisecond)))
				gaveUp <- err
			}()
			eventuallyGauge(t, reg, "redislock_waiting", kind("lock"), 1)
			giveUp()
			require.ErrorIs(t, <-gaveUp, redislock.ErrNotAcquired)
			require.Equal(t, 0.0, gauge(t, reg, "redislock_waiting", kind("lock")))

			require.NoError(t, exclusive.Release(ctx))
			require.NoError(t, multi.Release(ctx))
			require.NoError(t, rdb.Del(ctx, slot.Key()).Err()) // lost at its next extension
			require.ErrorIs(t, slot.Extend(ctx, time.Minute), redislock.ErrNotHeld)
			require.NoError(t, one.Close(ctx))
			require.Equal(t, 1.0, gauge(t, reg, "redislock_held", kind("shared")), "the other Client's")
			require.NoError(t, two.Close(ctx))
			runtime.KeepAlive(kept) // not dropped before: a dropped Lock is released
			for _, k := range []string{"lock", "shared", "semaphore"} {
				require.Equal(t, 0.0, gauge(t, reg, "redislock_held", kind(k)), k)
				require.Equal(t, 0.0, gauge(t, reg, "redislock_waiting", kind(k)), k)
			}
		})
	})

	t.Run("leader is 1 while a Client served leads, 0 after, and a campaign is no wait", func(t *testing.T) {
		forEachServer(t, func(t *testing.T, rdb *redis.Client) {
			reg, obs := newObserver(t) // no WithNameLabel: the election's name is a label all the same
			one, two := newLocker(rdb, obs), newLocker(rdb, obs)
			relay := map[string]string{"name": "relay"}

			firstTerms, stopFirst := elect(t, one, "relay")
			nextTerm(t, firstTerms)
			require.Equal(t, 1.0, gauge(t, reg, "redislock_leader", relay))
			secondTerms, stopSecond := elect(t, two, "relay")
			// The follower campaigns: no wait, and the leader still leads.
			eventually(t, "the follower is queued", func() bool {
				info, err := one.Inspect(context.Background(), "relay")
				return err == nil && info.Waiters == 1
			})
			require.Equal(t, 0.0, gauge(t, reg, "redislock_waiting", kind("lock")))
			stopFirst() // hands leadership over
			nextTerm(t, secondTerms)
			require.Equal(t, 1.0, gauge(t, reg, "redislock_leader", relay))
			require.Equal(t, 1.0, gauge(t, reg, "redislock_held", kind("lock")))
			stopSecond()
			require.Equal(t, 0.0, gauge(t, reg, "redislock_leader", relay), "the series stays, at 0")
			require.Equal(t, 0.0, gauge(t, reg, "redislock_held", kind("lock")))

			// Campaigns are timed apart from Acquire's waits: a follower's
			// time would swamp them.
			for _, result := range []string{"acquired", "not_acquired", "redis_error"} {
				require.Equal(t, uint64(0), histogramCount(t, reg, "redislock_wait_seconds", map[string]string{"result": result}), result)
			}
			require.Equal(t, uint64(2), histogramCount(t, reg, "redislock_campaign_seconds", none), "one per campaign")
			require.Equal(t, 2.0, counter(t, reg, "redislock_acquired_total", none), "each term is an acquisition")
		})
	})

	t.Run("a follower's leader series is 0 before it ever leads", func(t *testing.T) {
		_, rdb := newMini(t)
		reg, obs := newObserver(t)
		_, err := rdb.Set(context.Background(), "lock:{relay}", "another-process", time.Minute).Result()
		require.NoError(t, err)
		elect(t, newLocker(rdb, obs), "relay")
		eventually(t, "redislock_leader{name=relay} exists", func() bool {
			m, _ := lookup(t, reg, "redislock_leader", map[string]string{"name": "relay"})
			return m != nil
		})
		require.Equal(t, 0.0, gauge(t, reg, "redislock_leader", map[string]string{"name": "relay"}))
	})

	t.Run("with the name label, held and waiting are by name too", func(t *testing.T) {
		reg, obs := newObserver(t, redislockprom.WithNameLabel())
		_, rdb := newMini(t)
		lock, err := newLocker(rdb, obs).AcquireSemaphore(context.Background(), "partner-api", 3)
		require.NoError(t, err)
		labels := map[string]string{"name": "partner-api", "kind": "semaphore"}
		require.Equal(t, 1.0, gauge(t, reg, "redislock_held", labels))
		require.NoError(t, lock.Release(context.Background()))
		require.Equal(t, 0.0, gauge(t, reg, "redislock_held", labels))
	})

	t.Run("two Clients leading at once (a loss not yet noticed) still read 1", func(t *testing.T) {
		reg, obs := newObserver(t)
		relay := map[string]string{"name": "relay"}
		for range 2 {
			obs.ObserveLeader(redislock.LeaderEvent{Name: "relay", Leading: true})
		}
		require.Equal(t, 1.0, gauge(t, reg, "redislock_leader", relay))
		obs.ObserveLeader(redislock.LeaderEvent{Name: "relay"})
		require.Equal(t, 1.0, gauge(t, reg, "redislock_leader", relay))
		obs.ObserveLeader(redislock.LeaderEvent{Name: "relay"})
		require.Equal(t, 0.0, gauge(t, reg, "redislock_leader", relay))
	})
}
