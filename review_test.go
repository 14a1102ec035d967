package redislock_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/internal/redistest"
)

func TestExtendToAShorterLeaseReschedulesTheWatchdog(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		if b.mini != nil {
			b.mini.ClockTTL(true) // age keys with real time, like a server
		}
		ctx := context.Background()
		c := redislock.New(b.rdb, quiet, redislock.WithTTL(3*time.Second)) // next extension due in 1s
		l, err := c.Acquire(ctx, "job")
		require.NoError(t, err)
		require.NoError(t, l.Extend(ctx, 300*time.Millisecond))
		// Past the old schedule's first extension (1s), the 300ms lease must
		// have been renewed every 100ms all along.
		end := time.After(1500 * time.Millisecond) // the work itself
		for working := true; working; {
			select {
			case <-end:
				working = false
			case <-l.Context().Done():
				t.Fatalf("lost: %v", context.Cause(l.Context()))
			}
		}
		require.Equal(t, l.Token(), b.rdb.Get(ctx, l.Key()).Val())
		require.NoError(t, l.Release(ctx))
	})
}

// A Release while an extension is stuck on a frozen server does not wait
// for the extension: the hold ends at once, the release gets its own
// attempt (and, ctx having ended, one detached attempt bounded by
// ReleaseTimeout), and once the server is back the key is given back in
// the background.
func TestReleaseDoesNotWaitForAStuckExtension(t *testing.T) {
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

func TestAStrategyThatChangesItsMindDoesNotPanic(t *testing.T) {
	rdb := newMini(t)
	ctx := context.Background()
	holder, err := redislock.New(rdb, quiet).Acquire(ctx, "job")
	require.NoError(t, err)
	calls := 0
	flip := retryFunc(func(int) (time.Duration, bool) { // against the advice: it holds state
		calls++
		return time.Millisecond, calls > 1
	})
	require.NotPanics(t, func() {
		_, err = redislock.New(rdb, quiet).Acquire(ctx, "job", redislock.WithRetry(flip))
	})
	require.ErrorIs(t, err, redislock.ErrNotAcquired)
	require.NoError(t, holder.Release(ctx))
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
