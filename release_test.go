package redislock_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/internal/redistest"
)

// `defer lock.Release(reqCtx)` after the request timed out: the hold ends
// and the key is deleted all the same, on a detached attempt.
func TestReleaseWithADoneContextStillLetsGo(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		c := redislock.New(b.rdb, quiet)
		reqCtx, cancel := context.WithCancel(context.Background())
		l, err := c.Acquire(reqCtx, "request")
		require.NoError(t, err)
		cancel() // the request timed out

		require.NoError(t, l.Release(reqCtx), "Release with a done ctx makes one detached attempt")
		require.Zero(t, b.rdb.Exists(context.Background(), l.Key()).Val(), "the key is deleted")
		require.ErrorIs(t, context.Cause(l.Context()), redislock.ErrReleased)
		require.False(t, l.Valid())
		require.ErrorIs(t, l.Extend(context.Background(), time.Second), redislock.ErrNotHeld, "the hold is over: nothing extends it")

		// Another instance takes it at once.
		other, err := redislock.New(b.rdb, quiet).Acquire(context.Background(), "request")
		require.NoError(t, err)
		require.NoError(t, other.Release(context.Background()))
	})
}

// Two Release calls racing on one Lock: exactly one release script is
// sent, nothing is reported lost, one call returns the outcome and the
// other ErrNotHeld.
func TestConcurrentReleasesSendOneScriptAndReportNoLoss(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		hook := &commandLog{}
		rdb := newRedisClient(t, b.rdb.Options().Addr)
		rdb.AddHook(hook)
		logs := &logRecorder{}
		obs := &recordingObserver{}
		c := redislock.New(rdb, redislock.WithLogger(slog.New(logs)), redislock.WithObserver(obs))
		warm, err := c.Acquire(ctx, "twice") // loads the scripts
		require.NoError(t, err)
		require.NoError(t, warm.Release(ctx))
		obs.events = nil
		for trial := range 50 {
			l, err := c.Acquire(ctx, "twice")
			require.NoError(t, err)
			hook.take()

			var wg sync.WaitGroup
			start := make(chan struct{})
			errs := make([]error, 2)
			for i := range errs {
				wg.Go(func() {
					<-start
					errs[i] = l.Release(ctx)
				})
			}
			close(start)
			wg.Wait()

			require.Equal(t, 1, countScripts(hook.take()), "trial %d: release scripts sent", trial)
			nils, notHeld := 0, 0
			for _, err := range errs {
				switch {
				case err == nil:
					nils++
				case errors.Is(err, redislock.ErrNotHeld):
					notHeld++
				}
			}
			require.Equal(t, [2]int{1, 1}, [2]int{nils, notHeld}, "trial %d: %v", trial, errs)
		}
		_, lost := logs.find(slog.LevelError, "lock lost")
		require.False(t, lost, "no loss is logged: %v", logs.lines())
		for _, e := range obs.events {
			require.False(t, strings.HasPrefix(e, "lost "), "no loss is observed: %v", obs.events)
		}
	})
}

// A Release that cannot reach Redis still ends the hold: the watchdog
// stops, the context is cancelled, and a second Release sends nothing.
func TestFailedReleaseEndsTheHoldLocally(t *testing.T) {
	mini := newMiniServer(t)
	rdb := newRedisClient(t, mini.Addr())
	c := redislock.New(rdb, quiet)
	l, err := c.Acquire(context.Background(), "down")
	require.NoError(t, err)
	mini.SetError("LOADING Redis is loading the dataset in memory")
	require.Error(t, l.Release(context.Background()))
	require.ErrorIs(t, context.Cause(l.Context()), redislock.ErrReleased)
	require.False(t, l.Valid())
	mini.SetError("")
	// The Client gives the token back in the background.
	eventually(t, 5*time.Second, func() bool { return !mini.Exists(l.Key()) }, "the key was not given back")
}

// A Release while an extension is stuck on a frozen server does not wait
// for the extension: the hold ends at once, the release gets its own
// attempt (and, ctx having ended, one detached attempt bounded by
// ReleaseTimeout), and once the server is back the key is given back in
// the background.
func TestReleaseDoesNotWaitForAStuckExtension(t *testing.T) {
	t.Parallel()
	server := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: server.Addr(), ReadTimeout: 10 * time.Second, MaxRetries: -1, PoolSize: 4, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	admin := newRedisClient(t, server.Addr())
	ctx := context.Background()
	l, err := redislock.New(rdb, quiet, redislock.WithWatchdog(false), redislock.WithTTL(time.Minute)).Acquire(ctx, "job")
	require.NoError(t, err)

	sending := make(chan struct{}, 1)
	rdb.AddHook(extendSignal{sending})
	server.Pause(t)
	extended := make(chan error, 1)
	go func() { extended <- l.Extend(ctx, time.Minute) }() // stuck on the frozen server
	<-sending                                              // it holds the extension slot now

	releaseCtx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- l.Release(releaseCtx) }()
	eventually(t, 5*time.Second, func() bool { return context.Cause(l.Context()) == redislock.ErrReleased },
		"the hold did not end while the release was on its way")
	select {
	case err := <-done:
		require.Error(t, err, "the server is frozen")
	case <-time.After(redislock.ReleaseTimeout + 5*time.Second):
		t.Fatal("Release not bounded by ReleaseTimeout")
	}
	server.Resume(t)
	<-extended
	eventually(t, 10*time.Second, func() bool { return admin.Exists(ctx, l.Key()).Val() == 0 },
		"the key was not given back once the server was back")
}

// extendSignal reports when an extension command is about to be sent.
type extendSignal struct{ sending chan struct{} }

func (h extendSignal) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h extendSignal) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h extendSignal) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if args := cmd.Args(); len(args) > 1 && cmd.Name() == "evalsha" && args[1] == extendSHA {
			select {
			case h.sending <- struct{}{}:
			default:
			}
		}
		return next(ctx, cmd)
	}
}
