package redislock_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/internal/redistest"
)

func TestRunWithLock(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		c := redislock.New(b.rdb, quiet, redislock.WithFencing())
		gone := func(t *testing.T) {
			t.Helper()
			require.Zero(t, b.rdb.Exists(ctx, "lock:{job}").Val(), "the lock was released")
		}

		t.Run("runs fn with the fence and releases", func(t *testing.T) {
			var fence int64
			err := c.RunWithLock(ctx, "job", func(ctx context.Context) error {
				var ok bool
				fence, ok = redislock.FenceFromContext(ctx)
				require.True(t, ok)
				require.Equal(t, 1, int(b.rdb.Exists(ctx, "lock:{job}").Val()), "held while fn runs")
				return nil
			})
			require.NoError(t, err)
			require.Positive(t, fence)
			gone(t)
		})
		t.Run("returns fn's error and releases", func(t *testing.T) {
			boom := errors.New("boom")
			err := c.RunWithLock(ctx, "job", func(context.Context) error { return boom })
			require.ErrorIs(t, err, boom)
			require.NotErrorIs(t, err, redislock.ErrLockLost)
			gone(t)
		})
		t.Run("releases when fn panics, then re-panics", func(t *testing.T) {
			require.PanicsWithValue(t, "kaboom", func() {
				_ = c.RunWithLock(ctx, "job", func(context.Context) error { panic("kaboom") })
			})
			gone(t)
		})
		t.Run("releases when the caller's context was cancelled", func(t *testing.T) {
			callerCtx, cancel := context.WithCancel(ctx)
			err := c.RunWithLock(callerCtx, "job", func(ctx context.Context) error {
				cancel() // the request went away mid-work
				<-ctx.Done()
				return ctx.Err()
			})
			require.ErrorIs(t, err, context.Canceled)
			gone(t)
		})
		t.Run("skips fn when the lock is held", func(t *testing.T) {
			holder, err := c.Acquire(ctx, "job")
			require.NoError(t, err)
			ran := false
			err = c.RunWithLock(ctx, "job", func(context.Context) error { ran = true; return nil })
			require.ErrorIs(t, err, redislock.ErrNotAcquired)
			require.False(t, ran)
			require.NoError(t, holder.Release(ctx))
		})
		t.Run("cancels fn's context when the lock is lost, and says so", func(t *testing.T) {
			boom := errors.New("stopped")
			err := c.RunWithLock(ctx, "job", func(ctx context.Context) error {
				require.NoError(t, b.rdb.Set(ctx, "lock:{job}", "thief", time.Minute).Err())
				<-ctx.Done()
				requireLost(t, ctx, redislock.Taken)
				return boom
			}, redislock.WithExtendInterval(10*time.Millisecond))
			require.ErrorIs(t, err, boom)
			require.ErrorIs(t, err, redislock.ErrLockLost)
			require.NotContains(t, err.Error(), "\n", "the loss and fn's error are one line, as every error of the package")
			require.Contains(t, err.Error(), "; stopped")
			var lost *redislock.LostError
			require.ErrorAs(t, err, &lost)
			require.Equal(t, redislock.Taken, lost.Reason)
			require.Equal(t, "thief", b.rdb.Get(ctx, "lock:{job}").Val(), "the thief's lock was not released")
			require.NoError(t, b.rdb.Del(ctx, "lock:{job}").Err())
		})
		t.Run("reports a lease that ran out unnoticed as lost", func(t *testing.T) {
			err := c.RunWithLock(ctx, "job", func(ctx context.Context) error {
				b.expireNow(t, "lock:{job}")
				return nil
			}, redislock.WithWatchdog(false))
			require.ErrorIs(t, err, redislock.ErrLockLost)
			var lost *redislock.LostError
			require.ErrorAs(t, err, &lost)
			require.Equal(t, redislock.Expired, lost.Reason)
		})
	})
}

// deadAddr returns a loopback address where nothing listens.
func deadAddr(t *testing.T) string {
	t.Helper()
	return deadAddrs(t, 1)[0]
}

// deadAddrs returns n distinct loopback addresses that refuse connections
// (see refusingAddr): each port stays taken until the test ends, so that
// no server another test starts meanwhile can be handed it.
func deadAddrs(t *testing.T, n int) []string {
	t.Helper()
	var addrs []string
	for len(addrs) < n {
		if addr := refusingAddr(t); !slices.Contains(addrs, addr) {
			addrs = append(addrs, addr)
		}
	}
	return addrs
}

// refusingAddr returns a loopback address that refuses connections: a
// socket bound to a free port and never listening, closed when t ends.
// (The suite runs on Linux.) A closed listener's port would be free for the kernel to hand out again,
// and a test's redis-server, started in parallel, could get it: the
// "dead" address would then answer (TestFailOpenAndFailClosed saw a real
// lock so under load). A bound port is not handed out.
func refusingAddr(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	require.NoError(t, err)
	t.Cleanup(func() { _ = syscall.Close(fd) })
	require.NoError(t, syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}))
	sa, err := syscall.Getsockname(fd)
	require.NoError(t, err)
	return "127.0.0.1:" + strconv.Itoa(sa.(*syscall.SockaddrInet4).Port)
}

func TestFailOpenAndFailClosed(t *testing.T) {
	t.Parallel()
	down := redis.NewClient(&redis.Options{Addr: deadAddr(t), MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { _ = down.Close() })
	ctx := context.Background()

	t.Run("fail closed (default) does not run fn", func(t *testing.T) {
		ran := false
		err := redislock.New(down, quiet).RunWithLock(ctx, "job", func(context.Context) error { ran = true; return nil })
		require.Error(t, err)
		require.NotErrorIs(t, err, redislock.ErrNotAcquired, "unreachable is not 'held by someone else'")
		require.False(t, ran)
	})
	t.Run("fail open runs fn without a lock, with a warning and an event", func(t *testing.T) {
		logs := &logRecorder{}
		obs := &recordingObserver{}
		c := redislock.New(down, redislock.WithLogger(slog.New(logs)), redislock.WithObserver(obs), redislock.WithFencing())
		ran := false
		err := c.RunWithLock(ctx, "job", func(ctx context.Context) error {
			ran = true
			_, ok := redislock.FenceFromContext(ctx)
			require.False(t, ok, "no fence without a lock")
			select { // its Done channel can be waited on (asking for it panicked)
			case <-ctx.Done():
				t.Error("fn's context is done")
			default:
			}
			return nil
		}, redislock.WithFailOpen())
		require.NoError(t, err)
		require.True(t, ran)
		_, ok := logs.find(slog.LevelWarn, "WITHOUT the lock")
		require.True(t, ok, "%v", logs.lines())
		require.Contains(t, obs.events, "fail-open job")
	})
	t.Run("fail open does not run fn when someone else holds the lock", func(t *testing.T) {
		up := newMini(t)
		c := redislock.New(up, quiet, redislock.WithFailOpen())
		holder, err := c.Acquire(ctx, "job")
		require.NoError(t, err)
		ran := false
		err = c.RunWithLock(ctx, "job", func(context.Context) error { ran = true; return nil })
		require.ErrorIs(t, err, redislock.ErrNotAcquired)
		require.False(t, ran)
		require.NoError(t, holder.Release(ctx))
	})
	t.Run("fail open runs fn when a real server is killed", func(t *testing.T) {
		server := redistest.Start(t)
		rdb := redis.NewClient(&redis.Options{Addr: server.Addr(), MaxRetries: -1})
		t.Cleanup(func() { _ = rdb.Close() })
		server.Kill()
		ran := false
		err := redislock.New(rdb, quiet).RunWithLock(ctx, "job", func(context.Context) error { ran = true; return nil }, redislock.WithFailOpen())
		require.NoError(t, err)
		require.True(t, ran)
	})
}

func TestAcquireRejectsFailOpen(t *testing.T) {
	_, err := redislock.New(newMini(t), quiet).Acquire(context.Background(), "job", redislock.WithFailOpen())
	require.ErrorIs(t, err, redislock.ErrInvalidArgument)

	// As a client default it only concerns RunWithLock.
	l, err := redislock.New(newMini(t), quiet, redislock.WithFailOpen()).Acquire(context.Background(), "job")
	require.NoError(t, err)
	require.NoError(t, l.Release(context.Background()))
}
