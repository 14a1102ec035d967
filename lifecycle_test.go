package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/redislock/redislock"
)

// The methods of a nil *Lock (what a failed Acquire returns), and of a
// zero Lock (one in a struct, never acquired), report ErrNotHeld; none
// panics.
func TestNilLockMethodsReportNotHeld(t *testing.T) {
	var zero struct {
		n int
		l redislock.Lock
	}
	for _, l := range []*redislock.Lock{nil, &zero.l} {
		nilLockMethods(t, l)
	}
}

func nilLockMethods(t *testing.T, l *redislock.Lock) {
	ctx := context.Background()
	require.ErrorIs(t, l.Release(ctx), redislock.ErrNotHeld)
	require.ErrorIs(t, l.Extend(ctx, time.Second), redislock.ErrNotHeld)
	_, err := l.TTL(ctx)
	require.ErrorIs(t, err, redislock.ErrNotHeld)
	require.Zero(t, l.Fence())
	require.False(t, l.Valid())
	require.Empty(t, l.Name())
	require.Error(t, l.Context().Err(), "a nil Lock's context is already cancelled")
	require.ErrorIs(t, context.Cause(l.Context()), redislock.ErrNotHeld)
}

// Valid is true while held, false once released, and false at once when
// the safe deadline has passed, before any timer fires.
func TestValidReadsTheSafeDeadlineAtTheCall(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		c := redislock.New(b.rdb, quiet)
		l, err := c.Acquire(ctx, "valid")
		require.NoError(t, err)
		require.True(t, l.Valid())
		require.NoError(t, l.Release(ctx))
		require.False(t, l.Valid())

		// Watchdog off, a 1s lease: past its safe deadline Valid says so,
		// whatever the lock's context says yet. (Shorter, a loaded
		// machine's stall could end the lease before the first check.)
		l, err = c.Acquire(ctx, "valid", redislock.WithTTL(time.Second), redislock.WithWatchdog(false))
		require.NoError(t, err)
		require.True(t, l.Valid())
		eventually(t, 5*time.Second, func() bool { return !l.Valid() }, "Valid still true past the lease")
		_ = l.Release(ctx)
	})
}

// fn reaches its Lock through its context.
func TestLockFromContext(t *testing.T) {
	c := redislock.New(newMini(t), quiet)
	ctx := context.Background()
	_, ok := redislock.LockFromContext(ctx)
	require.False(t, ok)
	err := c.RunWithLock(ctx, "from-ctx", func(ctx context.Context) error {
		l, ok := redislock.LockFromContext(ctx)
		require.True(t, ok)
		require.Equal(t, "from-ctx", l.Name())
		require.True(t, l.Valid())
		ttl, err := l.TTL(ctx)
		require.NoError(t, err)
		require.Positive(t, ttl)
		return l.Extend(ctx, time.Minute)
	})
	require.NoError(t, err)

	l, err := c.Acquire(ctx, "own")
	require.NoError(t, err)
	got, ok := redislock.LockFromContext(l.Context())
	require.True(t, ok)
	require.Same(t, l, got)
	require.NoError(t, l.Release(ctx))
}

// A lease the user chose to let run out (watchdog off) is logged at Info;
// a loss the user did not plan stays at Error.
func TestAChosenExpiryIsInfoAndAnUnplannedLossIsError(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		logs := &logRecorder{}
		c := redislock.New(b.rdb, redislock.WithLogger(slog.New(logs)))
		// A 1s lease: a 20ms one could see its reply come after its safe
		// deadline on a loaded machine, and not be taken at all.
		l, err := c.Acquire(ctx, "chosen", redislock.WithTTL(time.Second), redislock.WithWatchdog(false))
		require.NoError(t, err)
		waitDone(t, l.Context(), 5*time.Second)
		_, info := logs.find(slog.LevelInfo, "lock lost")
		require.True(t, info, "%v", logs.lines())
		_, isErr := logs.find(slog.LevelError, "lock lost")
		require.False(t, isErr, "%v", logs.lines())

		l, err = c.Acquire(ctx, "taken")
		require.NoError(t, err)
		require.NoError(t, b.rdb.Set(ctx, l.Key(), "someone else", 0).Err())
		require.ErrorIs(t, l.Extend(ctx, time.Minute), redislock.ErrNotHeld)
		_, isErr = logs.find(slog.LevelError, "lock lost")
		require.True(t, isErr, "%v", logs.lines())
	})
}

// Close releases every held lock at once (another instance takes it
// without waiting for the TTL), cancels the locks' contexts with
// ErrClosed, turns away new and waiting callers with ErrClosed, and leaves
// nothing running (goleak in TestMain checks the last part).
func TestCloseReleasesEverythingAndTurnsCallersAway(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		before := goleak.IgnoreCurrent()
		c := redislock.New(b.rdb, quiet)
		var locks []*redislock.Lock
		for _, name := range []string{"a", "b", "c"} {
			l, err := c.Acquire(ctx, name)
			require.NoError(t, err)
			locks = append(locks, l)
		}
		unwatched, err := c.Acquire(ctx, "d", redislock.WithWatchdog(false))
		require.NoError(t, err)
		locks = append(locks, unwatched)

		// A RunWithLock in progress, and a waiter in line behind it.
		running := make(chan struct{})
		var fnCause error
		var wg sync.WaitGroup
		var runErr, waitErr error
		wg.Go(func() {
			runErr = c.RunWithLock(ctx, "run", func(ctx context.Context) error {
				close(running)
				<-ctx.Done()
				fnCause = context.Cause(ctx)
				return ctx.Err()
			})
		})
		<-running
		waiting := make(chan struct{})
		wg.Go(func() {
			close(waiting)
			_, waitErr = c.Acquire(ctx, "run", redislock.WithRetry(redislock.LinearBackoff(10*time.Millisecond)))
		})
		<-waiting

		require.NoError(t, c.Close(ctx))
		wg.Wait()
		// Nothing of the Client runs any more: its watchdog, alarms,
		// janitor and pub/sub reader are gone.
		goleak.VerifyNone(t, before, // but miniredis's side of the pooled connections
			goleak.IgnoreAnyFunction("github.com/alicebob/miniredis/v2/server.(*Server).servePeer"),
			goleak.IgnoreAnyFunction("github.com/alicebob/miniredis/v2/server.(*Server).servePeer.func2"))
		require.ErrorIs(t, fnCause, redislock.ErrClosed)
		require.Error(t, runErr)
		require.ErrorIs(t, waitErr, redislock.ErrClosed)
		for _, l := range locks {
			require.ErrorIs(t, context.Cause(l.Context()), redislock.ErrClosed, l.Name())
			require.Zero(t, b.rdb.Exists(ctx, l.Key()).Val(), "%s released", l.Name())
			require.ErrorIs(t, l.Release(ctx), redislock.ErrNotHeld)
		}
		require.Zero(t, b.rdb.Exists(ctx, "lock:{run}").Val())

		_, err = c.Acquire(ctx, "a")
		require.ErrorIs(t, err, redislock.ErrClosed)
		err = c.RunWithLock(ctx, "a", func(context.Context) error { return nil })
		require.ErrorIs(t, err, redislock.ErrClosed)
		require.NoError(t, c.Close(ctx), "a second Close")

		// The next instance takes over at once.
		next, err := redislock.New(b.rdb, quiet).Acquire(ctx, "a")
		require.NoError(t, err)
		require.NoError(t, next.Release(ctx))
	})
}

// A Close that cannot reach Redis still ends every hold, and says how many locks it could not release.
func TestCloseReportsTheLocksItCouldNotRelease(t *testing.T) {
	mini := newMiniServer(t)
	c := redislock.New(newRedisClient(t, mini.Addr()), quiet)
	l, err := c.Acquire(context.Background(), "stuck")
	require.NoError(t, err)
	mini.SetError("LOADING Redis is loading the dataset in memory")
	err = c.Close(context.Background())
	require.Error(t, err)
	require.Contains(t, err.Error(), "1 of 1 locks not released")
	require.False(t, errors.Is(err, redislock.ErrClosed))
	require.ErrorIs(t, context.Cause(l.Context()), redislock.ErrClosed)
}

// A NewQuorum Client's first use, concurrent and with per-call options,
// is free of data races (the race detector checks it under -race): both
// constructors build the Client completely before it is shared.
func TestAQuorumClientsFirstConcurrentUseIsRaceFree(t *testing.T) {
	clients := []redis.UniversalClient{newMini(t), newMini(t), newMini(t)}
	q, err := redislock.NewQuorum(clients, quiet)
	require.NoError(t, err)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			var opts []redislock.Option // half with options of their own, half with the defaults
			if i%2 == 0 {
				opts = append(opts, redislock.WithTTL(time.Minute))
			}
			l, err := q.Acquire(context.Background(), fmt.Sprintf("q%d", i), opts...)
			if err == nil {
				err = l.Release(context.Background())
			}
			require.NoError(t, err)
		})
	}
	wg.Wait()
}

// Close gives back the one lock of a Client (a leader's shutdown) with one
// command on a pooled connection, not a pipeline: go-redis keeps pipelines
// on connections of their own, which it may have to dial first, and the
// next leader waits for that release.
func TestCloseGivesBackALoneLockWithoutAPipeline(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		log := &commandLog{}
		b.rdb.AddHook(log)
		c := redislock.New(b.rdb, quiet)
		warm, err := c.Acquire(ctx, "warm-up") // the release script is cached from here on
		require.NoError(t, err)
		require.NoError(t, warm.Release(ctx))
		leader, err := c.Acquire(ctx, "leader")
		require.NoError(t, err)
		log.take()
		log.resetTrips()
		require.NoError(t, c.Close(ctx))
		require.Equal(t, []string{"evalsha"}, log.take(), "the release, sent as one command")
		require.Zero(t, b.rdb.Exists(ctx, "lock:{leader}").Val(), "released")
		runtime.KeepAlive(leader) // held until Close: a dropped Lock is released by itself
	})
}
