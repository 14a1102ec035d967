package redislockotel_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/internal/redistest"
	"github.com/redislock/redislock/redislockotel"
)

var none = map[string]string{}

func acquireResult(r string) map[string]string {
	return map[string]string{"redislock.acquire.result": r}
}
func lostReason(r string) map[string]string { return map[string]string{"redislock.lost.reason": r} }
func releaseResult(r string) map[string]string {
	return map[string]string{"redislock.release.result": r}
}
func extendFailure(r string) map[string]string {
	return map[string]string{"redislock.extend.failure_reason": r}
}

func TestAcquireOutcomes(t *testing.T) {
	t.Run("an acquisition, a refusal and a release are counted apart", func(t *testing.T) {
		reader, obs := newObserver(t)
		_, rdb := newMini(t)
		locker := newLocker(rdb, obs)
		ctx := context.Background()

		lock, err := locker.Acquire(ctx, "report")
		require.NoError(t, err)
		_, err = locker.Acquire(ctx, "report")
		require.ErrorIs(t, err, redislock.ErrNotAcquired)
		require.NoError(t, lock.Release(ctx))

		require.Equal(t, int64(1), counter(t, reader, "redislock.acquisitions", acquireResult("acquired")))
		require.Equal(t, int64(1), counter(t, reader, "redislock.acquisitions", acquireResult("not_acquired")))
		require.Equal(t, int64(0), counter(t, reader, "redislock.acquisitions", acquireResult("redis_error")))
		require.Equal(t, int64(2), counter(t, reader, "redislock.acquire.attempts", none))
		require.Equal(t, int64(1), counter(t, reader, "redislock.releases", releaseResult("released")))
		require.Equal(t, uint64(1), histogramCount(t, reader, "redislock.acquire.wait_time", acquireResult("acquired")))
		require.Equal(t, uint64(1), histogramCount(t, reader, "redislock.acquire.wait_time", acquireResult("not_acquired")))
		require.Equal(t, uint64(1), histogramCount(t, reader, "redislock.hold.duration", none))
		require.Equal(t, int64(0), counter(t, reader, "redislock.fail_open.runs", none))
	})

	t.Run("retries add attempts to one acquisition", func(t *testing.T) {
		reader, obs := newObserver(t)
		_, rdb := newMini(t)
		locker := newLocker(rdb, obs)
		ctx := context.Background()
		holder, err := locker.Acquire(ctx, "batch")
		require.NoError(t, err)
		defer holder.Release(ctx)

		_, err = locker.Acquire(ctx, "batch",
			redislock.WithRetry(redislock.LimitRetry(redislock.LinearBackoff(time.Millisecond), 2)))
		require.ErrorIs(t, err, redislock.ErrNotAcquired)

		require.Equal(t, int64(1), counter(t, reader, "redislock.acquisitions", acquireResult("not_acquired")))
		require.Equal(t, int64(4), counter(t, reader, "redislock.acquire.attempts", none), "1 for the holder, 3 for the waiter")
	})

	t.Run("a Redis that cannot be reached is an acquire error, not a refusal", func(t *testing.T) {
		reader, obs := newObserver(t)
		locker := newLocker(unreachableClient(t), obs)

		_, err := locker.Acquire(context.Background(), "report")
		require.Error(t, err)
		require.NotErrorIs(t, err, redislock.ErrNotAcquired)

		require.Equal(t, int64(1), counter(t, reader, "redislock.acquisitions", acquireResult("redis_error")))
		require.Equal(t, int64(0), counter(t, reader, "redislock.acquisitions", acquireResult("not_acquired")))
		require.Equal(t, uint64(1), histogramCount(t, reader, "redislock.acquire.wait_time", acquireResult("redis_error")))
	})

	t.Run("a fail-open run is counted with the acquire error that caused it", func(t *testing.T) {
		reader, obs := newObserver(t)
		locker := newLocker(unreachableClient(t), obs)

		ran := false
		err := locker.RunWithLock(context.Background(), "report", func(context.Context) error {
			ran = true
			return nil
		}, redislock.WithFailOpen())
		require.NoError(t, err)
		require.True(t, ran)

		require.Equal(t, int64(1), counter(t, reader, "redislock.fail_open.runs", none))
		require.Equal(t, int64(1), counter(t, reader, "redislock.acquisitions", acquireResult("redis_error")))
		require.Equal(t, uint64(0), histogramCount(t, reader, "redislock.hold.duration", none))
	})
}

func TestExtensions(t *testing.T) {
	t.Run("Lock.Extend records one extension and no failure", func(t *testing.T) {
		reader, obs := newObserver(t)
		_, rdb := newMini(t)
		locker := newLocker(rdb, obs, redislock.WithWatchdog(false))
		ctx := context.Background()

		lock, err := locker.Acquire(ctx, "report")
		require.NoError(t, err)
		require.NoError(t, lock.Extend(ctx, time.Minute))
		require.NoError(t, lock.Extend(ctx, time.Minute))
		require.NoError(t, lock.Release(ctx))

		require.Equal(t, uint64(2), histogramCount(t, reader, "redislock.extend.duration", none))
		_, recorded := collect(t, reader)["redislock.extend.failures"]
		require.False(t, recorded, "no failure point at all")
	})

	t.Run("Extend on a deleted key is a not_held failure and an expired loss", func(t *testing.T) {
		reader, obs := newObserver(t)
		mr, rdb := newMini(t)
		locker := newLocker(rdb, obs, redislock.WithWatchdog(false))
		ctx := context.Background()

		lock, err := locker.Acquire(ctx, "report")
		require.NoError(t, err)
		mr.Del(lock.Key())
		require.ErrorIs(t, lock.Extend(ctx, time.Minute), redislock.ErrNotHeld)

		require.Equal(t, uint64(1), histogramCount(t, reader, "redislock.extend.duration", none))
		eventuallyCounter(t, reader, "redislock.extend.failures", extendFailure("not_held"), 1)
		eventuallyCounter(t, reader, "redislock.losses", lostReason("expired"), 1)
	})

	t.Run("an extension too late because this process did not run is no redis_error", func(t *testing.T) {
		reader, obs := newObserver(t)
		obs.ObserveExtend(redislock.ExtendEvent{Name: "report", Watchdog: true, Err: context.DeadlineExceeded, Paused: 5 * time.Second})
		require.Equal(t, int64(1), counter(t, reader, "redislock.extend.failures", extendFailure("paused")))
		require.Equal(t, int64(0), counter(t, reader, "redislock.extend.failures", extendFailure("redis_error")))
	})
}

func TestLosses(t *testing.T) {
	t.Run("a deleted key is lost as expired, and the release finds it not held", func(t *testing.T) {
		reader, obs := newObserver(t)
		mr, rdb := newMini(t)
		locker := newLocker(rdb, obs, redislock.WithTTL(10*time.Second), redislock.WithExtendInterval(10*time.Millisecond))
		ctx := context.Background()

		lock, err := locker.Acquire(ctx, "report")
		require.NoError(t, err)
		mr.Del(lock.Key())
		waitDone(t, lock.Context())
		require.ErrorIs(t, lock.Release(ctx), redislock.ErrNotHeld)

		eventuallyCounter(t, reader, "redislock.losses", lostReason("expired"), 1)
		eventuallyCounter(t, reader, "redislock.extend.failures", extendFailure("not_held"), 1)
		require.Equal(t, int64(1), counter(t, reader, "redislock.releases", releaseResult("not_held")))
		require.Equal(t, uint64(1), histogramCount(t, reader, "redislock.hold.duration", none), "one hold, counted once")
		for _, reason := range []string{"taken", "unreachable", "max_hold"} {
			require.Equal(t, int64(0), counter(t, reader, "redislock.losses", lostReason(reason)), reason)
		}
	})

	t.Run("a key holding another token is lost as taken", func(t *testing.T) {
		reader, obs := newObserver(t)
		mr, rdb := newMini(t)
		locker := newLocker(rdb, obs, redislock.WithTTL(10*time.Second), redislock.WithExtendInterval(10*time.Millisecond))

		lock, err := locker.Acquire(context.Background(), "report")
		require.NoError(t, err)
		require.NoError(t, mr.Set(lock.Key(), "someone-else"))
		waitDone(t, lock.Context())
		require.ErrorIs(t, lock.Release(context.Background()), redislock.ErrNotHeld)

		eventuallyCounter(t, reader, "redislock.losses", lostReason("taken"), 1)
		require.Equal(t, int64(0), counter(t, reader, "redislock.losses", lostReason("expired")))
	})

	t.Run("a Redis gone until the safe deadline is lost as unreachable", func(t *testing.T) {
		reader, obs := newObserver(t)
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

		eventuallyCounter(t, reader, "redislock.losses", lostReason("unreachable"), 1)
		require.GreaterOrEqual(t, counter(t, reader, "redislock.extend.failures", extendFailure("redis_error")), int64(1))
		require.Equal(t, int64(1), counter(t, reader, "redislock.releases", releaseResult("redis_error")))
		require.Equal(t, uint64(0), histogramCount(t, reader, "redislock.hold.duration", none), "a failed release records no hold")
	})

	t.Run("a hold past WithMaxHold is lost as max_hold and released once", func(t *testing.T) {
		reader, obs := newObserver(t)
		_, rdb := newMini(t)
		locker := newLocker(rdb, obs, redislock.WithMaxHold(20*time.Millisecond))

		err := locker.RunWithLock(context.Background(), "report", func(ctx context.Context) error {
			waitDone(t, ctx)
			return nil
		})
		require.ErrorIs(t, err, redislock.ErrLockLost)

		eventuallyCounter(t, reader, "redislock.losses", lostReason("max_hold"), 1)
		require.Equal(t, int64(1), counter(t, reader, "redislock.releases", releaseResult("released")))
		hold := histogram(t, reader, "redislock.hold.duration", none)
		require.Equal(t, uint64(1), hold.Count, "one hold, counted once")
		require.GreaterOrEqual(t, hold.Sum, 0.020, "held at least until the max hold")
	})
}

func TestInstruments(t *testing.T) {
	reader, obs := newObserver(t)
	_, rdb := newMini(t)
	locker := newLocker(rdb, obs, redislock.WithWatchdog(false))
	ctx := context.Background()
	lock, err := locker.Acquire(ctx, "report")
	require.NoError(t, err)
	require.NoError(t, lock.Extend(ctx, time.Minute))
	require.NoError(t, lock.Release(ctx))
	require.ErrorIs(t, lock.Extend(ctx, time.Minute), redislock.ErrNotHeld) // sends nothing
	obs.ObserveLost(redislock.LostEvent{Name: "report", Reason: redislock.Taken})
	obs.ObserveFailOpen(redislock.FailOpenEvent{Name: "report"})
	obs.ObserveExtend(redislock.ExtendEvent{Name: "report", Err: errors.New("timeout")})
	obs.ObserveAcquire(redislock.AcquireEvent{Name: "relay", Acquired: true, Wait: time.Hour, Campaign: true})
	obs.ObserveWait(redislock.WaitEvent{Name: "report", Kind: "lock", Began: true})
	obs.ObserveLeader(redislock.LeaderEvent{Name: "relay", Leading: true})

	metrics := collect(t, reader)
	wantUnits := map[string]string{
		"redislock.acquisitions":      "{acquisition}",
		"redislock.acquire.attempts":  "{attempt}",
		"redislock.acquire.wait_time": "s",
		"redislock.hold.duration":     "s",
		"redislock.extend.duration":   "s",
		"redislock.extend.failures":   "{failure}",
		"redislock.losses":            "{loss}",
		"redislock.releases":          "{release}",
		"redislock.fail_open.runs":    "{run}",
		"redislock.campaign.duration": "s",
		"redislock.held":              "{hold}",
		"redislock.waiting":           "{caller}",
		"redislock.leader":            "{leader}",
	}
	upDowns := map[string]bool{"redislock.held": true, "redislock.waiting": true, "redislock.leader": true}
	got := map[string]string{}
	for name, m := range metrics {
		got[name] = m.Unit
		require.NotEmpty(t, m.Description, name)
		if sum, ok := m.Data.(metricdata.Sum[int64]); ok {
			require.Equal(t, !upDowns[name], sum.IsMonotonic, name)
			require.Equal(t, metricdata.CumulativeTemporality, sum.Temporality, name)
		}
	}
	require.Equal(t, wantUnits, got)

	bounds := func(name string, attrs map[string]string) []float64 { return histogram(t, reader, name, attrs).Bounds }
	extend := bounds("redislock.extend.duration", none)
	require.Equal(t, []float64{0.0001, 5}, []float64{extend[0], extend[len(extend)-1]}, "sub-millisecond round trips to seconds")
	wait := bounds("redislock.acquire.wait_time", acquireResult("acquired"))
	require.Equal(t, []float64{0.0001, redislock.MaxWaitWithoutDeadline.Seconds()}, []float64{wait[0], wait[len(wait)-1]})
	hold := bounds("redislock.hold.duration", none)
	require.Equal(t, []float64{0.001, 3600}, []float64{hold[0], hold[len(hold)-1]})
	campaign := bounds("redislock.campaign.duration", none)
	require.Equal(t, []float64{0.001, 7 * 24 * 3600}, []float64{campaign[0], campaign[len(campaign)-1]}, "a follower campaigns as long as the leader leads")

	t.Run("a View replaces the advised buckets", func(t *testing.T) {
		reader := sdkmetric.NewManualReader()
		provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader), sdkmetric.WithView(sdkmetric.NewView(
			sdkmetric.Instrument{Name: "redislock.hold.duration"},
			sdkmetric.Stream{Aggregation: sdkmetric.AggregationExplicitBucketHistogram{Boundaries: []float64{1, 10}}},
		)))
		defer func() { require.NoError(t, provider.Shutdown(context.Background())) }()
		obs, err := redislockotel.New(provider)
		require.NoError(t, err)
		obs.ObserveRelease(redislock.ReleaseEvent{Name: "x", HeldFor: 2 * time.Second})
		point := histogram(t, reader, "redislock.hold.duration", none)
		require.Equal(t, []float64{1, 10}, point.Bounds)
		require.Equal(t, []uint64{0, 1, 0}, point.BucketCounts)
	})
}

func TestNameAttribute(t *testing.T) {
	t.Run("off by default: no point carries the lock name", func(t *testing.T) {
		reader, obs := newObserver(t)
		_, rdb := newMini(t)
		locker := newLocker(rdb, obs)
		require.NoError(t, locker.RunWithLock(context.Background(), "secret-order-42", func(context.Context) error { return nil }))

		metrics := collect(t, reader)
		require.NotEmpty(t, metrics)
		for name, m := range metrics {
			var sets []map[string]string
			switch data := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range data.DataPoints {
					sets = append(sets, attributesOf(p.Attributes))
				}
			case metricdata.Histogram[float64]:
				for _, p := range data.DataPoints {
					sets = append(sets, attributesOf(p.Attributes))
				}
			default:
				t.Fatalf("%s: unexpected %T", name, m.Data)
			}
			require.NotEmpty(t, sets, name)
			for _, attrs := range sets {
				require.NotContains(t, attrs, string(redislockotel.NameKey), name)
				for _, v := range attrs {
					require.NotContains(t, v, "secret-order-42", name)
				}
			}
		}
	})

	t.Run("on: every event is counted under its lock's name", func(t *testing.T) {
		reader, obs := newObserver(t, redislockotel.WithNameAttribute())
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

		named := func(name string, attrs map[string]string) map[string]string {
			out := map[string]string{"redislock.lock.name": name}
			for k, v := range attrs {
				out[k] = v
			}
			return out
		}
		require.Equal(t, int64(1), counter(t, reader, "redislock.acquisitions", named("a", acquireResult("acquired"))))
		require.Equal(t, int64(1), counter(t, reader, "redislock.acquisitions", named("b", acquireResult("acquired"))))
		require.Equal(t, int64(1), counter(t, reader, "redislock.acquisitions", named("a", acquireResult("not_acquired"))))
		require.Equal(t, int64(1), counter(t, reader, "redislock.releases", named("b", releaseResult("released"))))
		require.Equal(t, int64(2), counter(t, reader, "redislock.acquire.attempts", named("a", none)))
		require.Equal(t, uint64(1), histogramCount(t, reader, "redislock.hold.duration", named("a", none)))
	})
}

func TestBadInput(t *testing.T) {
	t.Run("a nil MeterProvider is an invalid argument", func(t *testing.T) {
		for _, provider := range []metric.MeterProvider{nil, (*sdkmetric.MeterProvider)(nil)} {
			obs, err := redislockotel.New(provider)
			require.ErrorIs(t, err, redislock.ErrInvalidArgument)
			require.ErrorContains(t, err, "nil MeterProvider")
			require.Nil(t, obs)
		}
	})

	t.Run("a nil Option is an invalid argument", func(t *testing.T) {
		obs, err := redislockotel.New(noop.NewMeterProvider(), nil)
		require.ErrorIs(t, err, redislock.ErrInvalidArgument)
		require.ErrorContains(t, err, "nil Option")
		require.Nil(t, obs)
	})

	t.Run("a no-op provider is accepted and records nothing", func(t *testing.T) {
		obs, err := redislockotel.New(noop.NewMeterProvider())
		require.NoError(t, err)
		_, rdb := newMini(t)
		require.NoError(t, newLocker(rdb, obs).RunWithLock(context.Background(), "x", func(context.Context) error { return nil }))
	})

	t.Run("a nil or zero Observer records nothing and does not panic", func(t *testing.T) {
		for _, obs := range []*redislockotel.Observer{nil, {}} {
			_, rdb := newMini(t)
			locker := newLocker(rdb, obs)
			require.NoError(t, locker.RunWithLock(context.Background(), "x", func(context.Context) error { return nil }))
			obs.ObserveLost(redislock.LostEvent{Name: "x", Reason: redislock.Expired})
			obs.ObserveExtend(redislock.ExtendEvent{Name: "x"})
			obs.ObserveFailOpen(redislock.FailOpenEvent{Name: "x"})
			obs.ObserveHold(redislock.HoldEvent{Name: "x", Kind: "lock", Began: true})
			obs.ObserveWait(redislock.WaitEvent{Name: "x", Kind: "lock", Began: true, Campaign: true})
			obs.ObserveLeader(redislock.LeaderEvent{Name: "x", Leading: true})
		}
	})

	t.Run("an unknown loss reason is counted as other", func(t *testing.T) {
		reader, obs := newObserver(t)
		obs.ObserveLost(redislock.LostEvent{Name: "x", Reason: redislock.LostReason(99)})
		require.Equal(t, int64(1), counter(t, reader, "redislock.losses", lostReason("other")))
	})

	t.Run("instruments refused by the provider are an error", func(t *testing.T) {
		obs, err := redislockotel.New(refusingProvider{})
		require.ErrorContains(t, err, "redislockotel: creating instruments")
		require.ErrorContains(t, err, "no counters here")
		require.Nil(t, obs)
	})
}

// refusingProvider's meter refuses to create counters, as a provider that
// cannot serve an instrument would.
type refusingProvider struct{ noop.MeterProvider }

func (refusingProvider) Meter(string, ...metric.MeterOption) metric.Meter { return refusingMeter{} }

type refusingMeter struct{ noop.Meter }

func (refusingMeter) Int64Counter(string, ...metric.Int64CounterOption) (metric.Int64Counter, error) {
	return noop.Int64Counter{}, errors.New("no counters here")
}

func TestConcurrentUse(t *testing.T) {
	reader, obs := newObserver(t, redislockotel.WithNameAttribute())
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

	var total int64
	for n := range names {
		name := fmt.Sprintf("job-%d", n)
		attrs := func(k, v string) map[string]string {
			out := map[string]string{"redislock.lock.name": name}
			if k != "" {
				out[k] = v
			}
			return out
		}
		require.Equal(t, int64(ran[name]), counter(t, reader, "redislock.acquisitions", attrs("redislock.acquire.result", "acquired")), name)
		require.Equal(t, int64(refused[name]), counter(t, reader, "redislock.acquisitions", attrs("redislock.acquire.result", "not_acquired")), name)
		require.Equal(t, int64(ran[name]), counter(t, reader, "redislock.releases", attrs("redislock.release.result", "released")), name)
		require.Equal(t, uint64(ran[name]), histogramCount(t, reader, "redislock.hold.duration", attrs("", "")), name)
		total += counter(t, reader, "redislock.acquire.attempts", attrs("", ""))
	}
	require.Equal(t, int64(goroutines*calls), total, "one attempt per call")
}

func TestRealRedis(t *testing.T) {
	server := redistest.Start(t)
	reader, obs := newObserver(t)
	rdb := newRedisClient(t, server.Addr())
	locker := newLocker(rdb, obs, redislock.WithTTL(10*time.Second), redislock.WithExtendInterval(20*time.Millisecond))
	ctx := context.Background()

	lock, err := locker.Acquire(ctx, "report")
	require.NoError(t, err)
	_, err = locker.Acquire(ctx, "report")
	require.ErrorIs(t, err, redislock.ErrNotAcquired)
	require.NoError(t, lock.Extend(ctx, 10*time.Second))
	eventually(t, "the watchdog has extended the lock", func() bool {
		return histogramCount(t, reader, "redislock.extend.duration", none) >= 2
	})
	require.NoError(t, rdb.Del(ctx, lock.Key()).Err())
	waitDone(t, lock.Context())
	require.ErrorIs(t, lock.Release(ctx), redislock.ErrNotHeld)

	again, err := locker.Acquire(ctx, "report")
	require.NoError(t, err)
	require.NoError(t, again.Release(ctx))

	eventuallyCounter(t, reader, "redislock.losses", lostReason("expired"), 1)
	eventuallyCounter(t, reader, "redislock.extend.failures", extendFailure("not_held"), 1)
	require.Equal(t, int64(2), counter(t, reader, "redislock.acquisitions", acquireResult("acquired")))
	require.Equal(t, int64(1), counter(t, reader, "redislock.acquisitions", acquireResult("not_acquired")))
	require.Equal(t, int64(0), counter(t, reader, "redislock.acquisitions", acquireResult("redis_error")))
	require.Equal(t, int64(1), counter(t, reader, "redislock.releases", releaseResult("not_held")))
	require.Equal(t, int64(1), counter(t, reader, "redislock.releases", releaseResult("released")))
	require.Equal(t, uint64(2), histogramCount(t, reader, "redislock.hold.duration", none))
}
