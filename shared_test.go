package redislock_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/internal/faultproxy"
	"github.com/redislock/redislock/internal/redistest"
)

type lockResult struct {
	l   *redislock.Lock
	err error
}

// goAcquire runs acquire on a goroutine of its own; its result comes on
// the returned channel.
func goAcquire(acquire func() (*redislock.Lock, error)) <-chan lockResult {
	got := make(chan lockResult, 1)
	go func() { l, err := acquire(); got <- lockResult{l, err} }()
	return got
}

// receive waits for a result, failing the test after within.
func receive(t *testing.T, got <-chan lockResult, within time.Duration) lockResult {
	t.Helper()
	select {
	case r := <-got:
		return r
	case <-time.After(within):
		t.Fatalf("no result within %v", within)
	}
	return lockResult{}
}

func TestShared(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		wait := redislock.WithRetry(redislock.LinearBackoff(time.Hour))

		t.Run("many shared holders hold at once, each with its own token, and an exclusive caller is refused", func(t *testing.T) {
			c := redislock.New(b.rdb, quiet)
			other := redislock.New(b.rdb, quiet)
			var held []*redislock.Lock
			tokens := map[string]bool{}
			for i := range 5 {
				cl := c
				if i%2 == 1 {
					cl = other
				}
				l, err := cl.AcquireShared(ctx, "many", redislock.WithMetadata("reader"))
				require.NoError(t, err)
				require.True(t, l.Valid())
				require.False(t, tokens[l.Token()])
				tokens[l.Token()] = true
				held = append(held, l)
			}
			info, err := c.Inspect(ctx, "many")
			require.NoError(t, err)
			require.True(t, info.Held)
			require.Equal(t, 5, info.Shared)
			require.Empty(t, info.Metadata)
			require.Positive(t, info.TTL)

			_, err = c.Acquire(ctx, "many")
			require.ErrorIs(t, err, redislock.ErrNotAcquired)
			ttl, err := held[0].TTL(ctx)
			require.NoError(t, err)
			require.Positive(t, ttl)
			require.NoError(t, held[0].Extend(ctx, time.Minute))
			for _, l := range held {
				require.NoError(t, l.Release(ctx))
			}
			require.ErrorIs(t, held[0].Release(ctx), redislock.ErrNotHeld)
			require.Zero(t, b.rdb.Exists(ctx, "lock:{many}", "lock:{many}:s").Val(), "nothing left once every holder left")
			l, err := c.Acquire(ctx, "many")
			require.NoError(t, err)
			require.NoError(t, l.Release(ctx))
		})

		t.Run("an exclusive waiter waits for every share, and is handed the lock by the last", func(t *testing.T) {
			c := redislock.New(b.rdb, quiet)
			r1, err := c.AcquireShared(ctx, "writer")
			require.NoError(t, err)
			r2, err := c.AcquireShared(ctx, "writer")
			require.NoError(t, err)
			waitCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			got := goAcquire(func() (*redislock.Lock, error) { return c.Acquire(waitCtx, "writer", wait) })
			eventually(t, 5*time.Second, func() bool { return b.rdb.ZCard(ctx, "lock:{writer}:q").Val() == 1 }, "writer not queued")

			// Writers are not starved: a new shared caller queues behind it.
			_, err = c.AcquireShared(ctx, "writer")
			require.ErrorIs(t, err, redislock.ErrNotAcquired)

			require.NoError(t, r1.Release(ctx))
			select {
			case r := <-got:
				t.Fatalf("the writer got in with a share still held: %v", r.err)
			default:
			}
			require.NoError(t, r2.Release(ctx))
			r := receive(t, got, 10*time.Second)
			require.NoError(t, r.err)
			info, err := c.Inspect(ctx, "writer")
			require.NoError(t, err)
			require.Zero(t, info.Shared)
			require.NoError(t, r.l.Release(ctx))
		})

		t.Run("shared waiters wait for the exclusive holder, and come in together", func(t *testing.T) {
			c := redislock.New(b.rdb, quiet)
			other := redislock.New(b.rdb, quiet)
			x, err := c.Acquire(ctx, "readers")
			require.NoError(t, err)
			waitCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			var waiters []<-chan lockResult
			for i := range 4 {
				cl := c
				if i%2 == 1 {
					cl = other
				}
				waiters = append(waiters, goAcquire(func() (*redislock.Lock, error) { return cl.AcquireShared(waitCtx, "readers", wait) }))
				eventually(t, 5*time.Second, func() bool { return b.rdb.ZCard(ctx, "lock:{readers}:q").Val() == int64(i+1) }, "reader %d not queued", i)
			}
			require.NoError(t, x.Release(ctx))
			// The release hands the lock to the first; its attempt lets
			// the shared waiters behind it in at once (and wakes them):
			// they do not wait for their next refresh.
			r := receive(t, waiters[0], 10*time.Second)
			require.NoError(t, r.err)
			info, err := c.Inspect(ctx, "readers")
			require.NoError(t, err)
			require.Equal(t, 4, info.Shared, "let in with the first")
			held := []*redislock.Lock{r.l}
			for _, w := range waiters[1:] {
				r := receive(t, w, 10*time.Second)
				require.NoError(t, r.err)
				held = append(held, r.l)
			}
			info, err = c.Inspect(ctx, "readers")
			require.NoError(t, err)
			require.Equal(t, 4, info.Shared, "all in at once")
			for _, l := range held {
				require.NoError(t, l.Context().Err())
				require.NoError(t, l.Release(ctx))
			}
		})

		t.Run("a crashed shared holder's share ends with its lease", func(t *testing.T) {
			c := redislock.New(b.rdb, quiet)
			live, err := c.AcquireShared(ctx, "crash")
			require.NoError(t, err)
			crashed, err := redislock.New(b.rdb, quiet, redislock.WithTTL(200*time.Millisecond), redislock.WithWatchdog(false)).AcquireShared(ctx, "crash")
			require.NoError(t, err)
			if b.mini != nil {
				b.mini.SetTime(time.Now().Add(time.Second)) // the scripts' TIME
				defer b.mini.SetTime(time.Time{})
			}
			eventually(t, 5*time.Second, func() bool {
				info, err := c.Inspect(ctx, "crash")
				return err == nil && info.Shared == 1
			}, "the crashed share is still counted")
			require.ErrorIs(t, crashed.Release(ctx), redislock.ErrNotHeld)
			require.NoError(t, live.Release(ctx))

			// Alone, its lease ends with the key's.
			_, err = redislock.New(b.rdb, quiet, redislock.WithTTL(200*time.Millisecond), redislock.WithWatchdog(false)).AcquireShared(ctx, "crash")
			require.NoError(t, err)
			if b.mini != nil {
				b.mini.FastForward(time.Second)
			}
			var l *redislock.Lock
			eventually(t, 5*time.Second, func() bool {
				l, err = c.Acquire(ctx, "crash")
				return err == nil
			}, "the name was not freed: %v", err)
			require.NoError(t, l.Release(ctx))
		})

		t.Run("a lost share cancels the lock's context with a LostError", func(t *testing.T) {
			// Found at the next extension (every 50 ms); a long TTL, so that
			// a stall cannot end the lease first (reason Unreachable).
			c := redislock.New(b.rdb, quiet, redislock.WithTTL(time.Minute), redislock.WithExtendInterval(50*time.Millisecond))
			l1, err := c.AcquireShared(ctx, "lost")
			require.NoError(t, err)
			l2, err := c.AcquireShared(ctx, "lost")
			require.NoError(t, err)
			info, err := c.Break(ctx, "lost")
			require.NoError(t, err)
			require.Equal(t, 2, info.Shared)
			for _, l := range []*redislock.Lock{l1, l2} {
				waitDone(t, l.Context(), 5*time.Second)
				var lost *redislock.LostError
				require.ErrorAs(t, context.Cause(l.Context()), &lost)
				require.Equal(t, redislock.Expired, lost.Reason)
				require.False(t, l.Valid())
			}
			// Taken by an exclusive holder: reason Taken.
			l3, err := c.AcquireShared(ctx, "lost")
			require.NoError(t, err)
			require.NoError(t, b.rdb.Set(ctx, "lock:{lost}", "SOMEONE", time.Minute).Err())
			waitDone(t, l3.Context(), 5*time.Second)
			var lost *redislock.LostError
			require.ErrorAs(t, context.Cause(l3.Context()), &lost)
			require.Equal(t, redislock.Taken, lost.Reason)
		})

		t.Run("the watchdog keeps a share past its TTL", func(t *testing.T) {
			// Four extensions of a second's TTL, past it; lost only if one is
			// held up for 660 ms (150 ms was lost on a loaded machine).
			clock := &extensionClock{}
			c := redislock.New(b.rdb, quiet, redislock.WithTTL(time.Second), redislock.WithObserver(clock))
			l, err := c.AcquireShared(ctx, "kept")
			require.NoError(t, err)
			eventually(t, 10*time.Second, func() bool { _, n := clock.last(); return n >= 4 || l.Context().Err() != nil }, "not extended")
			require.NoError(t, l.Context().Err())
			ttl, err := l.TTL(ctx)
			require.NoError(t, err)
			require.Positive(t, ttl)
			require.NoError(t, l.Release(ctx))
		})

		t.Run("fences: one per epoch, below the next writer's, never backwards", func(t *testing.T) {
			c := redislock.New(b.rdb, quiet, redislock.WithFencing())
			w1, err := c.Acquire(ctx, "fenced")
			require.NoError(t, err)
			require.NoError(t, w1.Release(ctx))
			r1, err := c.AcquireShared(ctx, "fenced")
			require.NoError(t, err)
			r2, err := c.AcquireShared(ctx, "fenced")
			require.NoError(t, err)
			require.Greater(t, r1.Fence(), w1.Fence())
			require.Equal(t, r1.Fence(), r2.Fence(), "one epoch, one fence")
			fence, ok := redislock.FenceFromContext(r2.Context())
			require.True(t, ok)
			require.Equal(t, r1.Fence(), fence)
			waitCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			got := goAcquire(func() (*redislock.Lock, error) { return c.Acquire(waitCtx, "fenced", wait) })
			eventually(t, 5*time.Second, func() bool { return b.rdb.ZCard(ctx, "lock:{fenced}:q").Val() == 1 }, "writer not queued")
			require.NoError(t, r1.Release(ctx))
			require.NoError(t, r2.Release(ctx))
			r := receive(t, got, 10*time.Second)
			require.NoError(t, r.err)
			require.Greater(t, r.l.Fence(), r2.Fence(), "the next writer's fence is above the readers'")
			require.NoError(t, r.l.Release(ctx))
			r3, err := c.AcquireShared(ctx, "fenced")
			require.NoError(t, err)
			require.Greater(t, r3.Fence(), r.l.Fence(), "a new epoch")
			require.NoError(t, r3.Release(ctx))

			// A fenced holder joining an unfenced epoch takes a fence then.
			plain, err := redislock.New(b.rdb, quiet).AcquireShared(ctx, "fenced")
			require.NoError(t, err)
			require.Zero(t, plain.Fence())
			r4, err := c.AcquireShared(ctx, "fenced")
			require.NoError(t, err)
			require.Greater(t, r4.Fence(), r3.Fence())
			r5, err := c.AcquireShared(ctx, "fenced")
			require.NoError(t, err)
			require.Equal(t, r4.Fence(), r5.Fence())
			for _, l := range []*redislock.Lock{plain, r4, r5} {
				require.NoError(t, l.Release(ctx))
			}
		})

		t.Run("a shared waiter that gives up leaves nothing behind", func(t *testing.T) {
			c := redislock.New(b.rdb, quiet)
			x, err := c.Acquire(ctx, "giveup")
			require.NoError(t, err)
			waitCtx, cancel := context.WithTimeout(ctx, time.Second) // long enough for a loaded machine's first answer: it saw the lock held
			defer cancel()
			_, err = c.AcquireShared(waitCtx, "giveup", wait)
			require.ErrorIs(t, err, redislock.ErrNotAcquired)
			require.ErrorIs(t, err, context.DeadlineExceeded)
			eventually(t, 5*time.Second, func() bool { return b.rdb.Exists(ctx, "lock:{giveup}:q").Val() == 0 }, "place left in the queue")
			require.NoError(t, x.Release(ctx))
			require.Zero(t, b.rdb.Exists(ctx, "lock:{giveup}", "lock:{giveup}:s").Val(), "no share held")
			require.NoError(t, c.Close(ctx))
		})

		t.Run("a lock handed to a shared waiter that left goes on to the next", func(t *testing.T) {
			c := redislock.New(b.rdb, quiet)
			x, err := c.Acquire(ctx, "passon")
			require.NoError(t, err)
			// A shared waiter of another process, queued first, then gone
			// (its place has not lapsed yet); an exclusive waiter behind it.
			now := time.Now().UnixMilli()
			if b.mini != nil {
				b.mini.SetTime(time.Now())
				defer b.mini.SetTime(time.Time{})
			}
			require.NoError(t, b.rdb.ZAdd(ctx, "lock:{passon}:q", redis.Z{Score: float64(now - 10), Member: "AAAAAAAAAA.sGONE"}).Err())
			require.NoError(t, b.rdb.ZAdd(ctx, "lock:{passon}:qx", redis.Z{Score: float64(now + 60_000), Member: "AAAAAAAAAA.sGONE"}).Err())
			waitCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			got := goAcquire(func() (*redislock.Lock, error) { return c.Acquire(waitCtx, "passon", wait) })
			eventually(t, 5*time.Second, func() bool { return b.rdb.ZCard(ctx, "lock:{passon}:q").Val() == 2 }, "writer not queued")
			require.NoError(t, x.Release(ctx))
			// Handed to the shared waiter as a share: the marker, and the
			// waiter among the shared holders.
			require.Equal(t, "*shared*", b.rdb.Get(ctx, "lock:{passon}").Val(), "handed to the shared waiter")
			require.NoError(t, b.rdb.ZScore(ctx, "lock:{passon}:s", "AAAAAAAAAA.sGONE").Err(), "handed to the shared waiter")
			// Its Client's janitor gives it back as a shared waiter: the
			// shared release script with the waiter's token.
			require.NoError(t, redislock.GiveBackShared(ctx, b.rdb, "lock:{passon}", "AAAAAAAAAA.sGONE"))
			r := receive(t, got, 10*time.Second)
			require.NoError(t, r.err)
			require.NoError(t, r.l.Release(ctx))
		})

		t.Run("a shared hold and a semaphore of one name refuse each other", func(t *testing.T) {
			c := redislock.New(b.rdb, quiet)
			s, err := c.AcquireSemaphore(ctx, "mixed", 2)
			require.NoError(t, err)
			_, err = c.AcquireShared(ctx, "mixed")
			require.ErrorContains(t, err, "WRONGTYPE")
			require.ErrorIs(t, err, redislock.ErrNotALock)
			require.NoError(t, s.Release(ctx))
			l, err := c.AcquireShared(ctx, "mixed")
			require.NoError(t, err)
			_, err = c.AcquireSemaphore(ctx, "mixed", 2)
			require.ErrorContains(t, err, "WRONGTYPE")
			require.ErrorIs(t, err, redislock.ErrNotALock)
			require.NoError(t, l.Release(ctx))
		})
	})
}

// TestSharedWriterIsNotStarved: with a stream of overlapping readers that
// never leaves the name free (each stays until the next one is in, or
// for at most maxStay), a queued writer still gets in.
func TestSharedWriterIsNotStarved(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		c := redislock.New(b.rdb, quiet)
		readers := redislock.New(b.rdb, quiet)
		const maxStay = 200 * time.Millisecond
		stop := make(chan struct{})
		var wg sync.WaitGroup
		var inside, entered atomic.Int64
		for range 4 {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
					l, err := readers.AcquireShared(waitCtx, "starve", redislock.WithRetry(redislock.LinearBackoff(10*time.Millisecond)))
					cancel()
					if err != nil {
						continue
					}
					inside.Add(1)
					me := entered.Add(1)
					// Stay until a later reader is in: the name is never
					// free. (Polling, bounded by maxStay.)
					for until := time.Now().Add(maxStay); entered.Load() == me && time.Now().Before(until); {
						time.Sleep(time.Millisecond)
					}
					inside.Add(-1)
					_ = l.Release(ctx)
				}
			})
		}
		eventually(t, 10*time.Second, func() bool { return entered.Load() >= 20 }, "the readers do not get in")
		start := time.Now()
		waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		w, err := c.Acquire(waitCtx, "starve", redislock.WithRetry(redislock.LinearBackoff(10*time.Millisecond)))
		require.NoError(t, err, "the writer was starved")
		t.Logf("the writer waited %v", time.Since(start))
		require.Zero(t, inside.Load(), "no reader inside with the writer")
		require.NoError(t, w.Release(ctx))
		close(stop)
		wg.Wait()
	})
}

func TestSharedBadInput(t *testing.T) {
	rdb := newMini(t)
	c := redislock.New(rdb, quiet)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"an empty name", func() error { _, err := c.AcquireShared(ctx, ""); return err }},
		{"a name that breaks the hash slot", func() error { _, err := c.AcquireShared(ctx, "}x"); return err }},
		{"a nil context", func() error {
			var nilCtx context.Context
			_, err := c.AcquireShared(nilCtx, "x")
			return err
		}},
		{"WithFailOpen", func() error { _, err := c.AcquireShared(ctx, "x", redislock.WithFailOpen()); return err }},
		{"a bad TTL", func() error { _, err := c.AcquireShared(ctx, "x", redislock.WithTTL(time.Microsecond)); return err }},
		{"a quorum Client", func() error {
			q, err := redislock.NewQuorum([]redis.UniversalClient{newMini(t), newMini(t), newMini(t)}, quiet)
			require.NoError(t, err)
			_, err = q.AcquireShared(ctx, "x")
			return err
		}},
	} {
		t.Run(tc.name+" is an invalid argument", func(t *testing.T) {
			require.ErrorIs(t, tc.call(), redislock.ErrInvalidArgument)
		})
	}
	keys, err := rdb.Keys(ctx, "*").Result()
	require.NoError(t, err)
	require.Empty(t, keys, "nothing was sent")
}

// A shared attempt that timed out may still land and take a share under
// a token nobody has: the janitor gives it back once it landed.
func TestASharedAttemptThatTimedOutIsGivenBack(t *testing.T) {
	t.Parallel()
	requireALateAttemptIsGivenBack(t, func(ctx context.Context, c *redislock.Client) (*redislock.Lock, error) {
		return c.AcquireShared(ctx, "late")
	}, func(ctx context.Context, c *redislock.Client) (*redislock.Lock, error) {
		return c.Acquire(ctx, "late") // a writer: no share left
	}, "lock:{late}", "lock:{late}:s")
}

// A reply after the share's safe deadline gives the share back.
func TestASharedReplyAfterTheSafeDeadlineGivesTheShareBack(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		proxy := newProxy(t, b.rdb.Options().Addr)
		c := redislock.New(newRedisClient(t, proxy.Addr()), quiet, redislock.WithTTL(50*time.Millisecond))
		warm, err := c.AcquireShared(ctx, "slow", redislock.WithTTL(time.Minute)) // loads the scripts; a 50 ms lease could end before its reply, under load
		require.NoError(t, err)
		require.NoError(t, warm.Release(ctx))
		proxy.SetDelay(60 * time.Millisecond)
		proxy.SetMode(faultproxy.Delay)
		l, err := c.AcquireShared(ctx, "slow")
		proxy.SetMode(faultproxy.Pass)
		require.Nil(t, l)
		require.ErrorIs(t, err, redislock.ErrNotAcquired)
		require.Contains(t, err.Error(), "lease ran out before the reply arrived")
		// Its lease has run out: nothing of it is left (miniredis expires
		// keys when its clock is moved).
		if b.mini != nil {
			b.mini.FastForward(time.Second)
		}
		eventually(t, 5*time.Second, func() bool { return b.rdb.Exists(ctx, "lock:{slow}", "lock:{slow}:s").Val() == 0 }, "the share is still there")
	})
}

func TestSharedOnCluster(t *testing.T) {
	t.Parallel()
	cluster := redistest.SharedCluster(t)
	rdb := cluster.Client(t)
	ctx := context.Background()
	c := redislock.New(rdb, quiet, redislock.WithFencing()) // the default TTL: a stall cannot lose a hold
	for _, name := range namesOnEachPrimary(t, cluster, "shared") {
		t.Run("readers and a writer on the primary of "+name, func(t *testing.T) {
			r1, err := c.AcquireShared(ctx, name)
			require.NoError(t, err)
			r2, err := c.AcquireShared(ctx, name)
			require.NoError(t, err)
			require.Equal(t, r1.Fence(), r2.Fence())
			waitCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			writer := goAcquire(func() (*redislock.Lock, error) {
				return c.Acquire(waitCtx, name, redislock.WithRetry(redislock.LinearBackoff(time.Hour)))
			})
			eventually(t, 5*time.Second, func() bool { return rdb.ZCard(ctx, "lock:{"+name+"}:q").Val() == 1 }, "writer not queued")
			reader := goAcquire(func() (*redislock.Lock, error) {
				return c.AcquireShared(waitCtx, name, redislock.WithRetry(redislock.LinearBackoff(time.Hour)))
			})
			eventually(t, 5*time.Second, func() bool { return rdb.ZCard(ctx, "lock:{"+name+"}:q").Val() == 2 }, "reader not queued behind the writer")
			require.NoError(t, r1.Release(ctx))
			require.NoError(t, r2.Release(ctx))
			w := receive(t, writer, 10*time.Second)
			require.NoError(t, w.err)
			require.Greater(t, w.l.Fence(), r2.Fence())
			require.NoError(t, w.l.Release(ctx)) // hands over to the reader, announced on its shard
			r := receive(t, reader, 10*time.Second)
			require.NoError(t, r.err)
			require.Greater(t, r.l.Fence(), w.l.Fence())
			require.NoError(t, r.l.Release(ctx))
			require.Zero(t, rdb.Exists(ctx, "lock:{"+name+"}").Val())
		})
	}
}

// TestSharedClose: Close gives back the shares the Client holds, and a
// closed Client refuses.
func TestSharedClose(t *testing.T) {
	rdb := newMini(t)
	ctx := context.Background()
	c := redislock.New(rdb, quiet)
	l, err := c.AcquireShared(ctx, "closing")
	require.NoError(t, err)
	require.NoError(t, c.Close(ctx))
	require.ErrorIs(t, context.Cause(l.Context()), redislock.ErrClosed)
	require.Zero(t, rdb.Exists(ctx, "lock:{closing}", "lock:{closing}:s").Val(), "Close gave the share back")
	_, err = c.AcquireShared(ctx, "closing")
	require.ErrorIs(t, err, redislock.ErrClosed)
}

// The semaphores' line in docs/security.md (with the channels and
// Inspect's +zcount) is enough for every shared call.
func TestSharedACL(t *testing.T) {
	server := redistest.Start(t)
	admin := newRedisClient(t, server.Addr())
	ctx := context.Background()
	rules := append(append([]string{"~lock:*", "resetchannels", "&lock:*", "+publish", "+subscribe", "+unsubscribe", "+zcount"}, minimalACLCommands...), semaphoreACLCommands...)
	rdb := setACLUser(t, admin, "shared", rules...)
	c := redislock.New(rdb, quiet, redislock.WithFencing())
	x, err := c.Acquire(ctx, "acl")
	require.NoError(t, err)
	waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	got := goAcquire(func() (*redislock.Lock, error) {
		return c.AcquireShared(waitCtx, "acl", redislock.WithRetry(redislock.LinearBackoff(time.Hour)))
	})
	eventually(t, 5*time.Second, func() bool { return admin.ZCard(ctx, "lock:{acl}:q").Val() == 1 }, "not queued")
	require.NoError(t, x.Release(ctx))
	r := receive(t, got, 5*time.Second)
	require.NoError(t, r.err)
	_, err = r.l.TTL(ctx)
	require.NoError(t, err)
	require.NoError(t, r.l.Extend(ctx, time.Minute))
	info, err := c.Inspect(ctx, "acl")
	require.NoError(t, err)
	require.Equal(t, 1, info.Shared)
	require.NoError(t, r.l.Release(ctx))
	require.NoError(t, c.Close(ctx))
}
