package redislock_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redislock/redislock"
)

// gaugeRecorder is a GaugeObserver that keeps the counts a metrics backend
// keeps (holds and waits by kind, leaders by election), what it saw go wrong
// (an end without its beginning drives a count below zero), the leadership
// changes in order and the Campaign flags of the acquire events.
type gaugeRecorder struct {
	nopObserver
	mu        sync.Mutex
	counts    map[string]int // "held:KIND", "waiting:KIND", "campaigning:NAME", "leading:NAME"
	wrong     []string
	leaders   []string // "NAME+" when a term began, "NAME-" when it ended
	campaigns []string // "NAME acquired=BOOL" for each AcquireEvent with Campaign set
}

func newGaugeRecorder() *gaugeRecorder { return &gaugeRecorder{counts: map[string]int{}} }

func (r *gaugeRecorder) count(key string, up bool, event any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if up {
		r.counts[key]++
		return
	}
	if r.counts[key]--; r.counts[key] < 0 {
		r.wrong = append(r.wrong, fmt.Sprintf("%s below zero at %+v", key, event))
	}
}

func (r *gaugeRecorder) ObserveHold(e redislock.HoldEvent) { r.count("held:"+e.Kind, e.Began, e) }

func (r *gaugeRecorder) ObserveWait(e redislock.WaitEvent) {
	if e.Campaign {
		r.count("campaigning:"+e.Name, e.Began, e)
		return
	}
	r.count("waiting:"+e.Kind, e.Began, e)
}

func (r *gaugeRecorder) ObserveLeader(e redislock.LeaderEvent) {
	r.count("leading:"+e.Name, e.Leading, e)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.leaders = append(r.leaders, map[bool]string{true: e.Name + "+", false: e.Name + "-"}[e.Leading])
}

func (r *gaugeRecorder) ObserveAcquire(e redislock.AcquireEvent) {
	if e.Campaign {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.campaigns = append(r.campaigns, fmt.Sprintf("%s acquired=%v", e.Name, e.Acquired))
	}
}

// state is every count that is not zero, sorted: "" when nothing is held,
// waited for or led.
func (r *gaugeRecorder) state() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var parts []string
	for key, n := range r.counts {
		if n != 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", key, n))
		}
	}
	slices.Sort(parts)
	return strings.Join(parts, " ")
}

// requireState waits until the counts are want. The events come from the
// callers' goroutines, the watchdog's and the finalizer's: the 10 s bound
// only guards against a hang (each wait below is for an event the test
// caused, which a loaded machine delays by milliseconds).
func (r *gaugeRecorder) requireState(t *testing.T, want string) {
	t.Helper()
	eventually(t, 10*time.Second, func() bool { return r.state() == want }, "gauges %q, want %q", r.state(), want)
	r.mu.Lock()
	defer r.mu.Unlock()
	require.Empty(t, r.wrong)
}

// Every hold and every wait of every kind, over two Clients sharing one
// GaugeObserver, is reported once as it begins and once as it ends, whatever
// ends it: the counts follow each step and are all zero after Close.
func TestGaugeEventsReturnToZeroAfterAMixedWorkload(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		rec := newGaugeRecorder()
		opts := []redislock.Option{quiet, redislock.WithObserver(rec), redislock.WithTTL(2 * time.Second)}
		c1, c2 := redislock.New(b.rdb, opts...), redislock.New(b.rdb, opts...)
		retry := redislock.WithRetry(redislock.LinearBackoff(5 * time.Millisecond))
		// waitFor runs acquire on a goroutine of its own; its result comes on the channel.
		waitFor := func(acquire func() (*redislock.Lock, error)) chan error {
			done := make(chan error, 1)
			go func() {
				l, err := acquire()
				if err == nil {
					t.Cleanup(func() { _ = l.Release(ctx) })
				}
				done <- err
			}()
			return done
		}
		result := func(done chan error) error {
			t.Helper()
			select {
			case err := <-done:
				return err
			case <-time.After(10 * time.Second): // guards against a hang only
				t.Fatal("the waiting call did not return")
			}
			return nil
		}

		x, err := c1.Acquire(ctx, "x")
		require.NoError(t, err)
		var kept []*redislock.Lock // not dropped: a dropped Lock is released
		for _, c := range []*redislock.Client{c1, c2} {
			shared, err := c.AcquireShared(ctx, "s")
			require.NoError(t, err)
			slot, err := c.AcquireSemaphore(ctx, "sem", 2)
			require.NoError(t, err)
			kept = append(kept, shared, slot)
		}
		defer runtime.KeepAlive(kept)
		multi, err := c2.AcquireMulti(ctx, []string{"m1", "m2"})
		require.NoError(t, err)
		rec.requireState(t, "held:lock=2 held:semaphore=2 held:shared=2")
		require.NoError(t, multi.Release(ctx))
		rec.requireState(t, "held:lock=1 held:semaphore=2 held:shared=2")

		t.Log("a wait that gives up, behind a holder of the same Client")
		giveUp, cancel := context.WithCancel(ctx)
		gaveUp := waitFor(func() (*redislock.Lock, error) { return c1.Acquire(giveUp, "x", retry) })
		rec.requireState(t, "held:lock=1 held:semaphore=2 held:shared=2 waiting:lock=1")
		cancel()
		require.ErrorIs(t, result(gaveUp), redislock.ErrNotAcquired)
		rec.requireState(t, "held:lock=1 held:semaphore=2 held:shared=2")

		t.Log("a wait that ends with the lock: a semaphore slot released")
		third := waitFor(func() (*redislock.Lock, error) { return c2.AcquireSemaphore(ctx, "sem", 2, retry) })
		rec.requireState(t, "held:lock=1 held:semaphore=2 held:shared=2 waiting:semaphore=1")
		sem, err := c1.AcquireSemaphore(ctx, "sem", 2) // refused: both slots are held
		require.ErrorIs(t, err, redislock.ErrNotAcquired)
		require.Nil(t, sem)
		_, err = b.rdb.ZPopMin(ctx, "lock:{sem}").Result() // one holder's slot gone: the waiter gets it
		require.NoError(t, err)
		require.NoError(t, result(third))
		// The popped slot's holder learns its loss at its next extension.
		rec.requireState(t, "held:lock=1 held:semaphore=2 held:shared=2")

		t.Log("a wait that ends with an error: the key turned into a hash")
		require.NoError(t, b.rdb.Set(ctx, "lock:{bad}", "someone-else", time.Minute).Err())
		bad := waitFor(func() (*redislock.Lock, error) { return c2.Acquire(ctx, "bad", retry) })
		rec.requireState(t, "held:lock=1 held:semaphore=2 held:shared=2 waiting:lock=1")
		// In one step (RENAME): an attempt in between would take the lock.
		require.NoError(t, b.rdb.HSet(ctx, "{bad}hash", "f", "v").Err())
		require.NoError(t, b.rdb.Rename(ctx, "{bad}hash", "lock:{bad}").Err())
		err = result(bad)
		require.Error(t, err)
		require.NotErrorIs(t, err, redislock.ErrNotAcquired)
		rec.requireState(t, "held:lock=1 held:semaphore=2 held:shared=2")

		t.Log("losses: a deleted key, the maximum hold; the Release after each finds the hold ended")
		require.NoError(t, b.rdb.Del(ctx, x.Key()).Err())
		require.ErrorIs(t, x.Extend(ctx, time.Second), redislock.ErrNotHeld)
		rec.requireState(t, "held:semaphore=2 held:shared=2")
		require.ErrorIs(t, x.Release(ctx), redislock.ErrNotHeld)
		capped, err := c1.Acquire(ctx, "capped", redislock.WithMaxHold(20*time.Millisecond))
		require.NoError(t, err)
		waitDone(t, capped.Context(), 10*time.Second)
		rec.requireState(t, "held:semaphore=2 held:shared=2")
		require.NoError(t, capped.Release(ctx))
		rec.requireState(t, "held:semaphore=2 held:shared=2")

		t.Log("a dropped Lock, released by its finalizer")
		func() {
			_, err := c2.Acquire(ctx, "dropped") // the Lock is dropped here
			require.NoError(t, err)
		}()
		eventually(t, 10*time.Second, func() bool {
			runtime.GC() // finds the Lock unreachable; its finalizer runs soon after
			return rec.state() == "held:semaphore=2 held:shared=2"
		}, "the dropped Lock's hold did not end: %q", rec.state())

		t.Log("an election: a leader, a follower campaigning, a hand-over")
		leader := campaign(t, c1, "leader", "e")
		leader.nextTerm(t, 10*time.Second)
		follower := campaign(t, c2, "follower", "e")
		rec.requireState(t, "campaigning:e=1 held:lock=1 held:semaphore=2 held:shared=2 leading:e=1")
		leader.cancel(nil)
		follower.nextTerm(t, 10*time.Second)
		rec.requireState(t, "held:lock=1 held:semaphore=2 held:shared=2 leading:e=1")

		t.Log("Close ends every hold and wait of its Client")
		closing := waitFor(func() (*redislock.Lock, error) { return c1.Acquire(ctx, "s", retry) })
		rec.requireState(t, "held:lock=1 held:semaphore=2 held:shared=2 leading:e=1 waiting:lock=1")
		require.NoError(t, c1.Close(ctx))
		require.ErrorIs(t, result(closing), redislock.ErrClosed)
		require.NoError(t, c2.Close(ctx))
		rec.requireState(t, "")

		rec.mu.Lock()
		defer rec.mu.Unlock()
		require.Equal(t, []string{"e+", "e-", "e+", "e-"}, rec.leaders)
		require.Equal(t, []string{"e acquired=true", "e acquired=true"}, rec.campaigns,
			"one campaign event per Elect acquisition; Acquire's are not campaigns")
	})
}

// A term of leadership ends with the hold, at the loss, not when lead
// returns; Elect campaigns again and the next term is reported.
func TestLeadershipEndsWhenTheElectionsLockIsLost(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		rec := newGaugeRecorder()
		c := redislock.New(b.rdb, quiet, redislock.WithObserver(rec), redislock.WithTTL(2*time.Second),
			redislock.WithExtendInterval(10*time.Millisecond))
		cp := campaign(t, c, "leader", "e")
		first := cp.nextTerm(t, 10*time.Second)
		require.NoError(t, b.rdb.Del(context.Background(), "lock:{e}").Err())
		waitDone(t, first.ctx, 10*time.Second)
		// The term's end is reported before its context is cancelled, so
		// before lead returns and Elect campaigns again.
		rec.mu.Lock()
		leaders := slices.Clone(rec.leaders)
		rec.mu.Unlock()
		require.GreaterOrEqual(t, len(leaders), 2, "%v", leaders)
		require.Equal(t, []string{"e+", "e-"}, leaders[:2])
		cp.nextTerm(t, 10*time.Second)
		rec.requireState(t, "held:lock=1 leading:e=1")
		cp.cancel(nil)
		rec.requireState(t, "")
	})
}
