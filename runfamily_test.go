package redislock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redislock/redislock"
)

// The RunWithLock helpers of the lock family: each runs fn under its hold,
// with the Lock and fence in fn's context, gives the hold back whatever fn
// does, cancels fn's context when the hold is lost and says so.
func TestRunWithTheLockFamily(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		c := redislock.New(b.rdb, quiet, redislock.WithFencing())
		noKeys := func(t *testing.T, keys ...string) {
			t.Helper()
			require.Zero(t, b.rdb.Exists(ctx, keys...).Val(), "nothing is left held: %v", keys)
		}

		t.Run("shared: readers run together, a writer is kept out, the share is given back", func(t *testing.T) {
			var fences []int64
			err := c.RunWithSharedLock(ctx, "doc", func(ctx context.Context) error {
				f, ok := redislock.FenceFromContext(ctx)
				require.True(t, ok)
				fences = append(fences, f)
				_, ok = redislock.LockFromContext(ctx)
				require.True(t, ok)
				// A second reader (another Lock of this Client) gets in too.
				err := c.RunWithSharedLock(ctx, "doc", func(ctx context.Context) error {
					f, _ := redislock.FenceFromContext(ctx)
					fences = append(fences, f)
					_, err := c.Acquire(ctx, "doc")
					require.ErrorIs(t, err, redislock.ErrNotAcquired, "a writer waits for the readers")
					return nil
				})
				require.NoError(t, err)
				return nil
			})
			require.NoError(t, err)
			require.Len(t, fences, 2)
			require.Positive(t, fences[0])
			require.Equal(t, fences[0], fences[1], "readers of one epoch share its fence")
			noKeys(t, "lock:{doc}", "lock:{doc}:s")
			w, err := c.Acquire(ctx, "doc")
			require.NoError(t, err, "the writer gets in once the readers are gone")
			require.Greater(t, w.Fence(), fences[0])
			require.NoError(t, w.Release(ctx))
		})
		t.Run("shared: fn's error and panic still give the share back", func(t *testing.T) {
			boom := errors.New("boom")
			err := c.RunWithSharedLock(ctx, "doc", func(context.Context) error { return boom })
			require.ErrorIs(t, err, boom)
			require.NotErrorIs(t, err, redislock.ErrLockLost)
			noKeys(t, "lock:{doc}", "lock:{doc}:s")
			require.PanicsWithValue(t, "kaboom", func() {
				_ = c.RunWithSharedLock(ctx, "doc", func(context.Context) error { panic("kaboom") })
			})
			noKeys(t, "lock:{doc}", "lock:{doc}:s")
		})
		t.Run("shared: a lost share cancels fn's context and is reported", func(t *testing.T) {
			err := c.RunWithSharedLock(ctx, "doc", func(ctx context.Context) error {
				require.NoError(t, b.rdb.Del(ctx, "lock:{doc}", "lock:{doc}:s").Err())
				waitDone(t, ctx, 10*time.Second)
				return ctx.Err()
			}, redislock.WithExtendInterval(10*time.Millisecond))
			require.ErrorIs(t, err, redislock.ErrLockLost)
			var lost *redislock.LostError
			require.ErrorAs(t, err, &lost)
		})
		t.Run("shared: skipped while a writer holds the name", func(t *testing.T) {
			w, err := c.Acquire(ctx, "doc")
			require.NoError(t, err)
			ran := false
			err = c.RunWithSharedLock(ctx, "doc", func(context.Context) error { ran = true; return nil })
			require.ErrorIs(t, err, redislock.ErrNotAcquired)
			require.False(t, ran)
			require.NoError(t, w.Release(ctx))
		})

		t.Run("semaphore: at most limit inside, and the slots come back", func(t *testing.T) {
			inside := 0
			err := c.RunWithSemaphore(ctx, "pool", 2, func(ctx context.Context) error {
				inside++
				f, ok := redislock.FenceFromContext(ctx)
				require.True(t, ok)
				require.Positive(t, f)
				return c.RunWithSemaphore(ctx, "pool", 2, func(ctx context.Context) error {
					inside++
					ran := false
					err := c.RunWithSemaphore(ctx, "pool", 2, func(context.Context) error { ran = true; return nil })
					require.ErrorIs(t, err, redislock.ErrNotAcquired, "both slots are held")
					require.False(t, ran)
					err = c.RunWithSemaphore(ctx, "pool", 3, func(context.Context) error { ran = true; return nil })
					require.ErrorIs(t, err, redislock.ErrLimitMismatch)
					require.False(t, ran)
					return nil
				})
			})
			require.NoError(t, err)
			require.Equal(t, 2, inside)
			noKeys(t, "lock:{pool}")
		})
		t.Run("semaphore: a lost slot cancels fn's context and is reported", func(t *testing.T) {
			err := c.RunWithSemaphore(ctx, "pool", 2, func(ctx context.Context) error {
				require.NoError(t, b.rdb.Del(ctx, "lock:{pool}").Err())
				waitDone(t, ctx, 10*time.Second)
				return ctx.Err()
			}, redislock.WithExtendInterval(10*time.Millisecond))
			require.ErrorIs(t, err, redislock.ErrLockLost)
		})

		t.Run("multi: every name held while fn runs, each with its fence, all given back", func(t *testing.T) {
			err := c.RunWithLockMulti(ctx, []string{"a", "b"}, func(ctx context.Context) error {
				l, ok := redislock.LockFromContext(ctx)
				require.True(t, ok)
				fa, ok := l.FenceOf("a")
				require.True(t, ok)
				fb, ok := l.FenceOf("b")
				require.True(t, ok)
				f, _ := redislock.FenceFromContext(ctx)
				require.Equal(t, fa, f, "the context's fence is the first name's")
				require.Positive(t, fb)
				_, err := c.Acquire(ctx, "b")
				require.ErrorIs(t, err, redislock.ErrNotAcquired)
				return nil
			})
			require.NoError(t, err)
			noKeys(t, "lock:{a}", "lock:{b}")
		})
		t.Run("multi: losing one name cancels fn's context and is reported", func(t *testing.T) {
			err := c.RunWithLockMulti(ctx, []string{"a", "b"}, func(ctx context.Context) error {
				require.NoError(t, b.rdb.Set(ctx, "lock:{b}", "thief", time.Minute).Err())
				waitDone(t, ctx, 10*time.Second)
				requireLost(t, ctx, redislock.Taken)
				return ctx.Err()
			}, redislock.WithExtendInterval(10*time.Millisecond))
			require.ErrorIs(t, err, redislock.ErrLockLost)
			require.Equal(t, "thief", b.rdb.Get(ctx, "lock:{b}").Val(), "the thief's key is not released")
			noKeys(t, "lock:{a}")
			require.NoError(t, b.rdb.Del(ctx, "lock:{b}").Err())
		})
	})
}

func TestRunWithTheLockFamilyRefusesBadInput(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		hook := &commandLog{}
		b.rdb.AddHook(hook)
		c := redislock.New(b.rdb, quiet)
		fn := func(context.Context) error { t.Error("fn ran"); return nil }
		for name, call := range map[string]func() error{
			"shared, nil fn":        func() error { return c.RunWithSharedLock(ctx, "x", nil) },
			"semaphore, nil fn":     func() error { return c.RunWithSemaphore(ctx, "x", 2, nil) },
			"multi, nil fn":         func() error { return c.RunWithLockMulti(ctx, []string{"x"}, nil) },
			"shared, fail open":     func() error { return c.RunWithSharedLock(ctx, "x", fn, redislock.WithFailOpen()) },
			"semaphore, limit 0":    func() error { return c.RunWithSemaphore(ctx, "x", 0, fn) },
			"multi, duplicate name": func() error { return c.RunWithLockMulti(ctx, []string{"x", "x"}, fn) },
			"multi, no names":       func() error { return c.RunWithLockMulti(ctx, nil, fn) },
		} {
			require.ErrorIs(t, call(), redislock.ErrInvalidArgument, name)
		}
		// A nil fn's error names the lock as its kind says it.
		for want, err := range map[string]error{
			`redislock: invalid argument: nil fn for shared lock "x"`: c.RunWithSharedLock(ctx, "x", nil),
			`redislock: invalid argument: nil fn for semaphore "x"`:   c.RunWithSemaphore(ctx, "x", 2, nil),
			`redislock: invalid argument: nil fn for locks ["x" "y"]`: c.RunWithLockMulti(ctx, []string{"x", "y"}, nil),
		} {
			require.EqualError(t, err, want)
		}
		require.Empty(t, hook.take(), "bad input sends nothing")
	})
}
