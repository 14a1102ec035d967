package redislockprom_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/internal/redistest"
	"github.com/redislock/redislock/redislockprom"
)

var none = map[string]string{}

func TestAcquireOutcomes(t *testing.T) {
	t.Run("an acquisition, a refusal and a release are counted apart", func(t *testing.T) {
		reg, obs := newObserver(t)
		_, rdb := newMini(t)
		locker := newLocker(rdb, obs)
		ctx := context.Background()

		lock, err := locker.Acquire(ctx, "report")
		require.NoError(t, err)
		_, err = locker.Acquire(ctx, "report")
		require.ErrorIs(t, err, redislock.ErrNotAcquired)
		require.NoError(t, lock.Release(ctx))

		require.NoError(t, testutil.CollectAndCompare(obs, strings.NewReader(`
# HELP redislock_acquired_total Acquire calls that took the lock.
# TYPE redislock_acquired_total counter
redislock_acquired_total 1
# HELP redislock_not_acquired_total Acquire calls that gave up because another holder had the lock.
# TYPE redislock_not_acquired_total counter
redislock_not_acquired_total 1
# HELP redislock_acquire_errors_total Acquire calls that failed because Redis could not be reached or refused the command.
# TYPE redislock_acquire_errors_total counter
redislock_acquire_errors_total 0
# HELP redislock_acquire_attempts_total Acquire commands sent to Redis, retries included.
# TYPE redislock_acquire_attempts_total counter
redislock_acquire_attempts_total 2
# HELP redislock_releases_total Releases that reached Redis, by result (released, not_held, redis_error).
# TYPE redislock_releases_total counter
redislock_releases_total{result="not_held"} 0
redislock_releases_total{result="redis_error"} 0
redislock_releases_total{result="released"} 1
# HELP redislock_fail_open_total RunWithLock calls that ran without the lock because Redis could not be reached (WithFailOpen).
# TYPE redislock_fail_open_total counter
redislock_fail_open_total 0
`), "redislock_acquired_total", "redislock_not_acquired_total", "redislock_acquire_errors_total",
			"redislock_acquire_attempts_total", "redislock_releases_total", "redislock_fail_open_total"))

		require.Equal(t, uint64(1), histogramCount(t, reg, "redislock_wait_seconds", map[string]string{"result": "acquired"}))
		require.Equal(t, uint64(1), histogramCount(t, reg, "redislock_wait_seconds", map[string]string{"result": "not_acquired"}))
		require.Equal(t, uint64(0), histogramCount(t, reg, "redislock_wait_seconds", map[string]string{"result": "redis_error"}))
		require.Equal(t, uint64(1), histogramCount(t, reg, "redislock_hold_seconds", none))
	})

	t.Run("retries add attempts to one acquisition", func(t *testing.T) {
		reg, obs := newObserver(t)
		_, rdb := newMini(t)
		locker := newLocker(rdb, obs)
		ctx := context.Background()
		holder, err := locker.Acquire(ctx, "batch")
		require.NoError(t, err)
		defer holder.Release(ctx)

		_, err = locker.Acquire(ctx, "batch",
			redislock.WithRetry(redislock.LimitRetry(redislock.LinearBackoff(time.Millisecond), 2)))
		require.ErrorIs(t, err, redislock.ErrNotAcquired)

		require.Equal(t, 1.0, counter(t, reg, "redislock_not_acquired_total", none))
		require.Equal(t, 4.0, counter(t, reg, "redislock_acquire_attempts_total", none), "1 for the holder, 3 for the waiter")
	})

	t.Run("a Redis that cannot be reached is an acquire error, not a refusal", func(t *testing.T) {
		reg, obs := newObserver(t)
		locker := newLocker(unreachableClient(t), obs)

		_, err := locker.Acquire(context.Background(), "report")
		require.Error(t, err)
		require.NotErrorIs(t, err, redislock.ErrNotAcquired)

		require.Equal(t, 1.0, counter(t, reg, "redislock_acquire_errors_total", none))
		require.Equal(t, 0.0, counter(t, reg, "redislock_not_acquired_total", none))
		require.Equal(t, 0.0, counter(t, reg, "redislock_acquired_total", none))
		require.Equal(t, uint64(1), histogramCount(t, reg, "redislock_wait_seconds", map[string]string{"result": "redis_error"}))
	})

	t.Run("a fail-open run is counted with the acquire error that caused it", func(t *testing.T) {
		reg, obs := newObserver(t)
		locker := newLocker(unreachableClient(t), obs)

		ran := false
		err := locker.RunWithLock(context.Background(), "report", func(context.Context) error {
			ran = true
			return nil
		}, redislock.WithFailOpen())
		require.NoError(t, err)
		require.True(t, ran)

		require.Equal(t, 1.0, counter(t, reg, "redislock_fail_open_total", none))
		require.Equal(t, 1.0, counter(t, reg, "redislock_acquire_errors_total", none))
		require.Equal(t, 0.0, counter(t, reg, "redislock_releases_total", map[string]string{"result": "released"}))
	})
}

func TestExtensions(t *testing.T) {
	t.Run("Lock.Extend records one extension and no failure", func(t *testing.T) {
		reg, obs := newObserver(t)
		_, rdb := newMini(t)
		locker := newLocker(rdb, obs, redislock.WithWatchdog(false))
		ctx := context.Background()

		lock, err := locker.Acquire(ctx, "report")
		require.NoError(t, err)
		require.NoError(t, lock.Extend(ctx, time.Minute))
		require.NoError(t, lock.Extend(ctx, time.Minute))
		require.NoError(t, lock.Release(ctx))

		require.Equal(t, uint64(2), histogramCount(t, reg, "redislock_extend_duration_seconds", none))
		require.Equal(t, 0.0, counter(t, reg, "redislock_extend_failures_total", map[string]string{"reason": "not_held"}))
		require.Equal(t, 0.0, counter(t, reg, "redislock_extend_failures_total", map[string]string{"reason": "redis_error"}))
	})

	t.Run("Extend on a deleted key is a not_held failure and an expired loss", func(t *testing.T) {
		reg, obs := newObserver(t)
		mr, rdb := newMini(t)
		locker := newLocker(rdb, obs, redislock.WithWatchdog(false))
		ctx := context.Background()

		lock, err := locker.Acquire(ctx, "report")
		require.NoError(t, err)
		mr.Del(lock.Key())
		require.ErrorIs(t, lock.Extend(ctx, time.Minute), redislock.ErrNotHeld)

		require.Equal(t, uint64(1), histogramCount(t, reg, "redislock_extend_duration_seconds", none))
		eventuallyCounter(t, reg, "redislock_extend_failures_total", map[string]string{"reason": "not_held"}, 1)
		eventuallyCounter(t, reg, "redislock_lost_total", map[string]string{"reason": "expired"}, 1)
	})

	t.Run("an extension too late because this process did not run is no redis_error", func(t *testing.T) {
		reg, obs := newObserver(t)
		obs.ObserveExtend(redislock.ExtendEvent{Name: "report", Watchdog: true, Err: context.DeadlineExceeded, Paused: 5 * time.Second})
		require.Equal(t, 1.0, counter(t, reg, "redislock_extend_failures_total", map[string]string{"reason": "paused"}))
		require.Equal(t, 0.0, counter(t, reg, "redislock_extend_failures_total", map[string]string{"reason": "redis_error"}))
	})
}

func TestLosses(t *testing.T) {
	t.Run("a deleted key is lost as expired, and the release finds it not held", func(t *testing.T) {
		reg, obs := newObserver(t)
		mr, rdb := newMini(t)
		locker := newLocker(rdb, obs, redislock.WithTTL(10*time.Second), redislock.WithExtendInterval(10*time.Millisecond))
		ctx := context.Background()

		lock, err := locker.Acquire(ctx, "report")
		require.NoError(t, err)
		mr.Del(lock.Key())
		waitDone(t, lock.Context())
		require.ErrorIs(t, lock.Release(ctx), redislock.ErrNotHeld)

		eventuallyCounter(t, reg, "redislock_lost_total", map[string]string{"reason": "expired"}, 1)
		eventuallyCounter(t, reg, "redislock_extend_failures_total", map[string]string{"reason": "not_held"}, 1)
		require.Equal(t, 1.0, counter(t, reg, "redislock_releases_total", map[string]string{"result": "not_held"}))
		require.Equal(t, uint64(1), histogramCount(t, reg, "redislock_hold_seconds", none), "one hold, counted once")
		for _, reason := range []string{"taken", "unreachable", "max_hold"} {
			require.Equal(t, 0.0, counter(t, reg, "redislock_lost_total", map[string]string{"reason": reason}), reason)
		}
	})

	t.Run("a key holding another token is lost as taken", func(t *testing.T) {
		reg, obs := newObserver(t)
		mr, rdb := newMini(t)
		locker := newLocker(rdb, obs, redislock.WithTTL(10*time.Second), redislock.WithExtendInterval(10*time.Millisecond))

		lock, err := locker.Acquire(context.Background(), "report")
		require.NoError(t, err)
		require.NoError(t, mr.Set(lock.Key(), "someone-else"))
		waitDone(t, lock.Context())
		require.ErrorIs(t, lock.Release(context.Background()), redislock.ErrNotHeld)

		eventuallyCounter(t, reg, "redislock_lost_total", map[string]string{"reason": "taken"}, 1)
		require.Equal(t, 0.0, counter(t, reg, "redislock_lost_total", map[string]string{"reason": "expired"}))
	})

	t.Run("a Redis gone until the safe deadline is lost as unreachable", func(t *testing.T) {
		reg, obs := newObserver(t)
		mr, rdb := newMini(t)
		// Extensions fail every 50 ms until the safe deadline, about a
		// second: a stall cannot leave none failed before the loss.
		locker := newLocker(rdb, obs, redislock.WithTTL(time.Second), redislock.WithExtendInterval(50*time.Millisecond))

		lock, err := locker.Acquire(context.Background(), "report")
		require.NoError(t, err)
		mr.Close()
		waitDone(t, lock.Context())
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		require.Error(t, lock.Release(ctx))

		eventuallyCounter(t, reg, "redislock_lost_total", map[string]string{"reason": "unreachable"}, 1)
		require.GreaterOrEqual(t, counter(t, reg, "redislock_extend_failures_total", map[string]string{"reason": "redis_error"}), 1.0)
		require.Equal(t, 1.0, counter(t, reg, "redislock_releases_total", map[string]string{"result": "redis_error"}))
		require.Equal(t, uint64(0), histogramCount(t, reg, "redislock_hold_seconds", none), "a failed release records no hold")
	})

	t.Run("a hold past WithMaxHold is lost as max_hold and released once", func(t *testing.T) {
		reg, obs := newObserver(t)
		_, rdb := newMini(t)
		locker := newLocker(rdb, obs, redislock.WithMaxHold(20*time.Millisecond))

		err := locker.RunWithLock(context.Background(), "report", func(ctx context.Context) error {
			waitDone(t, ctx)
			return nil
		})
		require.ErrorIs(t, err, redislock.ErrLockLost)

		eventuallyCounter(t, reg, "redislock_lost_total", map[string]string{"reason": "max_hold"}, 1)
		require.Equal(t, 1.0, counter(t, reg, "redislock_releases_total", map[string]string{"result": "released"}))
		require.Equal(t, uint64(1), histogramCount(t, reg, "redislock_hold_seconds", none), "one hold, counted once")
		hold := series(t, reg, "redislock_hold_seconds", none).GetHistogram().GetSampleSum()
		require.GreaterOrEqual(t, hold, 0.020, "held at least until the max hold")
	})
}

func TestNameLabel(t *testing.T) {
	t.Run("off by default: no series carries the lock name", func(t *testing.T) {
		reg, obs := newObserver(t)
		_, rdb := newMini(t)
		locker := newLocker(rdb, obs)
		require.NoError(t, locker.RunWithLock(context.Background(), "secret-order-42", func(context.Context) error { return nil }))

		families, err := reg.Gather()
		require.NoError(t, err)
		require.NotEmpty(t, families)
		for _, f := range families {
			for _, m := range f.GetMetric() {
				for _, lp := range m.GetLabel() {
					require.NotEqual(t, "name", lp.GetName(), f.GetName())
					require.NotContains(t, lp.GetValue(), "secret-order-42", f.GetName())
				}
			}
		}
	})

	t.Run("on: every event is counted under its lock's name", func(t *testing.T) {
		reg, obs := newObserver(t, redislockprom.WithNameLabel())
		_, rdb := newMini(t)
		locker := newLocker(rdb, obs)
		ctx := context.Background()

		a, err := locker.Acquire(ctx, "a")
		require.NoError(t, err)
		_, err = locker.Acquire(ctx, "a")
		require.ErrorIs(t, err, redislock.ErrNotAcquired)
		b, err := locker.Acquire(ctx, "b")
		require.NoError(t, err)
		require.NoError(t, a.Release(ctx))
		require.NoError(t, b.Release(ctx))

		require.Equal(t, 1.0, counter(t, reg, "redislock_acquired_total", map[string]string{"name": "a"}))
		require.Equal(t, 1.0, counter(t, reg, "redislock_acquired_total", map[string]string{"name": "b"}))
		require.Equal(t, 1.0, counter(t, reg, "redislock_not_acquired_total", map[string]string{"name": "a"}))
		require.Equal(t, 1.0, counter(t, reg, "redislock_releases_total", map[string]string{"name": "b", "result": "released"}))
		require.Equal(t, uint64(1), histogramCount(t, reg, "redislock_wait_seconds", map[string]string{"name": "a", "result": "not_acquired"}))
		require.Equal(t, uint64(1), histogramCount(t, reg, "redislock_hold_seconds", map[string]string{"name": "a"}))
	})
}

func TestOptions(t *testing.T) {
	t.Run("a namespace and const labels shape every series", func(t *testing.T) {
		reg, obs := newObserver(t, redislockprom.WithNamespace("billing"),
			redislockprom.WithConstLabels(prometheus.Labels{"redis": "primary"}))
		_, rdb := newMini(t)
		lock, err := newLocker(rdb, obs).Acquire(context.Background(), "report")
		require.NoError(t, err)
		require.NoError(t, lock.Release(context.Background()))

		require.Equal(t, 1.0, counter(t, reg, "billing_redislock_acquired_total", map[string]string{"redis": "primary"}))
		require.Equal(t, 1.0, counter(t, reg, "billing_redislock_releases_total", map[string]string{"redis": "primary", "result": "released"}))
		require.Equal(t, 0.0, counter(t, reg, "billing_redislock_lost_total", map[string]string{"redis": "primary", "reason": "expired"}))
	})

	t.Run("custom buckets are used", func(t *testing.T) {
		reg, _ := newObserver(t, redislockprom.WithWaitBuckets(0.5, 1), redislockprom.WithHoldBuckets(2, 4, 8),
			redislockprom.WithExtendBuckets(0.25), redislockprom.WithCampaignBuckets(60, 3600))
		bounds := func(name string, labels map[string]string) []float64 {
			var out []float64
			for _, b := range series(t, reg, name, labels).GetHistogram().GetBucket() {
				out = append(out, b.GetUpperBound())
			}
			return out
		}
		require.Equal(t, []float64{0.5, 1}, bounds("redislock_wait_seconds", map[string]string{"result": "acquired"}))
		require.Equal(t, []float64{2, 4, 8}, bounds("redislock_hold_seconds", none))
		require.Equal(t, []float64{0.25}, bounds("redislock_extend_duration_seconds", none))
		require.Equal(t, []float64{60, 3600}, bounds("redislock_campaign_seconds", none))
	})

	t.Run("default buckets span sub-millisecond round trips to long waits and holds", func(t *testing.T) {
		reg, _ := newObserver(t)
		first := func(name string, labels map[string]string) (float64, float64) {
			b := series(t, reg, name, labels).GetHistogram().GetBucket()
			return b[0].GetUpperBound(), b[len(b)-1].GetUpperBound()
		}
		low, high := first("redislock_extend_duration_seconds", none)
		require.Equal(t, []float64{0.0001, 5}, []float64{low, high})
		low, high = first("redislock_wait_seconds", map[string]string{"result": "acquired"})
		require.Equal(t, []float64{0.0001, 60}, []float64{low, high}, "up to MaxWaitWithoutDeadline")
		require.Equal(t, 60.0, redislock.MaxWaitWithoutDeadline.Seconds())
		low, high = first("redislock_hold_seconds", none)
		require.Equal(t, []float64{0.001, 3600}, []float64{low, high})
	})
}

func TestBadInput(t *testing.T) {
	cases := []struct {
		name string
		reg  prometheus.Registerer
		opts []redislockprom.Option
		want string
	}{
		{"a nil Registerer", nil, nil, "nil Registerer"},
		{"a nil *Registry", (*prometheus.Registry)(nil), nil, "nil Registerer"},
		{"a nil Option", prometheus.NewRegistry(), []redislockprom.Option{nil}, "nil Option"},
		{"a namespace with a dash", prometheus.NewRegistry(), []redislockprom.Option{redislockprom.WithNamespace("my-app")}, "namespace"},
		{"an empty namespace", prometheus.NewRegistry(), []redislockprom.Option{redislockprom.WithNamespace("")}, "namespace"},
		{"a const label the package sets", prometheus.NewRegistry(), []redislockprom.Option{redislockprom.WithConstLabels(prometheus.Labels{"reason": "x"})}, "set by redislockprom"},
		{"the kind label as a const label", prometheus.NewRegistry(), []redislockprom.Option{redislockprom.WithConstLabels(prometheus.Labels{"kind": "x"})}, "set by redislockprom"},
		{"unsorted campaign buckets", prometheus.NewRegistry(), []redislockprom.Option{redislockprom.WithCampaignBuckets(2, 1)}, "strictly increasing"},
		{"a reserved const label", prometheus.NewRegistry(), []redislockprom.Option{redislockprom.WithConstLabels(prometheus.Labels{"__x": "y"})}, "const label name"},
		{"no buckets", prometheus.NewRegistry(), []redislockprom.Option{redislockprom.WithWaitBuckets()}, "no buckets"},
		{"unsorted buckets", prometheus.NewRegistry(), []redislockprom.Option{redislockprom.WithHoldBuckets(2, 1)}, "strictly increasing"},
		{"duplicate buckets", prometheus.NewRegistry(), []redislockprom.Option{redislockprom.WithExtendBuckets(1, 1)}, "strictly increasing"},
		{"an infinite bucket", prometheus.NewRegistry(), []redislockprom.Option{redislockprom.WithExtendBuckets(1, math.Inf(1))}, "finite"},
	}
	for _, c := range cases {
		t.Run(c.name+" is an invalid argument", func(t *testing.T) {
			obs, err := redislockprom.New(c.reg, c.opts...)
			require.ErrorIs(t, err, redislock.ErrInvalidArgument)
			require.ErrorContains(t, err, c.want)
			require.Nil(t, obs)
		})
	}

	t.Run("a nil or zero Observer records nothing and does not panic", func(t *testing.T) {
		for _, obs := range []*redislockprom.Observer{nil, {}} {
			_, rdb := newMini(t)
			locker := newLocker(rdb, obs)
			require.NoError(t, locker.RunWithLock(context.Background(), "x", func(context.Context) error { return nil }))
			obs.ObserveLost(redislock.LostEvent{Name: "x", Reason: redislock.Expired})
			obs.ObserveExtend(redislock.ExtendEvent{Name: "x"})
			obs.ObserveFailOpen(redislock.FailOpenEvent{Name: "x"})
			obs.ObserveHold(redislock.HoldEvent{Name: "x", Kind: "lock", Began: true})
			obs.ObserveWait(redislock.WaitEvent{Name: "x", Kind: "lock", Began: true})
			obs.ObserveLeader(redislock.LeaderEvent{Name: "x", Leading: true})
			require.Equal(t, 0, testutil.CollectAndCount(obs))
		}
	})

	t.Run("an unknown loss reason is counted as other", func(t *testing.T) {
		reg, obs := newObserver(t)
		obs.ObserveLost(redislock.LostEvent{Name: "x", Reason: redislock.LostReason(99)})
		require.Equal(t, 1.0, counter(t, reg, "redislock_lost_total", map[string]string{"reason": "other"}))
	})
}

func TestRegistration(t *testing.T) {
	t.Run("a second Observer on the same registry is a clear error naming the first", func(t *testing.T) {
		reg, first := newObserver(t)
		second, err := redislockprom.New(reg)
		require.Nil(t, second)
		require.ErrorContains(t, err, "already registered")
		var already prometheus.AlreadyRegisteredError
		require.ErrorAs(t, err, &already)
		require.Same(t, first, already.ExistingCollector)
	})

	t.Run("Observers told apart by namespace or by const label values share a registry", func(t *testing.T) {
		reg, _ := newObserver(t)
		_, err := redislockprom.New(reg, redislockprom.WithNamespace("other"))
		require.NoError(t, err)
		_, err = redislockprom.New(reg, redislockprom.WithNamespace("other"))
		require.ErrorContains(t, err, "already registered", "the same namespace twice")

		labelled := prometheus.NewRegistry()
		_, err = redislockprom.New(labelled, redislockprom.WithConstLabels(prometheus.Labels{"redis": "cache"}))
		require.NoError(t, err)
		_, err = redislockprom.New(labelled, redislockprom.WithConstLabels(prometheus.Labels{"redis": "sessions"}))
		require.NoError(t, err)
	})

	t.Run("const labels must have the same names on one registry", func(t *testing.T) {
		reg, _ := newObserver(t)
		obs, err := redislockprom.New(reg, redislockprom.WithConstLabels(prometheus.Labels{"redis": "cache"}))
		require.Nil(t, obs)
		require.ErrorContains(t, err, "redislockprom: registering")
	})

	t.Run("a clashing metric of other code is an error and registers nothing", func(t *testing.T) {
		reg := prometheus.NewRegistry()
		require.NoError(t, reg.Register(prometheus.NewGauge(prometheus.GaugeOpts{Name: "redislock_hold_seconds", Help: "not ours"})))
		obs, err := redislockprom.New(reg)
		require.Nil(t, obs)
		require.ErrorContains(t, err, "redislockprom: registering")
		families, err := reg.Gather()
		require.NoError(t, err)
		require.Len(t, families, 1, "only the other code's gauge")
	})
}

func TestConcurrentUse(t *testing.T) {
	reg, obs := newObserver(t, redislockprom.WithNameLabel())
	_, rdb := newMini(t)
	locker := newLocker(rdb, obs)

	const goroutines, calls, names = 8, 25, 3
	var (
		wg         sync.WaitGroup
		mu         sync.Mutex
		ran        = map[string]int{}
		refused    = map[string]int{}
		unexpected []error
	)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range calls {
				name := fmt.Sprintf("job-%d", (g+i)%names)
				err := locker.RunWithLock(context.Background(), name, func(context.Context) error { return nil })
				mu.Lock()
				switch {
				case err == nil:
					ran[name]++
				case errors.Is(err, redislock.ErrNotAcquired):
					refused[name]++
				default:
					unexpected = append(unexpected, err)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	require.Empty(t, unexpected)

	total := 0.0
	for n := range names {
		name := fmt.Sprintf("job-%d", n)
		labels := map[string]string{"name": name}
		require.Equal(t, float64(ran[name]), counter(t, reg, "redislock_acquired_total", labels), name)
		require.Equal(t, float64(ran[name]), counter(t, reg, "redislock_releases_total", map[string]string{"name": name, "result": "released"}), name)
		require.Equal(t, uint64(ran[name]), histogramCount(t, reg, "redislock_hold_seconds", labels), name)
		if refused[name] > 0 {
			require.Equal(t, float64(refused[name]), counter(t, reg, "redislock_not_acquired_total", labels), name)
		}
		total += counter(t, reg, "redislock_acquire_attempts_total", labels)
	}
	require.Equal(t, float64(goroutines*calls), total, "one attempt per call")
}

func TestRealRedis(t *testing.T) {
	server := redistest.Start(t)
	reg, obs := newObserver(t)
	rdb := newRedisClient(t, server.Addr())
	locker := newLocker(rdb, obs, redislock.WithTTL(10*time.Second), redislock.WithExtendInterval(20*time.Millisecond))
	ctx := context.Background()

	lock, err := locker.Acquire(ctx, "report")
	require.NoError(t, err)
	_, err = locker.Acquire(ctx, "report")
	require.ErrorIs(t, err, redislock.ErrNotAcquired)
	require.NoError(t, lock.Extend(ctx, 10*time.Second))
	eventually(t, "the watchdog has extended the lock", func() bool {
		return histogramCount(t, reg, "redislock_extend_duration_seconds", none) >= 2
	})
	require.NoError(t, rdb.Del(ctx, lock.Key()).Err())
	waitDone(t, lock.Context())
	require.ErrorIs(t, lock.Release(ctx), redislock.ErrNotHeld)

	again, err := locker.Acquire(ctx, "report")
	require.NoError(t, err)
	require.NoError(t, again.Release(ctx))

	require.Equal(t, 2.0, counter(t, reg, "redislock_acquired_total", none))
	require.Equal(t, 1.0, counter(t, reg, "redislock_not_acquired_total", none))
	require.Equal(t, 0.0, counter(t, reg, "redislock_acquire_errors_total", none))
	eventuallyCounter(t, reg, "redislock_lost_total", map[string]string{"reason": "expired"}, 1)
	eventuallyCounter(t, reg, "redislock_extend_failures_total", map[string]string{"reason": "not_held"}, 1)
	require.Equal(t, 1.0, counter(t, reg, "redislock_releases_total", map[string]string{"result": "not_held"}))
	require.Equal(t, 1.0, counter(t, reg, "redislock_releases_total", map[string]string{"result": "released"}))
	require.Equal(t, uint64(2), histogramCount(t, reg, "redislock_hold_seconds", none))
}
