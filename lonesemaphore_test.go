package redislock_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redislock/redislock"
)

// A semaphore that one holder takes alone is the exclusive lock's shape:
// one SET NX of the holder's token, whose mark carries the limit, released
// by one script. Every other operation reads it as a semaphore held once;
// the next holder turns it into the holders' set.
func TestALoneSemaphoreHolderIsOneSETOnceTheScriptsRan(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		hook := &commandLog{}
		rdb := newRedisClient(t, b.rdb.Options().Addr)
		rdb.AddHook(hook)
		c := redislock.New(rdb, quiet)
		warm, err := c.AcquireSemaphore(ctx, "warm", 3)
		require.NoError(t, err)
		require.NoError(t, warm.Release(ctx))
		hook.take()

		// Taken and let go as the exclusive lock is.
		l, err := c.AcquireSemaphore(ctx, "slots", 3, redislock.WithMetadata("slot=1"))
		require.NoError(t, err)
		require.Equal(t, []string{"set"}, hook.take(), "a lone holder's acquire is one SET NX")
		require.Equal(t, l.Token()+"\x1fslot=1", b.rdb.Get(ctx, l.Key()).Val(), "the key holds the holder's token (and metadata)")
		require.True(t, strings.HasPrefix(l.Token(), "n3-"), "the token's mark carries the limit: %s", l.Token())

		info, err := c.Inspect(ctx, "slots")
		require.NoError(t, err)
		require.True(t, info.Held)
		require.Equal(t, "semaphore", info.Kind)
		require.Equal(t, 1, info.Count)
		require.Equal(t, 3, info.Limit)
		require.Len(t, info.Holders, 1)
		require.Equal(t, redislock.HolderID(l), info.Holders[0].ID)
		require.Equal(t, "slot=1", info.Holders[0].Metadata)

		require.NoError(t, l.Extend(ctx, time.Minute))
		ttl, err := l.TTL(ctx)
		require.NoError(t, err)
		require.Greater(t, ttl, 30*time.Second)

		// The name is a semaphore's to every other kind.
		_, err = c.Acquire(ctx, "slots")
		require.ErrorIs(t, err, redislock.ErrNotALock)
		_, err = c.AcquireShared(ctx, "slots")
		require.ErrorIs(t, err, redislock.ErrNotALock)
		_, err = c.AcquireMulti(ctx, []string{"other", "slots"})
		require.ErrorIs(t, err, redislock.ErrNotALock)

		// Another limit is refused; the same one shares the semaphore.
		_, err = c.AcquireSemaphore(ctx, "slots", 2)
		require.ErrorIs(t, err, redislock.ErrLimitMismatch)
		second, err := redislock.New(rdb, quiet).AcquireSemaphore(ctx, "slots", 3)
		require.NoError(t, err)
		info, err = c.Inspect(ctx, "slots")
		require.NoError(t, err)
		require.Equal(t, 2, info.Count)
		require.Equal(t, 3, info.Limit)
		ttl, err = l.TTL(ctx)
		require.NoError(t, err)
		require.Greater(t, ttl, 30*time.Second, "the first holder's lease went with it into the set")
		require.NoError(t, l.Extend(ctx, time.Minute))
		require.NoError(t, l.Release(ctx))
		require.NoError(t, second.Release(ctx))
		require.Zero(t, b.rdb.Exists(ctx, l.Key()).Val())

		// A lone holder's release hands its slot to a waiter in line.
		l, err = c.AcquireSemaphore(ctx, "one", 1)
		require.NoError(t, err)
		waiter := make(chan error, 1)
		go func() {
			w, err := redislock.New(rdb, quiet).AcquireSemaphore(ctx, "one", 1, redislock.WithRetry(redislock.LinearBackoff(time.Second)))
			if err == nil {
				err = w.Release(ctx)
			}
			waiter <- err
		}()
		eventually(t, 10*time.Second, func() bool { return queueLen(t, b.rdb, "one") == 1 }, "the waiter queued")
		require.NoError(t, l.Release(ctx))
		select {
		case err := <-waiter:
			require.NoError(t, err)
		case <-time.After(30 * time.Second): // a hand-over, not a lease's end: far within this on any machine
			t.Fatal("the waiter did not get the slot the lone holder let go")
		}

		// Broken by its ID, as every holder is.
		l, err = c.AcquireSemaphore(ctx, "broken", 2)
		require.NoError(t, err)
		info, err = c.BreakHolder(ctx, "broken", redislock.HolderID(l))
		require.NoError(t, err)
		require.Equal(t, "semaphore", info.Kind)
		require.Zero(t, b.rdb.Exists(ctx, l.Key()).Val())
		_ = l.Release(ctx)
	})
}
