package redislock_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redislock/redislock"
)

func TestAPlainLockIsOneSETOnceTheScriptsRan(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		hook := &commandLog{}
		rdb := newRedisClient(t, b.rdb.Options().Addr) // b.rdb checks, unhooked
		rdb.AddHook(hook)
		c := redislock.New(rdb, quiet)

		// The first acquisition of a Client runs the script: a user not
		// allowed to run scripts is refused here, not after taking a lock
		// it could not release.
		l, err := c.Acquire(ctx, "fast")
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))
		// (EVALSHA, then EVAL while the server has not cached the script.)
		require.NotContains(t, hook.take(), "set")

		// From then on: SET NX PX, and the release script.
		l, err = c.Acquire(ctx, "fast")
		require.NoError(t, err)
		pttl := b.rdb.PTTL(ctx, l.Key()).Val()
		require.Greater(t, pttl, redislock.DefaultTTL/2, "SET gave the key its TTL")
		require.Equal(t, l.Token(), b.rdb.Get(ctx, l.Key()).Val())
		require.NoError(t, l.Release(ctx))
		require.Equal(t, []string{"set", "evalsha"}, hook.take())

		// Held by another: SET finds it taken, the script reports the
		// holder's TTL; a waiter's later attempts are one script each.
		other, err := c.Acquire(ctx, "held")
		require.NoError(t, err)
		hook.take()
		_, err = redislock.New(rdb, quiet).Acquire(ctx, "held")
		require.ErrorIs(t, err, redislock.ErrNotAcquired)
		require.Contains(t, err.Error(), "for ", "the holder's TTL came back with the refusal")
		require.Equal(t, []string{"evalsha"}, hook.take(), "a new Client runs the script first")
		_, err = c.Acquire(ctx, "held")
		require.ErrorIs(t, err, redislock.ErrNotAcquired)
		require.Equal(t, []string{"set", "evalsha"}, hook.take())
		require.NoError(t, other.Release(ctx))

		// A value of another type is an error, not "held".
		require.NoError(t, b.rdb.HSet(ctx, "lock:{hash}", "f", "v").Err())
		_, err = c.Acquire(ctx, "hash")
		require.Error(t, err)
		require.NotErrorIs(t, err, redislock.ErrNotAcquired)
		require.Contains(t, err.Error(), "WRONGTYPE")
		hook.take()

		// A SET whose reply was lost and that go-redis sent again finds
		// our own token: the script recognises it, and the lock is ours.
		hook.mu.Lock()
		hook.resend = true
		hook.mu.Unlock()
		l, err = c.Acquire(ctx, "resent")
		require.NoError(t, err, "our own SET, sent twice, is still our lock")
		require.Equal(t, []string{"set", "evalsha"}, hook.take())
		require.Equal(t, l.Token(), b.rdb.Get(ctx, l.Key()).Val())
		require.NoError(t, l.Release(ctx))
		require.Zero(t, b.rdb.Exists(ctx, l.Key()).Val())

		// Fenced locks always run the script (the INCR goes with the SET).
		hook.take()
		l, err = c.Acquire(ctx, "fenced", redislock.WithFencing())
		require.NoError(t, err)
		require.Positive(t, l.Fence())
		require.NoError(t, l.Release(ctx))
		names := hook.take()
		require.Equal(t, []string{"evalsha", "evalsha"}, names, strings.Join(names, " "))
	})
}

func TestALockContextAskedForAfterTheHoldEndedComesCancelled(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		c := redislock.New(b.rdb, quiet)

		released, err := c.Acquire(ctx, "released")
		require.NoError(t, err)
		require.NoError(t, released.Release(ctx))
		lockCtx := released.Context()
		require.Error(t, lockCtx.Err(), "released before anyone asked for the context")
		require.ErrorIs(t, context.Cause(lockCtx), redislock.ErrReleased)

		lost, err := c.Acquire(ctx, "lost", redislock.WithWatchdog(false))
		require.NoError(t, err)
		require.NoError(t, b.rdb.Del(ctx, lost.Key()).Err())
		// Extend finds the key gone: the hold ends with a loss, and Extend
		// returns once it is announced.
		require.ErrorIs(t, lost.Extend(ctx, time.Second), redislock.ErrNotHeld)
		lockCtx = lost.Context()
		require.Error(t, lockCtx.Err())
		var lostErr *redislock.LostError
		require.ErrorAs(t, context.Cause(lockCtx), &lostErr)
		require.Equal(t, redislock.Expired, lostErr.Reason)
		require.Same(t, lockCtx, lost.Context(), "one context per lock")
	})
}
