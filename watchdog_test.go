package redislock_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/internal/redistest"
)

// A lock whose TTL is short against the work is kept by the watchdog, on
// real time. A second's TTL is lost only if an extension is held up for two
// thirds of it (660 ms), longer than the stalls of a loaded 2-core machine
// (300 ms was lost under two busy loops).
func TestWatchdogKeepsAShortLockAliveThroughLongWork(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		if b.mini != nil {
			b.mini.ClockTTL(true) // age keys with real time, like a server
		}
		c := redislock.New(b.rdb, quiet, redislock.WithTTL(time.Second))
		l, err := c.Acquire(ctx, "long-job")
		require.NoError(t, err)

		work := time.After(3 * time.Second) // the work itself: three TTLs
		for working := true; working; {
			select {
			case <-work:
				working = false
			case <-l.Context().Done():
				t.Fatalf("lock lost during the work: %v", context.Cause(l.Context()))
			case <-time.After(20 * time.Millisecond):
				require.Equal(t, l.Token(), b.rdb.Get(ctx, l.Key()).Val(), "the key still holds our token")
			}
		}
		require.NoError(t, l.Release(ctx))
	})
}

func TestWatchdogSignalsLossWhenTheKeyIsDeletedOrOverwritten(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		logs := &logRecorder{}
		c := redislock.New(b.rdb, redislock.WithLogger(slog.New(logs)),
			redislock.WithTTL(time.Minute), redislock.WithExtendInterval(20*time.Millisecond))

		deleted, err := c.Acquire(ctx, "deleted")
		require.NoError(t, err)
		require.NoError(t, b.rdb.Del(ctx, deleted.Key()).Err())
		waitDone(t, deleted.Context(), 10*time.Second)
		requireLost(t, deleted.Context(), redislock.Expired)

		taken, err := c.Acquire(ctx, "taken")
		require.NoError(t, err)
		require.NoError(t, b.rdb.Set(ctx, taken.Key(), "another-token", time.Minute).Err())
		waitDone(t, taken.Context(), 10*time.Second)
		requireLost(t, taken.Context(), redislock.Taken)
		require.Equal(t, "another-token", b.rdb.Get(ctx, taken.Key()).Val(), "the new holder's key is untouched")

		line, ok := logs.find(slog.LevelError, "lock lost")
		require.True(t, ok, "loss logged at Error: %v", logs.lines())
		require.Contains(t, line, "name=deleted")
		require.Contains(t, line, "reason=expired")
		_, ok = logs.find(slog.LevelError, "reason=taken by another holder")
		require.True(t, ok, "%v", logs.lines())

		require.ErrorIs(t, deleted.Release(ctx), redislock.ErrNotHeld)
		require.ErrorIs(t, taken.Release(ctx), redislock.ErrNotHeld)
	})
}

func TestWatchdogSignalsLossBeforeTheLeaseEndsWhenRedisHangs(t *testing.T) {
	server := redistest.Start(t)
	// A long read timeout: the stalled extension must not be what ends the hold.
	rdb := redis.NewClient(&redis.Options{Addr: server.Addr(), ReadTimeout: 10 * time.Second, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	clock := &extensionClock{}
	const ttl = 500 * time.Millisecond
	c := redislock.New(rdb, quiet, redislock.WithTTL(ttl), redislock.WithObserver(clock))
	l, err := c.Acquire(ctx, "job")
	require.NoError(t, err)
	eventually(t, 10*time.Second, func() bool { _, n := clock.last(); return n >= 1 }, "no extension confirmed")

	stalls := watchStalls()
	server.Pause(t) // SIGSTOP: the connection stays open, nothing answers
	paused := time.Now()
	lostAt := waitDone(t, l.Context(), 10*time.Second)
	stalled := stalls()
	server.Resume(t)

	lastSent, _ := clock.last()
	lost := requireLost(t, l.Context(), redislock.Unreachable)
	require.True(t, lostAt.After(paused), "lost only after the server hung")
	require.True(t, lostAt.Before(lastSent.Add(ttl+stalled)),
		"loss signalled %v after the last confirmed extension was sent; the lease (%v) could have expired by then (the process stalled %v)",
		lostAt.Sub(lastSent), ttl, stalled)
	t.Logf("loss signalled %v after the last confirmed send (TTL %v): %v", lostAt.Sub(lastSent), ttl, lost)

	err = l.Release(ctx)
	require.True(t, err == nil || errors.Is(err, redislock.ErrNotHeld), "release after resume: %v", err)
}

func TestWatchdogSurvivesATransientFailure(t *testing.T) {
	b := &backend{}
	mini := newMiniServer(t)
	b.mini, b.rdb = mini, newRedisClient(t, mini.Addr())
	ctx := context.Background()
	logs := &logRecorder{}
	clock := &extensionClock{}
	c := redislock.New(b.rdb, redislock.WithLogger(slog.New(logs)), redislock.WithObserver(clock),
		redislock.WithTTL(10*time.Second), redislock.WithExtendInterval(10*time.Millisecond))
	l, err := c.Acquire(ctx, "job")
	require.NoError(t, err)

	mini.SetError("LOADING Redis is loading the dataset in memory")
	eventually(t, 10*time.Second, func() bool {
		_, ok := logs.find(slog.LevelWarn, "extension failed")
		return ok
	}, "a failed extension is logged at Warn")
	mini.SetError("")
	_, before := clock.last()
	eventually(t, 10*time.Second, func() bool { _, n := clock.last(); return n > before }, "extensions resume")
	require.NoError(t, l.Context().Err(), "a failure before the safe deadline is not a loss")
	require.NoError(t, l.Release(ctx))
}

func TestWatchdogDeclaresUnreachableAtTheSafeDeadline(t *testing.T) {
	mini := newMiniServer(t)
	rdb := newRedisClient(t, mini.Addr())
	ctx := context.Background()
	clock := &extensionClock{}
	const ttl = 300 * time.Millisecond
	c := redislock.New(rdb, quiet, redislock.WithObserver(clock), redislock.WithTTL(ttl))
	l, err := c.Acquire(ctx, "job")
	require.NoError(t, err)
	eventually(t, 10*time.Second, func() bool { _, n := clock.last(); return n >= 1 }, "no extension confirmed")
	stalls := watchStalls()
	mini.SetError("LOADING Redis is loading the dataset in memory")
	lostAt := waitDone(t, l.Context(), 10*time.Second)
	stalled := stalls()
	lastSent, _ := clock.last()
	lost := requireLost(t, l.Context(), redislock.Unreachable)
	require.True(t, lostAt.Before(lastSent.Add(ttl+stalled)), "signalled %v after the last confirmed send (the process stalled %v)", lostAt.Sub(lastSent), stalled)
	require.ErrorContains(t, lost, "LOADING", "the loss carries the last Redis error")
	mini.SetError("")
	require.NoError(t, l.Release(ctx), "the key was still ours: release cleans it up")
}

func TestRedisRestartMidHoldIsALoss(t *testing.T) {
	server := redistest.Start(t)
	rdb := newRedisClient(t, server.Addr())
	ctx := context.Background()
	c := redislock.New(rdb, quiet, redislock.WithTTL(3*time.Second), redislock.WithExtendInterval(20*time.Millisecond))
	l, err := c.Acquire(ctx, "job")
	require.NoError(t, err)
	server.Restart(t) // SIGKILL, then an empty server on the same port
	waitDone(t, l.Context(), 10*time.Second)
	requireLost(t, l.Context(), redislock.Expired)
	require.ErrorIs(t, l.Release(ctx), redislock.ErrNotHeld, "the restarted server has no key (and no scripts)")

	again, err := c.Acquire(ctx, "job")
	require.NoError(t, err, "new acquisitions work after the restart")
	require.NoError(t, again.Release(ctx))
}

func TestWatchdogOffCancelsAtTheLeasesSafeDeadline(t *testing.T) {
	mini := newMini(t)
	c := redislock.New(mini, quiet, redislock.WithWatchdog(false), redislock.WithTTL(100*time.Millisecond))
	l, err := c.Acquire(context.Background(), "job")
	require.NoError(t, err)
	waitDone(t, l.Context(), 10*time.Second)
	requireLost(t, l.Context(), redislock.Expired)
}

// The safe deadlines of a Client's locks share one timer (see alarms in
// watchdog.go): a deadline earlier than the one armed must move it, the
// timer must be set again for the next deadline after each ring, and no
// lock may be told it is lost before its own safe deadline (a ring that
// comes early for a lock finds its deadline ahead and sets it again, see
// Lock.onSafeDeadline).
func TestSafeDeadlinesOfManyLocksRingInOrder(t *testing.T) {
	mini := newMini(t)
	c := redislock.New(mini, quiet, redislock.WithWatchdog(false))
	ctx := context.Background()
	acquire := func(name string, ttl time.Duration) (*redislock.Lock, time.Time) {
		t.Helper()
		before := time.Now()
		l, err := c.Acquire(ctx, name, redislock.WithTTL(ttl))
		require.NoError(t, err)
		return l, before
	}
	far, _ := acquire("far", time.Hour) // arms the timer an hour ahead
	released, _ := acquire("released", 50*time.Millisecond)
	require.NoError(t, released.Release(ctx)) // takes its deadline out again
	first, _ := acquire("first", 100*time.Millisecond)
	const secondTTL = 300 * time.Millisecond
	second, secondFrom := acquire("second", secondTTL)
	secondEnded := make(chan time.Time, 1)
	context.AfterFunc(second.Context(), func() { secondEnded <- time.Now() })

	waitDone(t, first.Context(), 10*time.Second)
	requireLost(t, first.Context(), redislock.Expired)
	waitDone(t, second.Context(), 10*time.Second)
	requireLost(t, second.Context(), redislock.Expired)
	// Its safe deadline is its lease less the drift allowance (TTL/100
	// + 2ms) after the call began; the loss may come later, never sooner.
	require.GreaterOrEqual(t, (<-secondEnded).Sub(secondFrom), secondTTL-secondTTL/100-2*time.Millisecond,
		"a lock was told it is lost before its safe deadline")

	require.ErrorIs(t, context.Cause(released.Context()), redislock.ErrReleased)
	require.NoError(t, far.Context().Err(), "a deadline an hour away has not rung")
	require.NoError(t, far.Release(ctx))
}

func TestExtendToAShorterLeaseReschedulesTheWatchdog(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		clock := &extensionClock{}
		// The old schedule's first extension is due in 20s.
		c := redislock.New(b.rdb, quiet, redislock.WithTTL(time.Minute), redislock.WithObserver(clock))
		l, err := c.Acquire(ctx, "job")
		require.NoError(t, err)
		require.NoError(t, l.Extend(ctx, 3*time.Second))
		_, extended := clock.last() // Extend's own, observed before it returns
		// The 3s lease is renewed every second from now on: two renewals
		// by the watchdog come long before the old schedule's first. The
		// count is polled, not timed: a loaded machine only makes the
		// wait longer.
		eventually(t, 15*time.Second, func() bool { _, n := clock.last(); return n >= extended+2 },
			"the watchdog kept the old schedule: fewer than two renewals in 15s")
		require.NoError(t, l.Context().Err(), "held all along")
		require.LessOrEqual(t, b.rdb.PTTL(ctx, l.Key()).Val(), 3*time.Second, "renewed to the shorter lease")
		require.Equal(t, l.Token(), b.rdb.Get(ctx, l.Key()).Val())
		require.NoError(t, l.Release(ctx))
	})
}
