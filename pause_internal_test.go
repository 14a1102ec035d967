package redislock

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// A process that did not run past its lease (SIGSTOP, a long GC pause) is
// told so, and the extension it could not make in time is no Redis error.
// Its timers are made late as a paused process's are: the runtime timer is
// stopped while marked armed, and fired long after it was due.

// stopTimer stops q's runtime timer but leaves it marked armed, as a process
// that does not run leaves it; it waits until one is armed.
func stopTimer[T any](t *testing.T, q *timedQueue[T]) {
	t.Helper()
	waitFor(t, func() bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		return !q.timer.armed.IsZero() && q.timer.timer.Stop()
	}, "no timer armed")
}

// fireLate fires q's stopped timer now, as the runtime does once the process runs again.
func fireLate[T any](q *timedQueue[T]) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.timer.timer.Reset(0)
}

// pauseObserver keeps the failed extensions and the losses.
type pauseObserver struct {
	mu      sync.Mutex
	extends []ExtendEvent
	losses  []LostEvent
}

func (o *pauseObserver) ObserveAcquire(AcquireEvent)   {}
func (o *pauseObserver) ObserveRelease(ReleaseEvent)   {}
func (o *pauseObserver) ObserveFailOpen(FailOpenEvent) {}
func (o *pauseObserver) ObserveExtend(e ExtendEvent) {
	if e.Err != nil {
		o.mu.Lock()
		o.extends = append(o.extends, e)
		o.mu.Unlock()
	}
}
func (o *pauseObserver) ObserveLost(e LostEvent) {
	o.mu.Lock()
	o.losses = append(o.losses, e)
	o.mu.Unlock()
}

func (o *pauseObserver) failedExtensions() []ExtendEvent {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]ExtendEvent(nil), o.extends...)
}

// lostLine records the "lock lost" log record's reason.
type lostLine struct {
	mu     sync.Mutex
	reason string
}

func (h *lostLine) Enabled(context.Context, slog.Level) bool { return true }
func (h *lostLine) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *lostLine) WithGroup(string) slog.Handler            { return h }
func (h *lostLine) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "redislock: lock lost" {
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "reason" {
				h.mu.Lock()
				h.reason = a.Value.String()
				h.mu.Unlock()
			}
			return true
		})
	}
	return nil
}

func (h *lostLine) said() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.reason
}

func TestALossToAPauseOfThisProcessSaysSo(t *testing.T) {
	t.Parallel()
	const ttl = time.Second
	setup := func(t *testing.T) (*Client, *hold, *miniredis.Miniredis, *pauseObserver, *lostLine) {
		mini := miniredis.RunT(t)
		rdb := redis.NewClient(&redis.Options{Addr: mini.Addr(), MaxRetries: -1})
		t.Cleanup(func() { _ = rdb.Close() })
		obs, logs := &pauseObserver{}, &lostLine{}
		c := New(rdb, WithLogger(slog.New(logs)), WithObserver(obs), WithTTL(ttl))
		l, err := c.Acquire(context.Background(), "paused")
		require.NoError(t, err)
		t.Cleanup(func() {
			_ = l.Release(context.Background()) // (keeps the Lock reachable: not dropped)
			_ = c.Close(context.Background())
		})
		return c, l.h, mini, obs, logs
	}
	// pause stops the Client's watchdog and alarms and lets time pass until
	// past the lock's safe deadline: the fault itself, a pause of the process
	// as its timers see it (any longer is the same pause). The alarm is then
	// late by less than pauseFloor, as in the settlement demo; the watchdog,
	// due an interval after the last extension, by about 2/3 of the TTL.
	// lastErr, when set, is the last extension's error, set as the watchdog
	// records one once its timer is stopped (no extension comes after).
	pause := func(t *testing.T, c *Client, h *hold, lastErr error) {
		stopTimer(t, &c.watchdog().timedQueue)
		stopTimer(t, &c.alarms().timedQueue)
		h.mu.Lock()
		if lastErr != nil {
			h.lastErr = lastErr
		}
		deadline := h.safeDeadline
		h.mu.Unlock()
		time.Sleep(time.Until(deadline.Add(100 * time.Millisecond)))
	}
	lostToAPause := func(t *testing.T, h *hold, obs *pauseObserver, logs *lostLine) {
		t.Helper()
		waitDone(t, h.context(), 10*time.Second)
		var lost *LostError
		require.ErrorAs(t, context.Cause(h.context()), &lost)
		require.Equal(t, Unreachable, lost.Reason, "callers match on the reason: it stays")
		require.GreaterOrEqual(t, lost.Paused, pauseFloor)
		require.Contains(t, lost.Error(), "this process did not run for ")
		require.NotContains(t, lost.Error(), "redis unreachable")
		require.Contains(t, logs.said(), "this process did not run for ")
		require.Equal(t, []LostEvent{{Name: "paused", Reason: Unreachable, HeldFor: lost.HeldFor, Paused: lost.Paused}}, obs.losses)
		for _, e := range obs.failedExtensions() {
			require.Positive(t, e.Paused, "a failed extension is the pause's, not Redis': %v", e.Err)
		}
	}

	t.Run("the safe deadline's alarm rings first", func(t *testing.T) {
		c, h, _, obs, logs := setup(t)
		pause(t, c, h, nil)
		fireLate(&c.alarms().timedQueue)
		lostToAPause(t, h, obs, logs)
		fireLate(&c.watchdog().timedQueue) // nothing to extend: the lock is lost
	})
	t.Run("the watchdog fires first", func(t *testing.T) {
		c, h, _, obs, logs := setup(t)
		pause(t, c, h, nil)
		fireLate(&c.watchdog().timedQueue)
		waitFor(t, func() bool { return len(obs.failedExtensions()) > 0 }, "no failed extension")
		fireLate(&c.alarms().timedQueue)
		lostToAPause(t, h, obs, logs)
		require.NotEmpty(t, obs.failedExtensions())
	})
	// Redis failed before the process paused: the loss is Redis's (it may
	// not have been extended without the pause either); an extension cut
	// short by its own deadline (the safe deadline) is no Redis error, and
	// leaves the loss to the pause.
	for _, tc := range []struct {
		name    string
		lastErr error
		paused  bool
	}{
		{"Redis failing before the pause is not a pause", fmt.Errorf("redislock: extend %q: %w", "paused",
			&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}), false},
		{"an extension cut short by its own deadline before the pause is the pause's", fmt.Errorf("redislock: extend %q: %w",
			"paused", context.DeadlineExceeded), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, h, _, obs, logs := setup(t)
			pause(t, c, h, tc.lastErr)
			fireLate(&c.alarms().timedQueue)
			if tc.paused {
				lostToAPause(t, h, obs, logs)
				return
			}
			waitDone(t, h.context(), 10*time.Second)
			var lost *LostError
			require.ErrorAs(t, context.Cause(h.context()), &lost)
			require.Equal(t, Unreachable, lost.Reason)
			require.Zero(t, lost.Paused, "Redis failed first: its failure")
			require.Contains(t, lost.Error(), "redis unreachable until the safe deadline")
			require.ErrorIs(t, lost, syscall.ECONNREFUSED)
			require.Equal(t, "redis unreachable until the safe deadline", logs.said())
		})
	}
	t.Run("Redis failing is not a pause", func(t *testing.T) {
		_, h, mini, obs, logs := setup(t)
		mini.Close()
		waitDone(t, h.context(), 10*time.Second)
		var lost *LostError
		require.ErrorAs(t, context.Cause(h.context()), &lost)
		require.Equal(t, Unreachable, lost.Reason)
		require.Zero(t, lost.Paused)
		require.Contains(t, lost.Error(), "redis unreachable until the safe deadline")
		require.Equal(t, "redis unreachable until the safe deadline", logs.said())
		waitFor(t, func() bool { return len(obs.failedExtensions()) > 0 }, "no failed extension")
		for _, e := range obs.failedExtensions() {
			require.Zero(t, e.Paused, "%v", e.Err)
		}
	})
}

func waitDone(t *testing.T, ctx context.Context, within time.Duration) {
	t.Helper()
	select {
	case <-ctx.Done():
	case <-time.After(within):
		t.Fatalf("not done within %v", within)
	}
}

// The rule itself: a timer late by pauseFloor or more is a pause; timers of
// one pause make one; a pause counts across a time it covers, when over the
// lease's share; a timer armed for a time already past is due now, not late.
func TestPausesAreTimersFiringFarLaterThanDue(t *testing.T) {
	var p pauses
	now := time.Now()
	p.note(now.Add(-pauseFloor+time.Millisecond), now)
	require.Zero(t, p.across(now.Add(-time.Millisecond), 0), "late by less than pauseFloor: a busy machine")
	p.note(now.Add(-3*time.Second), now)                     // the watchdog, due 3 s ago
	p.note(now.Add(-time.Second), now.Add(time.Millisecond)) // the alarm, due 1 s ago: the same pause
	require.Equal(t, 3*time.Second+time.Millisecond, p.across(now.Add(-time.Second), 0))
	require.Zero(t, p.across(now.Add(-4*time.Second), 0), "before the pause")
	require.Zero(t, p.across(now.Add(-time.Second), 4*time.Second), "shorter than asked")
	p.note(now.Add(time.Minute), now.Add(time.Minute+pauseFloor)) // a later pause replaces it
	require.Zero(t, p.across(now.Add(-time.Second), 0))
	require.Equal(t, pauseFloor, p.across(now.Add(time.Minute), 0))

	var timer lazyTimer
	timer.fire = func() {}
	timer.arm(time.Now().Add(-time.Hour))
	defer timer.stop()
	require.Less(t, time.Since(timer.armed), pauseFloor, "armed for a time past: due now")
}
