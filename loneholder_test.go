package redislock_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redislock/redislock"
)

// A shared hold that nobody shares is the exclusive lock's shape: one SET NX
// of the reader's (marked) token, released by one script. Every other
// operation on it reads it as a shared hold of one.
func TestALoneReaderIsOneSETOnceTheScriptsRan(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		c, rdb, hook := scriptedClient(t, b, func(c *redislock.Client) (*redislock.Lock, error) { return c.AcquireShared(ctx, "warm") })

		// Taken and let go as the exclusive lock is.
		l, err := c.AcquireShared(ctx, "alone", redislock.WithMetadata("reader=1"))
		require.NoError(t, err)
		require.Equal(t, []string{"set"}, hook.take(), "a lone reader's acquire is one SET NX")
		require.Equal(t, l.Token()+"\x1freader=1", b.rdb.Get(ctx, l.Key()).Val(), "the key holds the reader's token (and metadata)")
		require.Greater(t, b.rdb.PTTL(ctx, l.Key()).Val(), redislock.DefaultTTL/2)

		// Read as a shared hold of one.
		info, err := c.Inspect(ctx, "alone")
		require.NoError(t, err)
		require.True(t, info.Held)
		require.Equal(t, "shared", info.Kind)
		require.Equal(t, 1, info.Count)
		require.Equal(t, 1, info.Shared)
		require.Len(t, info.Holders, 1)
		require.Equal(t, redislock.HolderID(l), info.Holders[0].ID)
		require.Equal(t, "reader=1", info.Holders[0].Metadata)
		require.Positive(t, info.TTL)

		// Extended, its TTL read, as its kind.
		require.NoError(t, l.Extend(ctx, time.Minute))
		ttl, err := l.TTL(ctx)
		require.NoError(t, err)
		require.Greater(t, ttl, 30*time.Second)

		// A writer is kept out; a semaphore of the name is refused.
		_, err = c.Acquire(ctx, "alone")
		require.ErrorIs(t, err, redislock.ErrNotAcquired)
		_, err = c.AcquireSemaphore(ctx, "alone", 2)
		require.ErrorIs(t, err, redislock.ErrNotALock)

		// A second reader shares it; each lets go of its own share.
		second, err := redislock.New(rdb, quiet).AcquireShared(ctx, "alone")
		require.NoError(t, err)
		info, err = c.Inspect(ctx, "alone")
		require.NoError(t, err)
		require.Equal(t, 2, info.Shared)
		require.ElementsMatch(t, []string{redislock.HolderID(l), redislock.HolderID(second)},
			[]string{info.Holders[0].ID, info.Holders[1].ID})
		ttl, err = l.TTL(ctx)
		require.NoError(t, err)
		require.Greater(t, ttl, 30*time.Second, "the first reader's lease went with it into the set")
		require.NoError(t, l.Extend(ctx, time.Minute))
		require.NoError(t, l.Release(ctx))
		_, err = c.Acquire(ctx, "alone")
		require.ErrorIs(t, err, redislock.ErrNotAcquired, "the second reader still holds")
		require.NoError(t, second.Release(ctx))
		require.Zero(t, b.rdb.Exists(ctx, l.Key()).Val())

		// A lone reader's release hands the name to a writer in line.
		l, err = c.AcquireShared(ctx, "handed")
		require.NoError(t, err)
		writer := make(chan error, 1)
		go func() {
			w, err := redislock.New(rdb, quiet).Acquire(ctx, "handed", redislock.WithRetry(redislock.LinearBackoff(time.Second)))
			if err == nil {
				err = w.Release(ctx)
			}
			writer <- err
		}()
		eventually(t, 10*time.Second, func() bool { return queueLen(t, b.rdb, "handed") == 1 }, "the writer queued")
		require.NoError(t, l.Release(ctx))
		select {
		case err := <-writer:
			require.NoError(t, err)
		case <-time.After(30 * time.Second): // a hand-over, not a lease's end: far within this on any machine
			t.Fatal("the writer did not get the name the lone reader let go")
		}

		// Broken by its ID, as every holder is.
		l, err = c.AcquireShared(ctx, "broken")
		require.NoError(t, err)
		info, err = c.BreakHolder(ctx, "broken", redislock.HolderID(l))
		require.NoError(t, err)
		require.Equal(t, "shared", info.Kind)
		require.Zero(t, b.rdb.Exists(ctx, l.Key()).Val())
		_ = l.Release(ctx)
	})
}

// Only a reader's token, exactly as the library makes it, is a lone
// reader's hold: another value in the key that starts with its mark (a
// value some other program or a test kit set, "stolen", "n3-...") is
// another holder's, and no reader joins it; Inspect calls it a lock.
func TestAValueThatLooksLikeAMarkIsNoLoneHolder(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		c := redislock.New(b.rdb, quiet)
		for _, value := range []string{"stolen-by-a-test", "sZZ", "n3-", "n3-stolen", "ABCDEFGHIJ.s", "s" + strings.Repeat("A", 27)} {
			require.NoError(t, b.rdb.Set(ctx, "lock:{foreign}", value, time.Minute).Err())
			_, err := c.AcquireShared(ctx, "foreign")
			require.ErrorIs(t, err, redislock.ErrNotAcquired, "%q is another holder's", value)
			_, err = c.AcquireSemaphore(ctx, "foreign", 3)
			require.Error(t, err, "%q is no semaphore", value)
			_, err = c.Acquire(ctx, "foreign")
			require.ErrorIs(t, err, redislock.ErrNotAcquired, "%q is another holder's", value)
			info, err := c.Inspect(ctx, "foreign")
			require.NoError(t, err)
			require.Equal(t, "lock", info.Kind, "%q", value)
			require.Equal(t, value, b.rdb.Get(ctx, "lock:{foreign}").Val(), "left as it was")
		}
	})
}

// A semaphore that one holder takes alone is the exclusive lock's shape:
// one SET NX of the holder's token, whose mark carries the limit, released
// by one script. Every other operation reads it as a semaphore held once;
// the next holder turns it into the holders' set.
func TestALoneSemaphoreHolderIsOneSETOnceTheScriptsRan(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		c, rdb, hook := scriptedClient(t, b, func(c *redislock.Client) (*redislock.Lock, error) { return c.AcquireSemaphore(ctx, "warm", 3) })

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

// scriptedClient is a Client on b whose commands hook logs, once a first
// acquire and release of its kind (warm) ran its scripts: from then on a
// free name is one SET NX (see singleStore.acquire). The log starts empty.
func scriptedClient(t *testing.T, b *backend, warm func(*redislock.Client) (*redislock.Lock, error)) (*redislock.Client, *redis.Client, *commandLog) {
	t.Helper()
	hook := &commandLog{}
	rdb := newRedisClient(t, b.rdb.Options().Addr)
	rdb.AddHook(hook)
	c := redislock.New(rdb, quiet)
	l, err := warm(c)
	require.NoError(t, err)
	require.NoError(t, l.Release(context.Background()))
	hook.take()
	return c, rdb, hook
}
