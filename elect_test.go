package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/internal/faultproxy"
	"github.com/redislock/redislock/internal/lockrules"
)

// term is one call of a campaigner's lead function.
type term struct {
	fence  int64
	token  string
	ctx    context.Context
	finish chan error // lead returns what is sent here
}

// campaigner runs Elect on a goroutine of its own and reports each term.
type campaigner struct {
	name   string
	client *redislock.Client
	terms  chan term
	done   chan error // Elect's result
	cancel context.CancelCauseFunc
}

// campaign starts Elect for lock name on c; the test's cleanup stops it.
func campaign(t testing.TB, c *redislock.Client, who, name string, opts ...redislock.Option) *campaigner {
	t.Helper()
	ctx, cancel := context.WithCancelCause(context.Background())
	cp := &campaigner{name: who, client: c, terms: make(chan term, 16), done: make(chan error, 1), cancel: cancel}
	go func() {
		cp.done <- c.Elect(ctx, name, func(ctx context.Context) error {
			l, _ := redislock.LockFromContext(ctx)
			fence, _ := redislock.FenceFromContext(ctx)
			tm := term{fence: fence, token: l.Token(), ctx: ctx, finish: make(chan error, 1)}
			cp.terms <- tm
			select {
			case err := <-tm.finish:
				return err
			case <-ctx.Done():
				return ctx.Err()
			}
		}, opts...)
	}()
	t.Cleanup(func() {
		cancel(nil)
		select {
		case <-cp.done:
		case <-time.After(10 * time.Second):
			t.Errorf("%s: Elect did not return after its ctx ended", who)
		}
	})
	return cp
}

// nextTerm waits for the campaigner's next term.
func (cp *campaigner) nextTerm(t testing.TB, within time.Duration) term {
	t.Helper()
	select {
	case tm := <-cp.terms:
		return tm
	case err := <-cp.done:
		t.Fatalf("%s: Elect returned %v instead of leading", cp.name, err)
	case <-time.After(within):
		t.Fatalf("%s: not leader within %v", cp.name, within)
	}
	return term{}
}

// result waits for Elect's result.
func (cp *campaigner) result(t testing.TB) error {
	t.Helper()
	select {
	case err := <-cp.done:
		cp.done <- err // the cleanup reads it again
		return err
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: Elect did not return", cp.name)
		return nil
	}
}

// anyTerm waits for the next term of any of the campaigners.
func anyTerm(t testing.TB, within time.Duration, cps ...*campaigner) (*campaigner, term) {
	t.Helper()
	deadline := time.After(within)
	for {
		for _, cp := range cps {
			select {
			case tm := <-cp.terms:
				return cp, tm
			case err := <-cp.done:
				t.Fatalf("%s: Elect returned %v", cp.name, err)
			default:
			}
		}
		select {
		case <-deadline:
			t.Fatalf("no leader within %v", within)
		case <-time.After(time.Millisecond): // polling interval, not a synchronisation
		}
	}
}

func TestElect(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b *backend) {
		// Each case has a lock of its own: one that fails leaves nothing
		// behind for the next.
		var name, key string
		cases := 0
		fresh := func() {
			cases++
			name = fmt.Sprintf("scheduler-%d", cases)
			key = redislock.DefaultKeyPrefix + "{" + name + "}"
		}
		ctx := context.Background()
		opts := []redislock.Option{quiet, redislock.WithTTL(2 * time.Second), redislock.WithFencing()}

		t.Run("each leader in turn, one at a time, each term fenced above the last", func(t *testing.T) {
			fresh()
			var cps []*campaigner
			for i := range 3 {
				cps = append(cps, campaign(t, redislock.New(b.rdb, opts...), fmt.Sprintf("c%d", i), name))
			}
			var lastFence int64
			var last *campaigner
			for range 3 {
				leader, tm := anyTerm(t, 10*time.Second, cps...)
				require.NotSame(t, last, leader, "the same campaigner led twice in a row")
				require.Greater(t, tm.fence, lastFence, "a term's fence must be above the last")
				require.Equal(t, tm.token, b.rdb.Get(ctx, key).Val(), "the leader holds the key")
				for _, cp := range cps {
					require.Empty(t, cp.terms, "%s leads at the same time as %s", cp.name, leader.name)
				}
				tm.finish <- nil // lead returns on its own: leadership is given up
				require.NoError(t, leader.result(t), "lead's nil result")
				require.Error(t, tm.ctx.Err(), "lead's ctx ends with its term")
				last, lastFence = leader, tm.fence
				cps = slices.DeleteFunc(cps, func(cp *campaigner) bool { return cp == leader })
			}
			require.Zero(t, b.rdb.Exists(ctx, key).Val(), "the last leader released the key")
		})

		t.Run("a leader whose lead fails gives up and returns the error", func(t *testing.T) {
			fresh()
			cp := campaign(t, redislock.New(b.rdb, opts...), "c", name)
			tm := cp.nextTerm(t, 10*time.Second)
			failure := errors.New("lead failed")
			tm.finish <- failure
			require.ErrorIs(t, cp.result(t), failure)
			require.Zero(t, b.rdb.Exists(ctx, key).Val(), "released")
		})

		t.Run("a lost term cancels lead with the LostError and the campaign goes on", func(t *testing.T) {
			fresh()
			cp := campaign(t, redislock.New(b.rdb, opts...), "c", name)
			first := cp.nextTerm(t, 10*time.Second)
			// Another holder takes the key: the next extension finds it.
			require.NoError(t, b.rdb.Set(ctx, key, "someone else", 0).Err())
			waitDone(t, first.ctx, 5*time.Second)
			var lost *redislock.LostError
			require.ErrorAs(t, context.Cause(first.ctx), &lost)
			// Taken, or Unreachable if the machine was too loaded for the
			// extension to come back before the safe deadline.
			require.Contains(t, []redislock.LostReason{redislock.Taken, redislock.Unreachable}, lost.Reason)
			// That holder's key goes without a release announced.
			require.NoError(t, b.rdb.Del(ctx, key).Err())
			second := cp.nextTerm(t, 10*time.Second)
			require.Greater(t, second.fence, first.fence)
			require.Equal(t, second.token, b.rdb.Get(ctx, key).Val())
		})

		t.Run("a leader that dies without a release is replaced", func(t *testing.T) {
			fresh()
			dead, err := redislock.New(b.rdb, quiet, redislock.WithWatchdog(false), redislock.WithTTL(time.Minute),
				redislock.WithFencing()).Acquire(ctx, name)
			require.NoError(t, err)
			cp := campaign(t, redislock.New(b.rdb, opts...), "c", name)
			select {
			case tm := <-cp.terms:
				t.Fatalf("led (fence %d) while the key was held", tm.fence)
			case <-time.After(100 * time.Millisecond): // gives it the chance to be wrong
			}
			b.expireNow(t, key) // the lease runs out: no release, no announcement
			tm := cp.nextTerm(t, 10*time.Second)
			require.Greater(t, tm.fence, dead.Fence())
		})

		t.Run("ctx ending while campaigning returns ctx's error and leaves the queue", func(t *testing.T) {
			fresh()
			holder, err := redislock.New(b.rdb, quiet).Acquire(ctx, name)
			require.NoError(t, err)
			defer func() { _ = holder.Release(ctx) }()
			cp := campaign(t, redislock.New(b.rdb, opts...), "c", name)
			eventually(t, 5*time.Second, func() bool { return b.rdb.ZCard(ctx, queueKey(name)).Val() == 1 }, "never queued")
			stop := errors.New("shutting down")
			cp.cancel(stop)
			err = cp.result(t)
			require.ErrorIs(t, err, context.Canceled)
			require.ErrorIs(t, err, stop, "ctx's cause")
			require.False(t, errors.Is(err, redislock.ErrNotAcquired), "Elect says why it stopped, not that a lock was not acquired")
			eventually(t, 5*time.Second, func() bool { return b.rdb.ZCard(ctx, queueKey(name)).Val() == 0 }, "the place in the queue was not given back")
		})

		t.Run("ctx ending while leading cancels lead, releases, and returns ctx's error", func(t *testing.T) {
			fresh()
			cp := campaign(t, redislock.New(b.rdb, opts...), "c", name)
			tm := cp.nextTerm(t, 10*time.Second)
			cp.cancel(nil)
			err := cp.result(t)
			require.ErrorIs(t, err, context.Canceled)
			require.Error(t, tm.ctx.Err())
			require.Zero(t, b.rdb.Exists(ctx, key).Val(), "released")
		})

		t.Run("Client.Close hands leadership over and Elect returns ErrClosed", func(t *testing.T) {
			fresh()
			first := redislock.New(b.rdb, opts...)
			leader := campaign(t, first, "leader", name)
			tm := leader.nextTerm(t, 10*time.Second)
			next := campaign(t, redislock.New(b.rdb, opts...), "next", name)
			eventually(t, 5*time.Second, func() bool { return b.rdb.ZCard(ctx, queueKey(name)).Val() == 1 }, "never queued")
			require.NoError(t, first.Close(ctx))
			require.ErrorIs(t, leader.result(t), redislock.ErrClosed)
			require.ErrorIs(t, context.Cause(tm.ctx), redislock.ErrClosed)
			nextTerm := next.nextTerm(t, 10*time.Second)
			require.Greater(t, nextTerm.fence, tm.fence)
		})
	})
}

// queueKey is the key of the server's queue of waiters for lock name.
func queueKey(name string) string {
	return lockrules.Queue(redislock.DefaultKeyPrefix + "{" + name + "}")
}

func TestElectBadInputIsAClearErrorWithoutARoundTrip(t *testing.T) {
	mini := miniredis.RunT(t)
	rdb := newRedisClient(t, mini.Addr())
	ctx := context.Background()
	lead := func(context.Context) error { return nil }
	c := redislock.New(rdb, quiet)
	cases := []struct {
		name string
		call func() error
		want string
	}{
		//lint:ignore SA1012 the point of the test
		{"nil context", func() error { return c.Elect(nil, "a", lead) }, "nil context"}, //nolint:staticcheck
		{"nil lead", func() error { return c.Elect(ctx, "a", nil) }, "nil lead"},
		{"empty name", func() error { return c.Elect(ctx, "", lead) }, "empty lock name"},
		{"bad TTL", func() error { return c.Elect(ctx, "a", lead, redislock.WithTTL(time.Microsecond)) }, "below the 10ms minimum"},
		{"nil option", func() error { return c.Elect(ctx, "a", lead, nil) }, "nil Option"},
		{"a retry strategy", func() error {
			return c.Elect(ctx, "a", lead, redislock.WithRetry(redislock.LinearBackoff(time.Second)))
		}, "WithRetry does not apply to Elect"},
		{"fail open", func() error { return c.Elect(ctx, "a", lead, redislock.WithFailOpen()) }, "WithFailOpen does not apply to Elect"},
		{"the watchdog off", func() error { return c.Elect(ctx, "a", lead, redislock.WithWatchdog(false)) }, "Elect needs the watchdog"},
		{"the watchdog off by default", func() error {
			return redislock.New(rdb, redislock.WithWatchdog(false)).Elect(ctx, "a", lead)
		}, "Elect needs the watchdog"},
		{"nil client", func() error { return redislock.New(nil).Elect(ctx, "a", lead) }, "nil redis client"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := mini.CommandCount()
			err := tc.call()
			require.ErrorIs(t, err, redislock.ErrInvalidArgument)
			require.ErrorContains(t, err, tc.want)
			require.Equal(t, before, mini.CommandCount(), "nothing was sent")
		})
	}
	t.Run("a Client's default retry strategy is no error", func(t *testing.T) {
		c := redislock.New(rdb, quiet, redislock.WithRetry(redislock.LinearBackoff(time.Second)))
		require.NoError(t, c.Elect(ctx, "a", lead))
	})
}

func TestElectLeavesNoGoroutineOnceCtxEnds(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		require.NoError(t, b.rdb.Ping(ctx).Err())
		ignore := goleak.IgnoreCurrent()
		holder, err := redislock.New(b.rdb, quiet).Acquire(ctx, "job")
		require.NoError(t, err)
		var cps []*campaigner
		for i := range 2 {
			cps = append(cps, campaign(t, redislock.New(b.rdb, quiet, redislock.WithTTL(time.Second)), fmt.Sprint(i), "job"))
			eventually(t, 5*time.Second, func() bool { return b.rdb.ZCard(ctx, queueKey("job")).Val() == int64(i+1) }, "never queued")
		}
		// The first in line leads (extended by the watchdog), the other
		// waits in the queue (subscribed to releases).
		require.NoError(t, holder.Release(ctx))
		cps[0].nextTerm(t, 10*time.Second)
		for _, cp := range cps {
			cp.cancel(nil)
			require.ErrorIs(t, cp.result(t), context.Canceled)
		}
		goleak.VerifyNone(t, ignore,
			// miniredis's side of the connections the go-redis pool keeps
			goleak.IgnoreAnyFunction("github.com/alicebob/miniredis/v2/server.(*Server).servePeer"),
			goleak.IgnoreAnyFunction("github.com/alicebob/miniredis/v2/server.(*Server).servePeer.func2"))
	})
}

// testElectOn runs an election on one deployment (Sentinel, Cluster), each
// campaigner on a go-redis client of its own, as separate processes would
// be: leadership passes on at a release (through the queue and the
// release announcement, sharded on a cluster) and when a leader's lease
// runs out without one.
func testElectOn(t *testing.T, dial func(t *testing.T) redis.UniversalClient, name string) {
	ctx := context.Background()
	opts := []redislock.Option{quiet, redislock.WithTTL(2 * time.Second), redislock.WithFencing()}
	rdb := dial(t)
	first := campaign(t, redislock.New(dial(t), opts...), "first", name)
	firstTerm := first.nextTerm(t, 10*time.Second)
	second := campaign(t, redislock.New(dial(t), opts...), "second", name)
	eventually(t, 10*time.Second, func() bool { return rdb.ZCard(ctx, queueKey(name)).Val() == 1 }, "never queued")
	firstTerm.finish <- nil
	require.NoError(t, first.result(t))
	secondTerm := second.nextTerm(t, 10*time.Second)
	require.Greater(t, secondTerm.fence, firstTerm.fence)
	require.Equal(t, secondTerm.token, rdb.Get(ctx, redislock.DefaultKeyPrefix+"{"+name+"}").Val())
	secondTerm.finish <- nil
	require.NoError(t, second.result(t))

	// A leader that dies: its lease runs out, nothing is announced.
	dead, err := redislock.New(dial(t), quiet, redislock.WithWatchdog(false), redislock.WithTTL(300*time.Millisecond),
		redislock.WithFencing()).Acquire(ctx, name)
	require.NoError(t, err)
	third := campaign(t, redislock.New(dial(t), opts...), "third", name)
	thirdTerm := third.nextTerm(t, 10*time.Second)
	require.Greater(t, thirdTerm.fence, dead.Fence())
	third.cancel(nil)
	require.ErrorIs(t, third.result(t), context.Canceled)
}

func TestElectCampaignsOnThroughARedisOutage(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b *backend) {
		const name = "outage"
		key := redislock.DefaultKeyPrefix + "{" + name + "}"
		proxy, err := faultproxy.New(b.rdb.Options().Addr)
		require.NoError(t, err)
		t.Cleanup(func() { _ = proxy.Close() })
		rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
		t.Cleanup(func() { _ = rdb.Close() })
		logs := &logRecorder{}
		cp := campaign(t, redislock.New(rdb, redislock.WithLogger(slog.New(logs)), redislock.WithTTL(300*time.Millisecond),
			redislock.WithFencing()), "c", name)
		first := cp.nextTerm(t, 10*time.Second)

		// Redis goes away: the term is lost at its safe deadline, and the
		// campaign goes on, failing, instead of returning.
		proxy.SetMode(faultproxy.Refuse)
		proxy.ResetAll()
		waitDone(t, first.ctx, 10*time.Second)
		var lost *redislock.LostError
		require.ErrorAs(t, context.Cause(first.ctx), &lost)
		require.Equal(t, redislock.Unreachable, lost.Reason)
		eventually(t, 10*time.Second, func() bool {
			_, ok := logs.find(slog.LevelWarn, "redis failing while waiting, trying again")
			return ok
		}, "no Warn for a failed campaign attempt")
		select {
		case err := <-cp.done:
			t.Fatalf("Elect returned during the outage: %v", err)
		default:
		}

		// Redis comes back; the lost term's key runs out; it leads again.
		proxy.SetMode(faultproxy.Pass)
		// (Not b.expireNow: the campaign may take the name again before
		// anyone sees the key gone.)
		require.NoError(t, b.rdb.PExpire(context.Background(), key, time.Millisecond).Err())
		if b.mini != nil {
			b.mini.FastForward(time.Millisecond)
		}
		second := cp.nextTerm(t, 10*time.Second)
		require.Greater(t, second.fence, first.fence)
	})
}

func TestElectEndsWithErrClosedWhenTheClientClosesWhileItCampaigns(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		holder, err := redislock.New(b.rdb, quiet).Acquire(ctx, "closing")
		require.NoError(t, err)
		defer func() { _ = holder.Release(ctx) }()
		c := redislock.New(b.rdb, quiet)
		cp := campaign(t, c, "c", "closing")
		eventually(t, 5*time.Second, func() bool { return b.rdb.ZCard(ctx, queueKey("closing")).Val() == 1 }, "never queued")
		require.NoError(t, c.Close(ctx))
		require.ErrorIs(t, cp.result(t), redislock.ErrClosed)
		require.ErrorIs(t, c.Elect(ctx, "closing", func(context.Context) error { return nil }), redislock.ErrClosed,
			"Elect on a closed Client")
	})
}

// WithMaxHold limits each term: at the limit, leadership goes to the next
// in line and the former leader campaigns again, at the back.
func TestElectWithMaxHoldRotatesLeadership(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		opts := []redislock.Option{quiet, redislock.WithMaxHold(100 * time.Millisecond), redislock.WithFencing()}
		ctx := context.Background()
		a := campaign(t, redislock.New(b.rdb, opts...), "a", "rotating")
		aTerm := a.nextTerm(t, 10*time.Second)
		bc := campaign(t, redislock.New(b.rdb, opts...), "b", "rotating")
		eventually(t, 5*time.Second, func() bool { return b.rdb.ZCard(ctx, queueKey("rotating")).Val() == 1 }, "never queued")
		bTerm := bc.nextTerm(t, 10*time.Second)
		var lost *redislock.LostError
		require.ErrorAs(t, context.Cause(aTerm.ctx), &lost)
		require.Equal(t, redislock.MaxHoldReached, lost.Reason)
		require.Greater(t, bTerm.fence, aTerm.fence)
		again := a.nextTerm(t, 10*time.Second)
		require.Greater(t, again.fence, bTerm.fence)
		require.Error(t, bTerm.ctx.Err(), "b's term ended before a's next")
	})
}

// On a quorum there is no queue and no release announcement: a campaigner
// asks again when a majority of the leader's keys would have expired.
func TestElectOnAQuorum(t *testing.T) {
	q := startQuorumServers(t, 3)
	const name = "quorum-leader"
	key := redislock.DefaultKeyPrefix + "{" + name + "}"
	opts := []redislock.Option{redislock.WithTTL(2 * time.Second)}
	first := campaign(t, newQuorum(t, q.clients(), opts...), "first", name)
	firstTerm := first.nextTerm(t, 10*time.Second)
	second := campaign(t, newQuorum(t, q.otherProcess(t), opts...), "second", name)
	firstTerm.finish <- nil
	require.NoError(t, first.result(t))
	secondTerm := second.nextTerm(t, 10*time.Second)
	require.GreaterOrEqual(t, len(q.holding(t, key, secondTerm.token, 0, 1, 2)), 2, "a majority holds the leader's token")
	secondTerm.finish <- nil
	require.NoError(t, second.result(t))

	// A leader that died: its keys run out, nothing is announced.
	q.setForeign(t, key, 300*time.Millisecond, 0, 1, 2)
	third := campaign(t, newQuorum(t, q.otherProcess(t), opts...), "third", name)
	thirdTerm := third.nextTerm(t, 10*time.Second)
	require.GreaterOrEqual(t, len(q.holding(t, key, thirdTerm.token, 0, 1, 2)), 2, "a majority holds the leader's token")
}
