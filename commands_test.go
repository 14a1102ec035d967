package redislock_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
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

// An uncontended multi lock costs what a plain lock costs: once a script of
// the Client ran, its first attempt is its names' SET NX PX in one round
// trip, and its release one script. When a SET finds its name taken, what
// the others set is given back and the acquire script says why (and takes
// them if it can); a fenced or waiting caller runs the script from the
// start.
func TestAMultiLockIsItsNamesSETsOnceTheScriptsRan(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		trips := &roundTrips{}
		rdb := newRedisClient(t, b.rdb.Options().Addr) // b.rdb checks, unhooked
		rdb.AddHook(trips)
		c := redislock.New(rdb, quiet)
		names := []string{"plain:c", "plain:a", "plain:b"}
		keys := []string{"lock:{plain:a}", "lock:{plain:b}", "lock:{plain:c}"}

		l, err := c.AcquireMulti(ctx, names)
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))
		require.NotContains(t, trips.take(), "set set set", "a new Client runs the script first")

		l, err = c.AcquireMulti(ctx, names)
		require.NoError(t, err)
		for _, key := range keys {
			require.Equal(t, l.Token(), b.rdb.Get(ctx, key).Val(), key)
			require.Greater(t, b.rdb.PTTL(ctx, key).Val(), redislock.DefaultTTL/2, "SET gave %s its TTL", key)
		}
		require.NoError(t, l.Release(ctx))
		require.Equal(t, []string{"set set set", "evalsha"}, trips.take())
		require.Zero(t, b.rdb.Exists(ctx, keys...).Val())

		// One name held by another: the two set are given back (the
		// release script), then the acquire script refuses.
		other, err := redislock.New(b.rdb, quiet).Acquire(ctx, "plain:b")
		require.NoError(t, err)
		_, err = c.AcquireMulti(ctx, names)
		require.ErrorIs(t, err, redislock.ErrNotAcquired)
		require.ErrorContains(t, err, `"plain:b" is held by another holder`)
		require.Equal(t, []string{"set set set", "evalsha", "evalsha"}, trips.take())
		require.Zero(t, b.rdb.Exists(ctx, "lock:{plain:a}", "lock:{plain:c}").Val(), "nothing left held")
		require.Equal(t, other.Token(), b.rdb.Get(ctx, "lock:{plain:b}").Val())
		require.NoError(t, other.Release(ctx))

		// A name a semaphore holds: an error, not "held"; nothing left held.
		sem, err := redislock.New(b.rdb, quiet).AcquireSemaphore(ctx, "plain:c", 2)
		require.NoError(t, err)
		_, err = c.AcquireMulti(ctx, names)
		require.Error(t, err)
		require.NotErrorIs(t, err, redislock.ErrNotAcquired)
		require.ErrorContains(t, err, "WRONGTYPE")
		require.Zero(t, b.rdb.Exists(ctx, "lock:{plain:a}", "lock:{plain:b}").Val(), "nothing left held")
		require.NoError(t, sem.Release(ctx))

		// Fenced, or waiting: the script from the start.
		trips.take()
		l, err = c.AcquireMulti(ctx, names, redislock.WithFencing())
		require.NoError(t, err)
		require.Positive(t, l.Fence())
		require.NoError(t, l.Release(ctx))
		l, err = c.AcquireMulti(ctx, names, redislock.WithRetry(redislock.LinearBackoff(time.Millisecond)))
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))
		require.Equal(t, []string{"evalsha", "evalsha", "evalsha", "evalsha"}, trips.take())
	})
}

// roundTrips records each round trip's commands, a pipeline's joined by
// spaces, leaving out a new connection's set-up and a Client's one look at
// the server.
type roundTrips struct {
	mu    sync.Mutex
	trips []string
}

func (h *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.note(cmd)
		return next(ctx, cmd)
	}
}

func (h *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.note(cmds...)
		return next(ctx, cmds)
	}
}

func (h *roundTrips) note(cmds ...redis.Cmder) {
	var names []string
	for _, cmd := range cmds {
		if !slices.Contains([]string{"hello", "client", "ping", "config"}, cmd.Name()) {
			names = append(names, cmd.Name())
		}
	}
	if len(names) > 0 {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.trips = append(h.trips, strings.Join(names, " "))
	}
}

// take returns the round trips so far, and forgets them.
func (h *roundTrips) take() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	trips := h.trips
	h.trips = nil
	return trips
}
