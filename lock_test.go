package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/internal/redistest"
)

var quiet = redislock.WithLogger(discardLogger())

func TestAcquireAndRelease(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		c := redislock.New(b.rdb, quiet)

		l, err := c.Acquire(ctx, "job")
		require.NoError(t, err)
		require.Equal(t, "job", l.Name())
		require.Equal(t, "lock:{job}", l.Key())
		require.Equal(t, l.Token(), b.rdb.Get(ctx, l.Key()).Val(), "the key holds our token")
		require.Zero(t, l.Fence(), "no fence without WithFencing")
		ttl, err := l.TTL(ctx)
		require.NoError(t, err)
		require.Greater(t, ttl, 29*time.Second)
		require.LessOrEqual(t, ttl, redislock.DefaultTTL)

		_, err = c.Acquire(ctx, "job")
		require.ErrorIs(t, err, redislock.ErrNotAcquired, "a second holder is refused")

		require.NoError(t, l.Release(ctx))
		require.Zero(t, b.rdb.Exists(ctx, l.Key()).Val(), "release deleted the key")
		require.ErrorIs(t, context.Cause(l.Context()), redislock.ErrReleased)

		l2, err := c.Acquire(ctx, "job")
		require.NoError(t, err, "free again after release")
		require.NotEqual(t, l.Token(), l2.Token())
		require.NoError(t, l2.Release(ctx))
	})
}

func TestReleaseIsIdempotent(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		c := redislock.New(b.rdb, quiet)
		l, err := c.Acquire(ctx, "job")
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))

		before := commandsProcessed(t, b)
		require.ErrorIs(t, l.Release(ctx), redislock.ErrNotHeld)
		require.ErrorIs(t, l.Extend(ctx, time.Second), redislock.ErrNotHeld)
		_, err = l.TTL(ctx)
		require.ErrorIs(t, err, redislock.ErrNotHeld)
		require.Equal(t, before, commandsProcessed(t, b), "calls on a released lock send nothing")
	})
}

// commandsProcessed counts the commands the server has run (miniredis:
// total commands), to prove that a call sent nothing.
func commandsProcessed(t *testing.T, b *backend) int64 {
	t.Helper()
	if b.mini != nil {
		return int64(b.mini.CommandCount())
	}
	info, err := b.rdb.InfoMap(context.Background(), "stats").Result()
	require.NoError(t, err)
	n, err := strconv.ParseInt(info["Stats"]["total_commands_processed"], 10, 64)
	require.NoError(t, err)
	// Leave out our own earlier INFO calls.
	n -= b.infoCalls
	b.infoCalls++
	return n
}

func TestMutualExclusionHammer(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		const workers, rounds = 50, 4
		ctx := context.Background()
		c := redislock.New(b.rdb, quiet, redislock.WithRetry(redislock.ExponentialBackoff(time.Millisecond, 20*time.Millisecond)))

		var inside atomic.Int32
		var overlaps atomic.Int32
		errs := make(chan error, workers*rounds)
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for range rounds {
					waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
					err := c.RunWithLock(waitCtx, "counter", func(ctx context.Context) error {
						if inside.Add(1) != 1 {
							overlaps.Add(1)
						}
						defer inside.Add(-1)
						// A read-modify-write that loses updates unless
						// the lock excludes every other worker.
						n, err := b.rdb.Get(ctx, "counter").Int()
						if err != nil && !errors.Is(err, redis.Nil) {
							return err
						}
						return b.rdb.Set(ctx, "counter", n+1, 0).Err()
					})
					cancel()
					errs <- err
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		require.Zero(t, overlaps.Load(), "two holders were inside at once")
		n, err := b.rdb.Get(ctx, "counter").Int()
		require.NoError(t, err)
		require.Equal(t, workers*rounds, n, "no update was lost")
	})
}

func TestStaleHolderCannotReleaseTheNewHoldersLock(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		c := redislock.New(b.rdb, quiet, redislock.WithWatchdog(false))
		stale, err := c.Acquire(ctx, "order:42")
		require.NoError(t, err)
		b.expireNow(t, stale.Key()) // the stale holder's lease ran out while it worked

		fresh, err := c.Acquire(ctx, "order:42")
		require.NoError(t, err)

		require.ErrorIs(t, stale.Release(ctx), redislock.ErrNotHeld)
		require.Equal(t, fresh.Token(), b.rdb.Get(ctx, fresh.Key()).Val(), "the new holder's key survived")
		require.ErrorIs(t, stale.Extend(ctx, time.Minute), redislock.ErrNotHeld)
		require.NoError(t, fresh.Release(ctx))
	})
}

func TestExtend(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		c := redislock.New(b.rdb, quiet, redislock.WithWatchdog(false), redislock.WithTTL(time.Second))

		t.Run("resets the lease", func(t *testing.T) {
			l, err := c.Acquire(ctx, "extend-ok")
			require.NoError(t, err)
			defer l.Release(ctx)
			require.NoError(t, l.Extend(ctx, time.Minute))
			ttl, err := l.TTL(ctx)
			require.NoError(t, err)
			require.Greater(t, ttl, 50*time.Second)
		})
		t.Run("of an expired lock returns ErrNotHeld and cancels its context", func(t *testing.T) {
			l, err := c.Acquire(ctx, "extend-expired")
			require.NoError(t, err)
			b.expireNow(t, l.Key())
			require.ErrorIs(t, l.Extend(ctx, time.Minute), redislock.ErrNotHeld)
			requireLost(t, l.Context(), redislock.Expired)
			require.Zero(t, b.rdb.Exists(ctx, l.Key()).Val(), "extend did not recreate the key")
			_, err = l.TTL(ctx)
			require.ErrorIs(t, err, redislock.ErrNotHeld)
		})
		t.Run("of a taken lock returns ErrNotHeld and leaves the new holder alone", func(t *testing.T) {
			l, err := c.Acquire(ctx, "extend-taken")
			require.NoError(t, err)
			require.NoError(t, b.rdb.Set(ctx, l.Key(), "someone-else", time.Second).Err())
			require.ErrorIs(t, l.Extend(ctx, time.Minute), redislock.ErrNotHeld)
			requireLost(t, l.Context(), redislock.Taken)
			require.LessOrEqual(t, b.rdb.PTTL(ctx, l.Key()).Val(), time.Second, "the other holder's TTL was not touched")
			require.ErrorIs(t, l.Release(ctx), redislock.ErrNotHeld)
			require.Equal(t, "someone-else", b.rdb.Get(ctx, l.Key()).Val())
		})
	})
}

// requireLost asserts that ctx was cancelled because the lock was lost for
// reason.
func requireLost(t *testing.T, ctx context.Context, reason redislock.LostReason) *redislock.LostError {
	t.Helper()
	require.Error(t, ctx.Err(), "the lock's context is cancelled")
	cause := context.Cause(ctx)
	require.ErrorIs(t, cause, redislock.ErrLockLost)
	var lost *redislock.LostError
	require.ErrorAs(t, cause, &lost)
	require.Equal(t, reason, lost.Reason, "loss reason (%v)", lost)
	return lost
}

func TestLockContextOutlivesTheAcquireContext(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		type key struct{}
		c := redislock.New(b.rdb, quiet)
		acquireCtx, cancel := context.WithTimeout(context.WithValue(context.Background(), key{}, "v"), time.Minute)
		l, err := c.Acquire(acquireCtx, "job")
		require.NoError(t, err)
		cancel()
		require.NoError(t, l.Context().Err(), "ending the wait context does not end the hold")
		require.Equal(t, "v", l.Context().Value(key{}), "values are carried")
		require.NoError(t, l.Release(context.Background()))
		require.ErrorIs(t, context.Cause(l.Context()), redislock.ErrReleased)
	})
}

func TestWrongTypeKeyIsAnErrorNotALock(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		require.NoError(t, b.rdb.HSet(ctx, "lock:{job}", "f", "v").Err())
		c := redislock.New(b.rdb, quiet)
		_, err := c.Acquire(ctx, "job")
		require.Error(t, err)
		require.NotErrorIs(t, err, redislock.ErrNotAcquired)
		require.ErrorIs(t, err, redislock.ErrNotALock)
		require.True(t, redis.HasErrorPrefix(err, "WRONGTYPE"), "Redis' own error is still in the chain: %v", err)
		// A waiter reads the key first: the same error, and no waiting.
		_, err = c.Acquire(ctx, "job", redislock.WithRetry(redislock.LinearBackoff(time.Hour)))
		require.Error(t, err)
		require.NotErrorIs(t, err, redislock.ErrNotAcquired)
		require.ErrorIs(t, err, redislock.ErrNotALock)
		require.True(t, redis.HasErrorPrefix(err, "WRONGTYPE"), "Redis' own error is still in the chain: %v", err)

		// A campaign ends with the same error: it is an answer, not an
		// outage to campaign through.
		err = c.Elect(ctx, "job", func(context.Context) error { return nil })
		require.ErrorIs(t, err, redislock.ErrNotALock)

		// A fence counter that is not a number leaves nothing held.
		require.NoError(t, b.rdb.Set(ctx, "lock:{other}:fence", "not-a-number", 0).Err())
		_, err = c.Acquire(ctx, "other", redislock.WithFencing())
		require.Error(t, err)
		require.NotErrorIs(t, err, redislock.ErrNotAcquired)
		require.Zero(t, b.rdb.Exists(ctx, "lock:{other}").Val(), "the failed acquire left no lock")
	})
}

func TestFencingTokensIncreaseAcrossHolders(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		c := redislock.New(b.rdb, quiet, redislock.WithFencing())
		var last int64
		for i := range 5 {
			l, err := c.Acquire(ctx, "settlement:2026-12-02")
			require.NoError(t, err)
			require.Greater(t, l.Fence(), last, "fence %d of holder %d", l.Fence(), i)
			fence, ok := redislock.FenceFromContext(l.Context())
			require.True(t, ok)
			require.Equal(t, l.Fence(), fence)

			// A failed attempt must not consume a number.
			_, err = c.Acquire(ctx, "settlement:2026-12-02")
			require.ErrorIs(t, err, redislock.ErrNotAcquired)
			require.Equal(t, strconv.FormatInt(l.Fence(), 10), b.rdb.Get(ctx, l.Key()+":fence").Val())

			last = l.Fence()
			require.NoError(t, l.Release(ctx))
		}

		plain, err := redislock.New(b.rdb, quiet).Acquire(ctx, "settlement:2026-12-02")
		require.NoError(t, err)
		_, ok := redislock.FenceFromContext(plain.Context())
		require.False(t, ok, "no fence without WithFencing")
		require.NoError(t, plain.Release(ctx))
	})
}

func TestFencedLockHidesAnOuterFence(t *testing.T) {
	mini := newMini(t)
	c := redislock.New(mini, quiet)
	ctx := context.Background()
	err := c.RunWithLock(ctx, "outer", func(ctx context.Context) error {
		fence, ok := redislock.FenceFromContext(ctx)
		require.True(t, ok)
		return c.RunWithLock(ctx, "inner", func(ctx context.Context) error {
			inner, ok := redislock.FenceFromContext(ctx)
			require.False(t, ok, "the unfenced inner lock must not report the outer fence %d (got %d)", fence, inner)
			return nil
		})
	}, redislock.WithFencing())
	require.NoError(t, err)
}

func TestKeysOfOneLockShareAClusterSlot(t *testing.T) {
	mini := newMini(t)
	c := redislock.New(mini, quiet)
	ctx := context.Background()
	names := []string{"a", "settlement:2026-12-02", "x}y", "{a}", "a{b}c", "{", "a}", "}{", "{}", "é😀", "with space", string([]byte{0, 1, 255})}
	for _, name := range names {
		for _, prefix := range []string{"lock:", "", "app{", "{x}:", "a}b"} {
			l, err := c.Acquire(ctx, name, redislock.WithKeyPrefix(prefix), redislock.WithFencing(), redislock.WithWatchdog(false))
			if err != nil {
				require.ErrorIs(t, err, redislock.ErrInvalidArgument, "name %q prefix %q", name, prefix)
				continue
			}
			require.Equal(t, clusterSlot(l.Key()), clusterSlot(l.Key()+":fence"),
				"name %q prefix %q: key %q and its fence counter are in different slots", name, prefix, l.Key())
			require.NoError(t, l.Release(ctx))
		}
	}
	for _, bad := range []string{"}", "}job"} {
		_, err := c.Acquire(ctx, bad)
		require.ErrorIs(t, err, redislock.ErrInvalidArgument, "name %q empties the hash tag", bad)
	}
	_, err := c.Acquire(ctx, "job", redislock.WithKeyPrefix("x{}"))
	require.ErrorIs(t, err, redislock.ErrInvalidArgument, "prefix with an empty hash tag")
}

// clusterSlot is Redis Cluster's key slot: CRC16-XMODEM of the hash tag (or
// of the whole key without one) modulo 16384.
func clusterSlot(key string) int {
	if start := indexByte(key, '{'); start >= 0 {
		if end := indexByte(key[start+1:], '}'); end > 0 {
			key = key[start+1 : start+1+end]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}

func indexByte(s string, c byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return i
		}
	}
	return -1
}

func TestEveryKindRunsAfterAScriptFlush(t *testing.T) {
	// Each kind's acquire, extend, TTL and release, and Close's give-back of
	// several locks in one pipeline, with the script cache emptied before
	// each (a restart, SCRIPT FLUSH): each EVALSHA misses, and goes again as
	// EVAL (runScripts).
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		c := redislock.New(b.rdb, quiet, redislock.WithFencing(), redislock.WithWatchdog(false))
		flush := func() { require.NoError(t, b.rdb.ScriptFlush(ctx).Err()) }
		kinds := map[string]func() (*redislock.Lock, error){
			"exclusive": func() (*redislock.Lock, error) { return c.Acquire(ctx, "x") },
			"shared":    func() (*redislock.Lock, error) { return c.AcquireShared(ctx, "s") },
			"semaphore": func() (*redislock.Lock, error) { return c.AcquireSemaphore(ctx, "n", 2) },
			"multi":     func() (*redislock.Lock, error) { return c.AcquireMulti(ctx, []string{"m1", "m2", "m3"}) },
		}
		for kind, acquire := range kinds {
			flush()
			l, err := acquire()
			require.NoError(t, err, kind)
			require.Positive(t, l.Fence(), kind)
			flush()
			require.NoError(t, l.Extend(ctx, time.Minute), kind)
			flush()
			left, err := l.TTL(ctx)
			require.NoError(t, err, kind)
			require.Greater(t, left, 30*time.Second, "%s: extended to a minute", kind)
			flush()
			require.NoError(t, l.Release(ctx), kind)
		}
		var held []*redislock.Lock
		for kind, acquire := range kinds {
			l, err := acquire()
			require.NoError(t, err, kind)
			held = append(held, l)
		}
		flush()
		require.NoError(t, c.Close(ctx), "every lock given back after NOSCRIPT")
		for _, l := range held {
			require.Zero(t, b.rdb.Exists(ctx, l.Key()).Val(), "%s given back", l.Key())
		}
	})
}

func TestClusterSlotMatchesKnownValues(t *testing.T) {
	// Values from the Redis Cluster specification and CLUSTER KEYSLOT.
	require.Equal(t, 12739, clusterSlot("123456789"))
	require.Equal(t, clusterSlot("user1000"), clusterSlot("{user1000}.following"))
	require.Equal(t, clusterSlot("foo{}{bar}"), clusterSlot("foo{}{bar}"))
	require.NotEqual(t, clusterSlot("bar"), clusterSlot("foo{}{bar}"), "an empty tag hashes the whole key")
}

func TestNoscriptRecovery(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		c := redislock.New(b.rdb, quiet, redislock.WithFencing())
		l, err := c.Acquire(ctx, "job")
		require.NoError(t, err)
		require.NoError(t, b.rdb.ScriptFlush(ctx).Err())
		require.NoError(t, l.Extend(ctx, time.Minute), "extend falls back to EVAL after NOSCRIPT")
		_, err = l.TTL(ctx)
		require.NoError(t, err)
		require.NoError(t, b.rdb.ScriptFlush(ctx).Err())
		require.NoError(t, l.Release(ctx))
		require.NoError(t, b.rdb.ScriptFlush(ctx).Err())
		first := l.Fence()
		l, err = c.Acquire(ctx, "job")
		require.NoError(t, err)
		require.Greater(t, l.Fence(), first)
		require.NoError(t, l.Release(ctx))
	})
}

func TestRetryWaitsForTheHolder(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		c := redislock.New(b.rdb, quiet)
		holder, err := c.Acquire(ctx, "job")
		require.NoError(t, err)

		released := make(chan struct{})
		go func() {
			// Wait until the waiter has failed at least once.
			for b.rdb.Exists(ctx, "waiter-tried").Val() == 0 {
				time.Sleep(time.Millisecond)
			}
			_ = holder.Release(ctx)
			close(released)
		}()
		var attempts int
		waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		l, err := c.Acquire(waitCtx, "job",
			redislock.WithRetry(retryFunc(func(attempt int) (time.Duration, bool) {
				attempts = attempt
				b.rdb.Set(ctx, "waiter-tried", 1, 0)
				return 5 * time.Millisecond, true
			})))
		require.NoError(t, err)
		<-released
		require.GreaterOrEqual(t, attempts, 1)
		require.NoError(t, l.Release(ctx))
	})
}

type retryFunc func(int) (time.Duration, bool)

func (f retryFunc) NextBackoff(attempt int) (time.Duration, bool) { return f(attempt) }

func TestRetryNeverSleepsPastTheHoldersTTL(t *testing.T) {
	server := redistest.Start(t)
	rdb := newRedisClient(t, server.Addr())
	ctx := context.Background()
	c := redislock.New(rdb, quiet)
	holder, err := c.Acquire(ctx, "job", redislock.WithTTL(200*time.Millisecond), redislock.WithWatchdog(false))
	require.NoError(t, err)
	defer holder.Release(ctx)

	// A one-hour backoff under a 10s deadline can only succeed if the
	// waiter wakes when the holder's 200ms lease ends.
	waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	l, err := c.Acquire(waitCtx, "job", redislock.WithRetry(redislock.LinearBackoff(time.Hour)))
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
}

func TestWaitingEndsWithTheContext(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		c := redislock.New(b.rdb, quiet)
		holder, err := c.Acquire(ctx, "job")
		require.NoError(t, err)
		defer holder.Release(ctx)

		waitCtx, cancel := context.WithTimeout(ctx, time.Second) // long enough for a loaded machine's first answer: it saw the lock held
		defer cancel()
		_, err = c.Acquire(waitCtx, "job", redislock.WithRetry(redislock.ExponentialBackoff(time.Millisecond, 10*time.Millisecond)))
		require.ErrorIs(t, err, redislock.ErrNotAcquired)
		require.ErrorIs(t, err, context.DeadlineExceeded)

		_, err = c.Acquire(ctx, "job", redislock.WithRetry(redislock.LimitRetry(redislock.LinearBackoff(time.Millisecond), 3)))
		require.ErrorIs(t, err, redislock.ErrNotAcquired)
		require.NotErrorIs(t, err, context.DeadlineExceeded)
	})
}

func TestRetryStrategies(t *testing.T) {
	t.Run("NoRetry gives up at once", func(t *testing.T) {
		_, again := redislock.NoRetry().NextBackoff(1)
		require.False(t, again)
	})
	t.Run("LinearBackoff waits the same each time", func(t *testing.T) {
		for attempt := 1; attempt < 100; attempt++ {
			d, again := redislock.LinearBackoff(7 * time.Millisecond).NextBackoff(attempt)
			require.True(t, again)
			require.Equal(t, 7*time.Millisecond, d)
		}
	})
	t.Run("ExponentialBackoff grows with jitter between min and max", func(t *testing.T) {
		s := redislock.ExponentialBackoff(time.Millisecond, 64*time.Millisecond)
		seen := map[time.Duration]bool{}
		for attempt := 1; attempt < 200; attempt++ {
			d, again := s.NextBackoff(attempt)
			require.True(t, again)
			require.GreaterOrEqual(t, d, time.Millisecond)
			require.LessOrEqual(t, d, 64*time.Millisecond)
			if attempt <= 3 {
				require.LessOrEqual(t, d, time.Millisecond<<(attempt-1), "attempt %d exceeds its ceiling", attempt)
			}
			seen[d] = true
		}
		require.Greater(t, len(seen), 50, "waits are jittered")
	})
	t.Run("an invalid ExponentialBackoff wrapped in a caller's strategy gives up instead of panicking", func(t *testing.T) {
		inner := redislock.ExponentialBackoff(10*time.Millisecond, time.Millisecond)
		require.NotPanics(t, func() {
			_, again := inner.NextBackoff(1)
			require.False(t, again)
		})
		wrapped := retryFunc(func(attempt int) (time.Duration, bool) { return inner.NextBackoff(attempt) })
		rdb := newMini(t)
		holder, err := redislock.New(rdb, quiet).Acquire(context.Background(), "job")
		require.NoError(t, err)
		_, err = redislock.New(rdb, quiet).Acquire(context.Background(), "job", redislock.WithRetry(wrapped))
		require.ErrorIs(t, err, redislock.ErrNotAcquired)
		require.NoError(t, holder.Release(context.Background()))
	})
	t.Run("LimitRetry counts afresh for every call", func(t *testing.T) {
		s := redislock.LimitRetry(redislock.LinearBackoff(time.Millisecond), 2)
		for range 3 { // the same value, reused: no hidden counter
			_, again := s.NextBackoff(1)
			require.True(t, again)
			_, again = s.NextBackoff(2)
			require.True(t, again)
			_, again = s.NextBackoff(3)
			require.False(t, again)
		}
	})
}

func TestMaxHold(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		c := redislock.New(b.rdb, quiet, redislock.WithTTL(time.Second), redislock.WithMaxHold(50*time.Millisecond))
		l, err := c.Acquire(ctx, "job")
		require.NoError(t, err)
		waitDone(t, l.Context(), 10*time.Second)
		lost := requireLost(t, l.Context(), redislock.MaxHoldReached)
		require.GreaterOrEqual(t, lost.HeldFor, 50*time.Millisecond)
		require.NoError(t, l.Release(ctx), "the key is still ours until release")
		require.Zero(t, b.rdb.Exists(ctx, l.Key()).Val())
	})
}

func TestObserverSeesEveryEvent(t *testing.T) {
	server := newMiniServer(t)
	server.SetTime(frozenClock) // fences follow the server's TIME: freeze it
	mini := newRedisClient(t, server.Addr())
	obs := &recordingObserver{}
	c := redislock.New(mini, quiet, redislock.WithObserver(obs), redislock.WithFencing())
	ctx := context.Background()
	l, err := c.Acquire(ctx, "job")
	require.NoError(t, err)
	_, err = c.Acquire(ctx, "job")
	require.ErrorIs(t, err, redislock.ErrNotAcquired)
	require.NoError(t, l.Extend(ctx, time.Minute))
	require.NoError(t, l.Release(ctx))

	l, err = c.Acquire(ctx, "job")
	require.NoError(t, err)
	require.NoError(t, mini.Del(ctx, l.Key()).Err())
	require.ErrorIs(t, l.Extend(ctx, time.Minute), redislock.ErrNotHeld)
	require.ErrorIs(t, l.Release(ctx), redislock.ErrNotHeld)

	obs.mu.Lock()
	defer obs.mu.Unlock()
	require.Equal(t, []string{
		fmt.Sprintf("acquire job acquired=true attempts=1 fence=%d", frozenMicros),
		"acquire job acquired=false attempts=1 fence=0",
		"extend job watchdog=false err=<nil>",
		"release job err=<nil>",
		fmt.Sprintf("acquire job acquired=true attempts=1 fence=%d", frozenMicros+1),
		"lost job reason=expired",
		`extend job watchdog=false err=redislock: lock not held: "job": expired`,
		`release job err=redislock: lock not held: "job": expired`,
	}, obs.events)
}

type recordingObserver struct {
	mu     sync.Mutex
	events []string
}

func (o *recordingObserver) add(format string, args ...any) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.events = append(o.events, fmt.Sprintf(format, args...))
}

func (o *recordingObserver) ObserveAcquire(e redislock.AcquireEvent) {
	o.add("acquire %s acquired=%v attempts=%d fence=%d", e.Name, e.Acquired, e.Attempts, e.Fence)
}

func (o *recordingObserver) ObserveExtend(e redislock.ExtendEvent) {
	o.add("extend %s watchdog=%v err=%v", e.Name, e.Watchdog, e.Err)
}

func (o *recordingObserver) ObserveLost(e redislock.LostEvent) {
	o.add("lost %s reason=%v", e.Name, e.Reason)
}

func (o *recordingObserver) ObserveRelease(e redislock.ReleaseEvent) {
	o.add("release %s err=%v", e.Name, e.Err)
}

func (o *recordingObserver) ObserveFailOpen(e redislock.FailOpenEvent) {
	o.add("fail-open %s", e.Name)
}
