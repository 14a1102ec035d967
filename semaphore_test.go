package redislock_test

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/internal/redistest"
)

func TestSemaphore(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()

		t.Run("at most limit holders, each with its own token and a rising fence", func(t *testing.T) {
			c := redislock.New(b.rdb, quiet, redislock.WithFencing())
			var held []*redislock.Lock
			tokens := map[string]bool{}
			for range 3 {
				l, err := c.AcquireSemaphore(ctx, "slots", 3)
				require.NoError(t, err)
				require.True(t, l.Valid())
				require.False(t, tokens[l.Token()], "a token of its own")
				tokens[l.Token()] = true
				if len(held) > 0 {
					require.Greater(t, l.Fence(), held[len(held)-1].Fence())
				}
				held = append(held, l)
			}
			_, err := c.AcquireSemaphore(ctx, "slots", 3)
			require.ErrorIs(t, err, redislock.ErrNotAcquired)
			require.EqualValues(t, 3, b.rdb.ZCard(ctx, "lock:{slots}").Val())

			require.NoError(t, held[1].Release(ctx))
			require.ErrorIs(t, held[1].Release(ctx), redislock.ErrNotHeld)
			l, err := c.AcquireSemaphore(ctx, "slots", 3)
			require.NoError(t, err, "the released slot is free")
			ttl, err := l.TTL(ctx)
			require.NoError(t, err)
			require.Positive(t, ttl)
			for _, l := range append([]*redislock.Lock{held[0], held[2]}, l) {
				require.NoError(t, l.Release(ctx))
			}
			require.Zero(t, b.rdb.Exists(ctx, "lock:{slots}").Val(), "nothing left once every holder left")
		})

		t.Run("a limit that disagrees with the holders' is an error saying so", func(t *testing.T) {
			c := redislock.New(b.rdb, quiet)
			l, err := c.AcquireSemaphore(ctx, "limit", 2)
			require.NoError(t, err)
			_, err = c.AcquireSemaphore(ctx, "limit", 5, redislock.WithRetry(redislock.LinearBackoff(time.Millisecond)))
			require.ErrorIs(t, err, redislock.ErrLimitMismatch)
			require.NotErrorIs(t, err, redislock.ErrNotAcquired)
			require.ErrorContains(t, err, "asked with limit 5, its holders use 2")
			require.Zero(t, b.rdb.ZCard(ctx, "lock:{limit}:q").Val(), "not queued")
			require.NoError(t, l.Release(ctx))
			l, err = c.AcquireSemaphore(ctx, "limit", 5)
			require.NoError(t, err, "once every holder left, a new limit is fine")
			require.NoError(t, l.Release(ctx))
		})

		t.Run("a crashed holder's slot comes back when its lease ends", func(t *testing.T) {
			// A live holder keeps the set itself alive: the crashed
			// holder's member must be dropped from it, not expire with it.
			live, err := redislock.New(b.rdb, quiet).AcquireSemaphore(ctx, "crash", 2)
			require.NoError(t, err)
			defer func() { require.NoError(t, live.Release(ctx)) }()
			c := redislock.New(b.rdb, quiet, redislock.WithTTL(200*time.Millisecond), redislock.WithWatchdog(false))
			crashed, err := c.AcquireSemaphore(ctx, "crash", 2)
			require.NoError(t, err)
			_, err = c.AcquireSemaphore(ctx, "crash", 2)
			require.ErrorIs(t, err, redislock.ErrNotAcquired)
			if b.mini != nil {
				b.mini.SetTime(time.Now().Add(time.Second)) // the scripts' TIME
				defer b.mini.SetTime(time.Time{})           // back to the real clock
			}
			var l *redislock.Lock
			eventually(t, 5*time.Second, func() bool {
				l, err = c.AcquireSemaphore(ctx, "crash", 2)
				return err == nil
			}, "the slot did not come back: %v", err)
			require.ErrorIs(t, crashed.Release(ctx), redislock.ErrNotHeld, "the crashed holder's slot is gone")
			require.NoError(t, l.Release(ctx))
		})

		t.Run("waiters are served in arrival order, woken by the release", func(t *testing.T) {
			c := redislock.New(b.rdb, quiet)
			holder, err := c.AcquireSemaphore(ctx, "order", 1)
			require.NoError(t, err)
			wait := redislock.WithRetry(redislock.LinearBackoff(time.Hour))
			type result struct {
				l   *redislock.Lock
				err error
			}
			first, second := make(chan result, 1), make(chan result, 1)
			waitCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			go func() { l, err := c.AcquireSemaphore(waitCtx, "order", 1, wait); first <- result{l, err} }()
			eventually(t, 5*time.Second, func() bool { return b.rdb.ZCard(ctx, "lock:{order}:q").Val() == 1 }, "first not queued")
			go func() { l, err := c.AcquireSemaphore(waitCtx, "order", 1, wait); second <- result{l, err} }()
			eventually(t, 5*time.Second, func() bool { return b.rdb.ZCard(ctx, "lock:{order}:q").Val() == 2 }, "second not queued")

			// A caller that does not wait is refused: the slot is owed.
			require.NoError(t, holder.Release(ctx))
			r := <-first
			require.NoError(t, r.err)
			select {
			case r2 := <-second:
				t.Fatalf("the second waiter overtook the first: %v", r2.err)
			default:
			}
			require.NoError(t, r.l.Release(ctx))
			r = <-second
			require.NoError(t, r.err)
			require.NoError(t, r.l.Release(ctx))
		})

		t.Run("a free slot owed to a queued waiter is not taken by a newcomer", func(t *testing.T) {
			c := redislock.New(b.rdb, quiet)
			// A semaphore's waiter of another process, queued: its place in
			// the queue (its token: the Client's tag, '.', 'n', see waiterToken).
			now := time.Now().UnixMilli()
			const waiter = "AAAAAAAAAA.nWAITER"
			require.NoError(t, b.rdb.ZAdd(ctx, "lock:{owed}:q", redis.Z{Score: float64(now), Member: waiter}).Err())
			require.NoError(t, b.rdb.ZAdd(ctx, "lock:{owed}:qx", redis.Z{Score: float64(now + 60_000), Member: waiter}).Err())
			_, err := c.AcquireSemaphore(ctx, "owed", 1)
			require.ErrorIs(t, err, redislock.ErrNotAcquired)
			l, err := c.AcquireSemaphore(ctx, "owed", 2)
			require.NoError(t, err, "a second slot is free beyond the one owed")
			require.NoError(t, l.Release(ctx))
		})

		t.Run("a lost slot cancels the lock's context with a LostError", func(t *testing.T) {
			// Found at the next extension (every 50 ms); a long TTL, so that
			// a stall cannot end the lease first (reason Unreachable).
			c := redislock.New(b.rdb, quiet, redislock.WithTTL(time.Minute), redislock.WithExtendInterval(50*time.Millisecond))
			l, err := c.AcquireSemaphore(ctx, "lost", 2)
			require.NoError(t, err)
			require.NoError(t, b.rdb.Del(ctx, "lock:{lost}").Err())
			waitDone(t, l.Context(), 5*time.Second)
			var lost *redislock.LostError
			require.ErrorAs(t, context.Cause(l.Context()), &lost)
			require.Equal(t, redislock.Expired, lost.Reason)
			require.False(t, l.Valid())
		})

		t.Run("the watchdog keeps a slot past its TTL", func(t *testing.T) {
			clock := &extensionClock{}
			// Four extensions of a second's TTL, past it; lost only if one is
			// held up for 660 ms (150 ms was lost on a loaded machine).
			c := redislock.New(b.rdb, quiet, redislock.WithTTL(time.Second), redislock.WithObserver(clock))
			l, err := c.AcquireSemaphore(ctx, "kept", 1)
			require.NoError(t, err)
			eventually(t, 10*time.Second, func() bool { _, n := clock.last(); return n >= 4 || l.Context().Err() != nil }, "not extended")
			if b.mini != nil {
				b.mini.FastForward(100 * time.Millisecond)
			}
			require.NoError(t, l.Context().Err())
			ttl, err := l.TTL(ctx)
			require.NoError(t, err)
			require.Positive(t, ttl)
			require.NoError(t, l.Release(ctx))
		})

		t.Run("a waiter that gives up leaves nothing behind", func(t *testing.T) {
			c := redislock.New(b.rdb, quiet)
			holder, err := c.AcquireSemaphore(ctx, "giveup", 1)
			require.NoError(t, err)
			waitCtx, cancel := context.WithTimeout(ctx, time.Second) // long enough for a loaded machine's first answer: it saw the lock held
			defer cancel()
			_, err = c.AcquireSemaphore(waitCtx, "giveup", 1, redislock.WithRetry(redislock.LinearBackoff(time.Hour)))
			require.ErrorIs(t, err, redislock.ErrNotAcquired)
			require.ErrorIs(t, err, context.DeadlineExceeded)
			eventually(t, 5*time.Second, func() bool { return b.rdb.Exists(ctx, "lock:{giveup}:q").Val() == 0 }, "place left in the queue")
			require.EqualValues(t, 1, b.rdb.ZCard(ctx, "lock:{giveup}").Val())
			require.NoError(t, holder.Release(ctx))
			require.NoError(t, c.Close(ctx))
		})

		t.Run("a lock and a semaphore of one name refuse each other", func(t *testing.T) {
			c := redislock.New(b.rdb, quiet)
			l, err := c.Acquire(ctx, "mixed")
			require.NoError(t, err)
			_, err = c.AcquireSemaphore(ctx, "mixed", 2)
			require.ErrorContains(t, err, "WRONGTYPE")
			require.ErrorIs(t, err, redislock.ErrNotALock)
			require.NoError(t, l.Release(ctx))
			s, err := c.AcquireSemaphore(ctx, "mixed", 2)
			require.NoError(t, err)
			_, err = c.Acquire(ctx, "mixed")
			require.ErrorContains(t, err, "WRONGTYPE")
			require.ErrorIs(t, err, redislock.ErrNotALock)
			require.NoError(t, s.Release(ctx))
		})
	})
}

func TestSemaphoreBadInput(t *testing.T) {
	rdb := newMini(t)
	c := redislock.New(rdb, quiet)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"a limit of 0", func() error { _, err := c.AcquireSemaphore(ctx, "x", 0); return err }},
		{"a negative limit", func() error { _, err := c.AcquireSemaphore(ctx, "x", -1); return err }},
		{"an absurd limit", func() error { _, err := c.AcquireSemaphore(ctx, "x", redislock.MaxSemaphoreLimit+1); return err }},
		{"an empty name", func() error { _, err := c.AcquireSemaphore(ctx, "", 2); return err }},
		{"a name that breaks the hash slot", func() error { _, err := c.AcquireSemaphore(ctx, "}x", 2); return err }},
		{"a nil context", func() error {
			var nilCtx context.Context
			_, err := c.AcquireSemaphore(nilCtx, "x", 2)
			return err
		}},
		{"WithFailOpen", func() error { _, err := c.AcquireSemaphore(ctx, "x", 2, redislock.WithFailOpen()); return err }},
		{"a bad TTL", func() error {
			_, err := c.AcquireSemaphore(ctx, "x", 2, redislock.WithTTL(time.Microsecond))
			return err
		}},
		{"a quorum Client", func() error {
			q, err := redislock.NewQuorum([]redis.UniversalClient{newMini(t), newMini(t), newMini(t)}, quiet)
			require.NoError(t, err)
			_, err = q.AcquireSemaphore(ctx, "x", 2)
			return err
		}},
	} {
		t.Run(tc.name+" is an invalid argument", func(t *testing.T) {
			err := tc.call()
			require.ErrorIs(t, err, redislock.ErrInvalidArgument)
		})
	}
	keys, err := rdb.Keys(ctx, "*").Result()
	require.NoError(t, err)
	require.Empty(t, keys, "nothing was sent")
}

// TestSemaphoreAcquireAfterClose: a closed Client refuses, and Close
// gives back the slots it holds.
func TestSemaphoreClose(t *testing.T) {
	rdb := newMini(t)
	ctx := context.Background()
	c := redislock.New(rdb, quiet)
	l, err := c.AcquireSemaphore(ctx, "closing", 2)
	require.NoError(t, err)
	require.NoError(t, c.Close(ctx))
	require.True(t, errors.Is(context.Cause(l.Context()), redislock.ErrClosed))
	require.Zero(t, rdb.Exists(ctx, "lock:{closing}").Val(), "Close gave the slot back")
	_, err = c.AcquireSemaphore(ctx, "closing", 2)
	require.ErrorIs(t, err, redislock.ErrClosed)
}

func TestSemaphoreOnCluster(t *testing.T) {
	t.Parallel()
	cluster := redistest.SharedCluster(t)
	rdb := cluster.Client(t)
	ctx := context.Background()
	c := redislock.New(rdb, quiet, redislock.WithFencing()) // the default TTL: a stall cannot lose a hold
	for _, name := range namesOnEachPrimary(t, cluster, "sem") {
		t.Run("limit 2 on the primary of "+name, func(t *testing.T) {
			a, err := c.AcquireSemaphore(ctx, name, 2)
			require.NoError(t, err)
			b, err := c.AcquireSemaphore(ctx, name, 2)
			require.NoError(t, err)
			require.Greater(t, b.Fence(), a.Fence())
			_, err = c.AcquireSemaphore(ctx, name, 3)
			require.ErrorIs(t, err, redislock.ErrLimitMismatch)

			waitCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			got := make(chan error, 1)
			var third *redislock.Lock
			go func() {
				var err error
				third, err = c.AcquireSemaphore(waitCtx, name, 2, redislock.WithRetry(redislock.LinearBackoff(time.Hour)))
				got <- err
			}()
			eventually(t, 5*time.Second, func() bool { return rdb.ZCard(ctx, "lock:{"+name+"}:q").Val() == 1 }, "not queued")
			require.NoError(t, a.Release(ctx))
			require.NoError(t, <-got)
			require.Greater(t, third.Fence(), b.Fence())
			require.NoError(t, b.Context().Err())
			require.NoError(t, b.Release(ctx))
			require.NoError(t, third.Release(ctx))
			require.Zero(t, rdb.Exists(ctx, "lock:{"+name+"}").Val())
		})
	}
}

// semaphoreACLCommands are what docs/security.md lists for semaphores, on
// top of the minimal line.
var semaphoreACLCommands = []string{"+type", "+zadd", "+zrem", "+zrange", "+zscore", "+zcard", "+zrank", "+zrangebyscore", "+zremrangebyscore"}

func TestSemaphoreACL(t *testing.T) {
	t.Parallel()
	server := redistest.Start(t)
	admin := newRedisClient(t, server.Addr())
	ctx := context.Background()
	rules := append(append([]string{"~lock:*", "resetchannels"}, minimalACLCommands...), semaphoreACLCommands...)

	t.Run("the documented line is enough for every semaphore call", func(t *testing.T) {
		rdb := setACLUser(t, admin, "sem", rules...)
		c := redislock.New(rdb, quiet, redislock.WithFencing())
		l, err := c.AcquireSemaphore(ctx, "acl", 1)
		require.NoError(t, err)
		waitCtx, cancel := context.WithTimeout(ctx, time.Second) // long enough for a loaded machine's first answer: it saw the lock held
		defer cancel()
		_, err = c.AcquireSemaphore(waitCtx, "acl", 1, redislock.WithRetry(redislock.LinearBackoff(time.Millisecond)))
		require.ErrorIs(t, err, redislock.ErrNotAcquired, "a waiter queues")
		_, err = l.TTL(ctx)
		require.NoError(t, err)
		require.NoError(t, l.Extend(ctx, time.Minute))
		require.NoError(t, l.Release(ctx))
		require.NoError(t, c.Close(ctx))
	})

	for _, drop := range semaphoreACLCommands {
		t.Run("without "+drop+" a semaphore call is refused", func(t *testing.T) {
			rdb := setACLUser(t, admin, "sem-"+drop[1:], slices.DeleteFunc(slices.Clone(rules), func(r string) bool { return r == drop })...)
			c := redislock.New(rdb, quiet)
			name := "acl-" + drop[1:]
			// Every call a semaphore makes: a holder and its extension, a
			// waiter that queues, the holder's release (which hands the
			// slot to the waiter), and a waiter that finds a slot whose
			// holder's lease ran out while another still waits (it counts
			// the waiters ahead of it).
			l, err := c.AcquireSemaphore(ctx, name, 1)
			if err == nil {
				err = l.Extend(ctx, time.Minute)
			}
			if err == nil {
				waitCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
				defer cancel()
				waiter := make(chan error, 1)
				go func() {
					w, err := c.AcquireSemaphore(waitCtx, name, 1, redislock.WithRetry(redislock.LinearBackoff(time.Millisecond)))
					if err == nil {
						err = w.Release(ctx)
					}
					waiter <- err
				}()
				eventually(t, 5*time.Second, func() bool {
					return admin.ZCard(ctx, "lock:{"+name+"}:q").Val() == 1 || len(waiter) == 1
				}, "the waiter neither queued nor failed")
				err = errors.Join(l.Release(ctx), <-waiter)
			}
			if err == nil {
				lapsing, err2 := c.AcquireSemaphore(ctx, name+"-lapse", 1, redislock.WithTTL(time.Second), redislock.WithWatchdog(false))
				err = err2
				if err == nil {
					waitCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
					defer cancel()
					waiter := make(chan error, 1)
					go func() {
						_, err := c.AcquireSemaphore(waitCtx, name+"-lapse", 1, redislock.WithRetry(redislock.LinearBackoff(time.Millisecond)))
						waiter <- err
					}()
					// Queued before the lease runs out: its attempt then
					// counts the waiters ahead of it.
					eventually(t, 5*time.Second, func() bool {
						return admin.ZCard(ctx, "lock:{"+name+"-lapse}:q").Val() == 1 || len(waiter) == 1
					}, "the waiter neither queued nor failed")
					err = <-waiter
					runtime.KeepAlive(lapsing)
				}
			}
			// Redis 7.0 words a refusal inside a script without the NOPERM prefix.
			require.Error(t, err)
			require.Regexp(t, `NOPERM|can't run this command`, err.Error())
			if l == nil {
				require.Zero(t, admin.ZCard(ctx, "lock:{"+name+"}").Val(), "a refused acquire holds no slot")
			}
			// A refused release leaves the slot to its lease; Close is
			// refused the same way.
			if err := c.Close(ctx); err != nil {
				require.Regexp(t, `NOPERM|can't run this command`, err.Error())
			}
		})
	}
}

func TestSemaphoreThroughSentinel(t *testing.T) {
	t.Parallel()
	set := redistest.SharedSentinel(t)
	rdb := set.Client(t)
	replica := newRedisClient(t, set.Replica(t).Addr())
	ctx := context.Background()
	clock := &extensionClock{}
	// The lease must outlast the first acquisition's round trip, WAIT
	// included: 300 ms did not on CI's loaded machine (735 ms, the first
	// command also finding the primary through the sentinels), so the
	// client finds it first and the lease is 2 s.
	require.NoError(t, rdb.Ping(ctx).Err())
	c := redislock.New(rdb, quiet, redislock.WithFencing(), redislock.WithReplicaAck(1, 5*time.Second),
		redislock.WithTTL(2*time.Second), redislock.WithObserver(clock))

	a, err := c.AcquireSemaphore(ctx, "sentinel", 2)
	require.NoError(t, err)
	b, err := c.AcquireSemaphore(ctx, "sentinel", 2)
	require.NoError(t, err)
	require.Greater(t, b.Fence(), a.Fence())
	// No polling: WAIT returned only once the replica had both holders.
	require.EqualValues(t, 2, replica.ZCard(ctx, "lock:{sentinel}").Val())
	eventually(t, 10*time.Second, func() bool { _, n := clock.last(); return n >= 4 }, "the watchdog extended the slots")

	waitCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	got := make(chan error, 1)
	var third *redislock.Lock
	go func() {
		var err error
		third, err = c.AcquireSemaphore(waitCtx, "sentinel", 2, redislock.WithRetry(redislock.LinearBackoff(time.Hour)))
		got <- err
	}()
	eventually(t, 5*time.Second, func() bool { return rdb.ZCard(ctx, "lock:{sentinel}:q").Val() == 1 }, "not queued")
	require.NoError(t, a.Release(ctx))
	require.NoError(t, <-got)
	require.NoError(t, b.Context().Err(), "still held")
	require.NoError(t, b.Release(ctx))
	require.NoError(t, third.Release(ctx))
}

// A semaphore's free slot is owed to its own waiters ahead in line only: a
// waiter of another kind (an exclusive lock's, left in the one queue from
// before the name was a semaphore) or a multi lock's watcher cannot take a
// slot, and does not keep a caller out of one. (Every member of the queue
// counted as ahead: a slot stayed free while they were in line.)
func TestOnlyASemaphoresWaitersAreOwedItsSlots(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		c := redislock.New(b.rdb, quiet)
		held, err := c.AcquireSemaphore(ctx, "owed-kinds", 3)
		require.NoError(t, err)
		queue, expiries := "lock:{owed-kinds}:q", "lock:{owed-kinds}:qx"
		for i, member := range []string{"AAAAAAAAAA.EXCLUSIVEWAITERTOKEN", "AAAAAAAAAA.sSHAREDWAITERTOKEN", "~WATCHER"} {
			require.NoError(t, b.rdb.ZAdd(ctx, queue, redis.Z{Score: float64(i + 1), Member: member}).Err())
			require.NoError(t, b.rdb.ZAdd(ctx, expiries, redis.Z{Score: 1e13, Member: member}).Err()) // far from lapsing
		}
		second, err := c.AcquireSemaphore(ctx, "owed-kinds", 3)
		require.NoError(t, err, "two slots free, no semaphore waiter ahead")
		require.NoError(t, b.rdb.ZAdd(ctx, queue, redis.Z{Score: 4, Member: "AAAAAAAAAA.nSEMAPHOREWAITERTOKEN"}).Err())
		require.NoError(t, b.rdb.ZAdd(ctx, expiries, redis.Z{Score: 1e13, Member: "AAAAAAAAAA.nSEMAPHOREWAITERTOKEN"}).Err())
		_, err = c.AcquireSemaphore(ctx, "owed-kinds", 3)
		require.ErrorIs(t, err, redislock.ErrNotAcquired, "the last slot is owed to the semaphore's waiter in line")
		require.NoError(t, second.Release(ctx))
		require.NoError(t, held.Release(ctx))
	})
}
