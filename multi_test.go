package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/internal/redistest"
)

func TestAcquireMulti(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()

		t.Run("all names or none: a failed AcquireMulti leaves no key nobody holds", func(t *testing.T) {
			c := redislock.New(b.rdb, quiet)
			other, err := c.Acquire(ctx, "none:b")
			require.NoError(t, err)
			_, err = c.AcquireMulti(ctx, []string{"none:a", "none:b", "none:c"})
			require.ErrorIs(t, err, redislock.ErrNotAcquired)
			require.ErrorContains(t, err, `"none:b" is held by another holder`)
			require.ErrorContains(t, err, "after 1 attempt and 0 waits", "counted in good English")
			require.Zero(t, b.rdb.Exists(ctx, "lock:{none:a}", "lock:{none:c}").Val(), "nothing taken for a failed call")
			require.Equal(t, other.Token(), b.rdb.Get(ctx, "lock:{none:b}").Val(), "the holder keeps its lock")

			require.NoError(t, other.Release(ctx))
			l, err := c.AcquireMulti(ctx, []string{"none:a", "none:b", "none:c"})
			require.NoError(t, err)
			for _, name := range []string{"none:a", "none:b", "none:c"} {
				require.Equal(t, l.Token(), b.rdb.Get(ctx, "lock:{"+name+"}").Val(), "%s holds the lock's token", name)
				_, err := c.Acquire(ctx, name)
				require.ErrorIs(t, err, redislock.ErrNotAcquired, "%s is held for Acquire too", name)
			}
			require.Equal(t, "none:a", l.Name())
			require.Equal(t, "lock:{none:a}", l.Key())
			require.True(t, l.Valid())
			require.NoError(t, l.Release(ctx))
			require.ErrorIs(t, l.Release(ctx), redislock.ErrNotHeld)
			require.Zero(t, b.rdb.Exists(ctx, "lock:{none:a}", "lock:{none:b}", "lock:{none:c}").Val(), "released, every name")
			require.ErrorIs(t, context.Cause(l.Context()), redislock.ErrReleased)
		})

		t.Run("two multi locks sharing a name exclude each other, disjoint ones do not", func(t *testing.T) {
			c := redislock.New(b.rdb, quiet)
			first, err := c.AcquireMulti(ctx, []string{"share:a", "share:b"})
			require.NoError(t, err)
			_, err = c.AcquireMulti(ctx, []string{"share:c", "share:b"})
			require.ErrorIs(t, err, redislock.ErrNotAcquired)
			require.Zero(t, b.rdb.Exists(ctx, "lock:{share:c}").Val())
			disjoint, err := c.AcquireMulti(ctx, []string{"share:c", "share:d"})
			require.NoError(t, err)
			require.NoError(t, first.Release(ctx))
			require.NoError(t, disjoint.Release(ctx))
		})

		t.Run("each name gets its own fence from its own counter; Fence is the first name's", func(t *testing.T) {
			c := redislock.New(b.rdb, quiet, redislock.WithFencing())
			// Move b's counter well ahead of the others.
			require.NoError(t, b.rdb.Set(ctx, "lock:{fence:b}:fence", "9000000000000000", 0).Err())
			names := []string{"fence:c", "fence:a", "fence:b"} // not sorted: Fence is names[0]'s
			l, err := c.AcquireMulti(ctx, names)
			require.NoError(t, err)
			for _, name := range names {
				fence, ok := l.FenceOf(name)
				require.True(t, ok, name)
				require.Equal(t, b.rdb.Get(ctx, "lock:{"+name+"}:fence").Val(), strconv.FormatInt(fence, 10), "%s's fence is its counter's", name)
			}
			fb, _ := l.FenceOf("fence:b")
			require.EqualValues(t, 9000000000000001, fb)
			fc, _ := l.FenceOf("fence:c")
			require.Equal(t, fc, l.Fence())
			fromCtx, ok := redislock.FenceFromContext(l.Context())
			require.True(t, ok)
			require.Equal(t, fc, fromCtx)
			_, ok = l.FenceOf("fence:x")
			require.False(t, ok, "not one of the lock's names")
			require.NoError(t, l.Release(ctx))

			again, err := c.AcquireMulti(ctx, names)
			require.NoError(t, err)
			for _, name := range names {
				before, _ := l.FenceOf(name)
				after, _ := again.FenceOf(name)
				require.Greater(t, after, before, "%s's fences never go backwards", name)
			}
			require.NoError(t, again.Release(ctx))

			plain, err := redislock.New(b.rdb, quiet).AcquireMulti(ctx, names)
			require.NoError(t, err)
			_, ok = plain.FenceOf("fence:a")
			require.False(t, ok, "no fence without WithFencing")
			require.NoError(t, plain.Release(ctx))
		})

		t.Run("metadata goes with every name, and Inspect of any shows the holder", func(t *testing.T) {
			c := redislock.New(b.rdb, quiet)
			l, err := c.AcquireMulti(ctx, []string{"meta:a", "meta:b"}, redislock.WithMetadata("host=web-3 pid=42"))
			require.NoError(t, err)
			for _, name := range []string{"meta:a", "meta:b"} {
				info, err := c.Inspect(ctx, name)
				require.NoError(t, err)
				require.True(t, info.Held)
				require.Equal(t, "host=web-3 pid=42", info.Metadata)
				require.Positive(t, info.TTL)
			}
			require.NoError(t, l.Release(ctx))
		})

		t.Run("Extend and TTL cover every name", func(t *testing.T) {
			c := redislock.New(b.rdb, quiet, redislock.WithTTL(10*time.Second))
			names := []string{"ext:a", "ext:b", "ext:c"}
			l, err := c.AcquireMulti(ctx, names)
			require.NoError(t, err)
			require.NoError(t, l.Extend(ctx, time.Minute))
			for _, name := range names {
				require.Greater(t, b.rdb.PTTL(ctx, "lock:{"+name+"}").Val(), 50*time.Second, name)
			}
			require.NoError(t, b.rdb.PExpire(ctx, "lock:{ext:b}", 20*time.Second).Err())
			ttl, err := l.TTL(ctx)
			require.NoError(t, err)
			require.LessOrEqual(t, ttl, 20*time.Second, "the shortest lease among the names")
			require.NoError(t, b.rdb.Set(ctx, "lock:{ext:c}", "someone else", 0).Err())
			_, err = l.TTL(ctx)
			require.ErrorIs(t, err, redislock.ErrNotHeld)
			require.ErrorContains(t, err, `"ext:c"`)
			require.ErrorIs(t, l.Extend(ctx, time.Minute), redislock.ErrNotHeld)
			var lost *redislock.LostError
			require.ErrorAs(t, context.Cause(l.Context()), &lost)
			require.Equal(t, "ext:c", lost.Name)
			require.Equal(t, redislock.Taken, lost.Reason)
			require.Equal(t, "someone else", b.rdb.Get(ctx, "lock:{ext:c}").Val())
		})

		for _, tc := range []struct {
			how    string
			reason redislock.LostReason
			break_ func(key string)
		}{
			{"deleted", redislock.Expired, func(key string) { require.NoError(t, b.rdb.Del(ctx, key).Err()) }},
			{"taken by another token", redislock.Taken, func(key string) { require.NoError(t, b.rdb.Set(ctx, key, "another", 0).Err()) }},
		} {
			t.Run("one name "+tc.how+": the watchdog loses the whole lock, with a LostError naming it", func(t *testing.T) {
				// Found at the next extension (every 100 ms); a long TTL,
				// that no stall runs out (the other names would then lapse).
				c := redislock.New(b.rdb, quiet, redislock.WithTTL(time.Minute), redislock.WithExtendInterval(100*time.Millisecond))
				names := []string{"lose:a", "lose:b", "lose:c"}
				l, err := c.AcquireMulti(ctx, names)
				require.NoError(t, err)
				tc.break_("lock:{lose:b}")
				waitDone(t, l.Context(), 10*time.Second) // the watchdog extends every 100ms
				var lost *redislock.LostError
				require.ErrorAs(t, context.Cause(l.Context()), &lost)
				require.Equal(t, "lose:b", lost.Name)
				require.Equal(t, tc.reason, lost.Reason)
				require.False(t, l.Valid())
				// Release still gives back the names that are ours.
				require.ErrorIs(t, l.Release(ctx), redislock.ErrNotHeld)
				require.Zero(t, b.rdb.Exists(ctx, "lock:{lose:a}", "lock:{lose:c}").Val())
				require.NoError(t, b.rdb.Del(ctx, "lock:{lose:b}").Err())
			})
		}

		t.Run("a waiter is woken by the release of the name that kept it out", func(t *testing.T) {
			c := redislock.New(b.rdb, quiet)
			holder, err := c.AcquireMulti(ctx, []string{"wake:a", "wake:b"})
			require.NoError(t, err)
			type result struct {
				l   *redislock.Lock
				err error
			}
			got := make(chan result, 1)
			waitCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			// An hour's backoff and a 30s lease: only the release's
			// announcement can wake it in time.
			wait := redislock.WithRetry(redislock.LinearBackoff(time.Hour))
			go func() {
				l, err := redislock.New(b.rdb, quiet).AcquireMulti(waitCtx, []string{"wake:c", "wake:b"}, wait)
				got <- result{l, err}
			}()
			eventually(t, 5*time.Second, func() bool {
				return b.rdb.PubSubNumSub(ctx, "lock:{wake:b}:released").Val()["lock:{wake:b}:released"] == 1
			}, "the waiter does not listen to wake:b")
			start := time.Now()
			require.NoError(t, holder.Release(ctx))
			r := <-got
			require.NoError(t, r.err)
			require.Less(t, time.Since(start), 10*time.Second)
			require.Equal(t, r.l.Token(), b.rdb.Get(ctx, "lock:{wake:b}").Val())
			require.NoError(t, r.l.Release(ctx))
		})

		t.Run("a waiter that gives up leaves nothing held", func(t *testing.T) {
			c := redislock.New(b.rdb, quiet)
			holder, err := c.Acquire(ctx, "giveup:z")
			require.NoError(t, err)
			waitCtx, cancel := context.WithTimeout(ctx, time.Second) // long enough for a loaded machine's first answer: it saw the lock held
			defer cancel()
			_, err = c.AcquireMulti(waitCtx, []string{"giveup:a", "giveup:z"}, redislock.WithRetry(redislock.LinearBackoff(10*time.Millisecond)))
			require.ErrorIs(t, err, redislock.ErrNotAcquired)
			require.ErrorIs(t, err, context.DeadlineExceeded)
			require.Zero(t, b.rdb.Exists(ctx, "lock:{giveup:a}").Val())
			require.NoError(t, holder.Release(ctx))
		})

		t.Run("Close releases a multi lock and cancels its context", func(t *testing.T) {
			c := redislock.New(b.rdb, quiet)
			l, err := c.AcquireMulti(ctx, []string{"close:a", "close:b"})
			require.NoError(t, err)
			require.NoError(t, c.Close(ctx))
			require.ErrorIs(t, context.Cause(l.Context()), redislock.ErrClosed)
			require.Zero(t, b.rdb.Exists(ctx, "lock:{close:a}", "lock:{close:b}").Val())
		})

		t.Run("a name holding another type is an error, and nothing is left held", func(t *testing.T) {
			require.NoError(t, b.rdb.LPush(ctx, "lock:{type:b}", "x").Err())
			_, err := redislock.New(b.rdb, quiet).AcquireMulti(ctx, []string{"type:a", "type:b"})
			require.ErrorContains(t, err, "WRONGTYPE")
			require.ErrorIs(t, err, redislock.ErrNotALock)
			require.NotErrorIs(t, err, redislock.ErrNotAcquired)
			require.Zero(t, b.rdb.Exists(ctx, "lock:{type:a}").Val())
		})
	})
}

func TestAcquireMultiRefusesBadInput(t *testing.T) {
	rdb := newMini(t)
	c := redislock.New(rdb, quiet)
	ctx := context.Background()
	tooMany := make([]string, redislock.MaxMultiNames+1)
	for i := range tooMany {
		tooMany[i] = "n" + strconv.Itoa(i)
	}
	for _, tc := range []struct {
		what  string
		ctx   context.Context
		names []string
		opts  []redislock.Option
		msg   string
	}{
		{"a nil context", nil, []string{"a"}, nil, "nil context"},
		{"no names", ctx, nil, nil, "at least one name"},
		{"an empty list", ctx, []string{}, nil, "at least one name"},
		{"an empty name", ctx, []string{"a", ""}, nil, "names[1] is empty"},
		{"a name given twice", ctx, []string{"a", "b", "a"}, nil, `"a" is given twice (names[0] and names[2])`},
		{"too many names", ctx, tooMany, nil, "1001 names is over the 1000-name limit"},
		{"a name Acquire refuses", ctx, []string{"a", "}b"}, nil, "names[1]"},
		{"WithFailOpen", ctx, []string{"a"}, []redislock.Option{redislock.WithFailOpen()}, "WithFailOpen"},
		{"a bad option", ctx, []string{"a"}, []redislock.Option{redislock.WithTTL(time.Microsecond)}, "TTL"},
	} {
		t.Run(tc.what+" is an invalid argument, with nothing sent", func(t *testing.T) {
			l, err := c.AcquireMulti(tc.ctx, tc.names, tc.opts...)
			require.Nil(t, l)
			require.ErrorIs(t, err, redislock.ErrInvalidArgument)
			require.ErrorContains(t, err, tc.msg)
			require.Empty(t, rdb.Keys(ctx, "*").Val())
		})
	}
	t.Run("a quorum Client refuses it, saying so", func(t *testing.T) {
		q, err := redislock.NewQuorum([]redis.UniversalClient{newMini(t), newMini(t), newMini(t)}, quiet)
		require.NoError(t, err)
		_, err = q.AcquireMulti(ctx, []string{"a", "b"})
		require.ErrorIs(t, err, redislock.ErrInvalidArgument)
		require.ErrorContains(t, err, "quorum")
	})
	t.Run("a Ring's Client refuses it, saying so, with nothing sent; Acquire it serves", func(t *testing.T) {
		mini := newMiniServer(t)
		ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"one": mini.Addr()}})
		t.Cleanup(func() { _ = ring.Close() })
		c := redislock.New(ring, quiet)
		_, err := c.AcquireMulti(ctx, []string{"a", "b"})
		require.ErrorIs(t, err, redislock.ErrInvalidArgument)
		require.ErrorContains(t, err, "AcquireMulti needs one server, Sentinel or a Cluster: a Ring's shards are independent servers")
		require.Empty(t, mini.Keys())
		l, err := c.Acquire(ctx, "a")
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))
	})
	t.Run("methods of a nil Lock do not panic", func(t *testing.T) {
		var l *redislock.Lock
		_, ok := l.FenceOf("a")
		require.False(t, ok)
	})
	t.Run("FenceOf of a single lock is its Fence for its own name", func(t *testing.T) {
		l, err := redislock.New(rdb, quiet, redislock.WithFencing()).Acquire(ctx, "single")
		require.NoError(t, err)
		f, ok := l.FenceOf("single")
		require.True(t, ok)
		require.Equal(t, l.Fence(), f)
		_, ok = l.FenceOf("other")
		require.False(t, ok)
		require.NoError(t, l.Release(ctx))
	})
}

// multiNames returns n lock names that land in n different hash slots.
func multiNames(prefix string, n int) []string {
	var names []string
	slots := map[int]bool{}
	for i := 0; len(names) < n; i++ {
		name := fmt.Sprintf("%s:%d", prefix, i)
		if slot := clusterSlot("lock:{" + name + "}"); !slots[slot] {
			slots[slot] = true
			names = append(names, name)
		}
	}
	return names
}

// bySlot sorts names as AcquireMulti takes them on a cluster.
func bySlot(names []string) []string {
	sorted := slices.Clone(names)
	slices.SortFunc(sorted, func(a, b string) int {
		if d := clusterSlot("lock:{"+a+"}") - clusterSlot("lock:{"+b+"}"); d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	return sorted
}

var errBothInside = errors.New("two holders inside one name at once")

// TestAcquireMultiOnCluster runs on a real Redis Cluster of its own (3
// primaries, 3 replicas), with names spread over slots and nodes.
func TestAcquireMultiOnCluster(t *testing.T) {
	t.Parallel()
	cluster := redistest.SharedCluster(t)
	rdb := cluster.Client(t)
	ctx := context.Background()
	flush := func(t *testing.T) {
		t.Cleanup(func() {
			for _, p := range cluster.Primaries(t) {
				require.NoError(t, newRedisClient(t, p.Addr).FlushAll(ctx).Err())
			}
		})
	}

	t.Run("RunWithLockMulti over every primary: every name held while fn runs, all released after", func(t *testing.T) {
		flush(t)
		names := namesOnEachPrimary(t, cluster, "run")
		c := redislock.New(rdb, quiet, redislock.WithFencing())
		err := c.RunWithLockMulti(ctx, names, func(ctx context.Context) error {
			l, ok := redislock.LockFromContext(ctx)
			require.True(t, ok)
			for _, name := range names {
				require.Equal(t, l.Token(), rdb.Get(ctx, "lock:{"+name+"}").Val(), name)
				fence, ok := l.FenceOf(name)
				require.True(t, ok)
				require.Positive(t, fence)
			}
			return nil
		})
		require.NoError(t, err)
		for _, name := range names {
			require.Zero(t, rdb.Exists(ctx, "lock:{"+name+"}").Val(), name)
		}
	})

	t.Run("names over every primary, two sharing a slot: taken, fenced, extended and released together", func(t *testing.T) {
		flush(t)
		names := append(namesOnEachPrimary(t, cluster, "spread"), siblingNames(t, clusterSlot("lock:{spread:0}"), 2)...)
		clock := &extensionClock{}
		// A 1 s lease: room for this test's own round trips on a loaded
		// machine (a full -race run) between the watchdog's extensions.
		c := redislock.New(rdb, quiet, redislock.WithFencing(), redislock.WithTTL(time.Second), redislock.WithObserver(clock))
		l, err := c.AcquireMulti(ctx, names)
		require.NoError(t, err)
		for _, name := range names {
			key := "lock:{" + name + "}"
			owner := newRedisClient(t, cluster.Owner(t, clusterSlot(key)).Addr)
			require.Equal(t, l.Token(), owner.Get(ctx, key).Val(), "%s on its own node (the lock's context: %v)", name, context.Cause(l.Context()))
			fence, ok := l.FenceOf(name)
			require.True(t, ok)
			require.Equal(t, strconv.FormatInt(fence, 10), owner.Get(ctx, key+":fence").Val())
		}
		eventually(t, 10*time.Second, func() bool { _, n := clock.last(); return n >= 4 }, "the watchdog extended the lock")
		require.NoError(t, l.Context().Err(), "still held, past its 1s lease")
		ttl, err := l.TTL(ctx)
		require.NoError(t, err)
		require.Positive(t, ttl)
		require.NoError(t, l.Release(ctx))
		for _, name := range names {
			require.Zero(t, rdb.Exists(ctx, "lock:{"+name+"}").Val(), name)
		}
	})

	t.Run("a name found held in a later slot: what the earlier slots took is given back", func(t *testing.T) {
		flush(t)
		names := bySlot(multiNames("partial", 5))
		c := redislock.New(rdb, quiet)
		last, err := c.Acquire(ctx, names[4])
		require.NoError(t, err)
		_, err = c.AcquireMulti(ctx, names)
		require.ErrorIs(t, err, redislock.ErrNotAcquired)
		require.ErrorContains(t, err, strconv.Quote(names[4]))
		for _, name := range names[:4] {
			require.Zero(t, rdb.Exists(ctx, "lock:{"+name+"}").Val(), "%s given back", name)
		}
		require.NoError(t, last.Release(ctx))
	})

	t.Run("one name deleted: the whole lock is lost, naming it", func(t *testing.T) {
		flush(t)
		names := multiNames("lose", 3)
		c := redislock.New(rdb, quiet, redislock.WithTTL(time.Minute), redislock.WithExtendInterval(100*time.Millisecond))
		l, err := c.AcquireMulti(ctx, names)
		require.NoError(t, err)
		require.NoError(t, rdb.Del(ctx, "lock:{"+names[1]+"}").Err())
		waitDone(t, l.Context(), 10*time.Second)
		var lost *redislock.LostError
		require.ErrorAs(t, context.Cause(l.Context()), &lost)
		require.Equal(t, names[1], lost.Name)
		require.ErrorIs(t, l.Release(ctx), redislock.ErrNotHeld)
		for _, name := range names {
			require.Zero(t, rdb.Exists(ctx, "lock:{"+name+"}").Val(), name)
		}
	})

	t.Run("two callers with overlapping sets in reverse order never deadlock, and never hold a name together", func(t *testing.T) {
		flush(t)
		names := multiNames("reverse", 4)
		reversed := slices.Clone(names)
		slices.Reverse(reversed)
		sets := [][]string{names, reversed, append(slices.Clone(names[2:]), "reverse:other")}
		var inside atomic.Int32 // holders of names[2], which every set has
		errs := make(chan error, len(sets))
		runCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		for _, set := range sets {
			go func() {
				c := redislock.New(rdb, quiet, redislock.WithRetry(redislock.ExponentialBackoff(time.Millisecond, 20*time.Millisecond)))
				defer func() { _ = c.Close(context.Background()) }()
				for range 20 {
					l, err := c.AcquireMulti(runCtx, set)
					if err != nil {
						errs <- err
						return
					}
					if inside.Add(1) != 1 {
						errs <- errBothInside
						return
					}
					time.Sleep(time.Millisecond) // the work: others wait meanwhile
					inside.Add(-1)
					if err := l.Release(ctx); err != nil {
						errs <- err
						return
					}
				}
				errs <- nil
			}()
		}
		for range sets {
			require.NoError(t, <-errs)
		}
	})
}

// A multi attempt that gives up on a timeout may still land later and take
// every name under a token nobody has: the Client gives them back.
func TestAMultiAttemptThatTimedOutIsGivenBackWhenItLandsLate(t *testing.T) {
	t.Parallel()
	requireALateAttemptIsGivenBack(t, func(ctx context.Context, c *redislock.Client) (*redislock.Lock, error) {
		return c.AcquireMulti(ctx, []string{"late:a", "late:b"})
	}, func(ctx context.Context, c *redislock.Client) (*redislock.Lock, error) {
		return c.AcquireMulti(ctx, []string{"late:b", "late:a"})
	}, "lock:{late:a}", "lock:{late:b}")
}

// A waiter whose blocker's holder crashed (no release, no announcement)
// comes back when that holder's lease ends, not at its backoff.
func TestAMultiWaiterComesBackWhenTheHoldersLeaseEnds(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		crashed, err := redislock.New(b.rdb, quiet, redislock.WithTTL(300*time.Millisecond), redislock.WithWatchdog(false)).Acquire(ctx, "crash:b")
		require.NoError(t, err)
		_ = crashed // never released: its process "crashed"
		waitCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		got := make(chan error, 1)
		var l *redislock.Lock
		go func() {
			var err error
			l, err = redislock.New(b.rdb, quiet).AcquireMulti(waitCtx, []string{"crash:a", "crash:b"}, redislock.WithRetry(redislock.LinearBackoff(time.Hour)))
			got <- err
		}()
		eventually(t, 5*time.Second, func() bool {
			return b.rdb.PubSubNumSub(ctx, "lock:{crash:b}:released").Val()["lock:{crash:b}:released"] == 1
		}, "the waiter does not wait for crash:b")
		if b.mini != nil {
			b.mini.FastForward(time.Second) // miniredis' keys expire by its own clock
		}
		select {
		case err := <-got:
			require.NoError(t, err)
		case <-time.After(10 * time.Second):
			t.Fatal("the waiter did not come back when the holder's lease ended")
		}
		require.Equal(t, l.Token(), b.rdb.Get(ctx, "lock:{crash:b}").Val())
		require.NoError(t, l.Release(ctx))
	})
}

func TestAMultiReleaseAnnouncesOnlyWhereSomeoneWaits(t *testing.T) {
	// A release with nobody in line announces nothing (docs/how-it-works.md):
	// a multi lock's release publishes on a name's channel only when its
	// queue holds someone. A subscriber to every name's channel sees the
	// release's messages before the end marks the test publishes after it
	// (one connection gets a server's messages in order): no wait on time.
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		names := []string{"ann:a", "ann:b", "ann:c"}
		channel := func(name string) string { return "lock:{" + name + "}:released" }
		var channels []string
		for _, name := range names {
			channels = append(channels, channel(name))
		}
		heard := func(release func()) []string {
			t.Helper()
			sub := b.rdb.Subscribe(ctx, channels...)
			defer sub.Close()
			_, err := sub.Receive(ctx) // subscribed to the first channel...
			require.NoError(t, err)
			for range channels[1:] { // ...and to the others
				_, err := sub.Receive(ctx)
				require.NoError(t, err)
			}
			release()
			for _, ch := range channels {
				require.NoError(t, b.rdb.Publish(ctx, ch, "end").Err())
			}
			var got []string
			for ends := 0; ends < len(channels); {
				msg, err := sub.ReceiveMessage(ctx)
				require.NoError(t, err)
				if msg.Payload == "end" {
					ends++
					continue
				}
				got = append(got, msg.Channel+" "+msg.Payload)
			}
			return got
		}
		c := redislock.New(b.rdb, quiet)

		l, err := c.AcquireMulti(ctx, names)
		require.NoError(t, err)
		require.Empty(t, heard(func() { require.NoError(t, l.Release(ctx)) }), "nobody waits: nothing announced")

		l, err = c.AcquireMulti(ctx, names)
		require.NoError(t, err)
		waiter := redislock.New(newRedisClient(t, b.rdb.Options().Addr), quiet)
		got := make(chan error, 1)
		go func() {
			w, err := waiter.Acquire(ctx, names[1], redislock.WithRetry(redislock.LinearBackoff(50*time.Millisecond)))
			if err == nil {
				err = w.Release(ctx)
			}
			got <- err
		}()
		eventually(t, 10*time.Second, func() bool { return b.rdb.ZCard(ctx, "lock:{ann:b}:q").Val() == 1 }, "the waiter never queued")
		require.Equal(t, []string{channel(names[1]) + " 1"},
			heard(func() { require.NoError(t, l.Release(ctx)) }), "only the name someone waits for is announced")
		require.NoError(t, <-got)
		require.NoError(t, waiter.Close(ctx))
	})
}

// Two callers racing for the same free names, neither waiting: their SETs
// may each take some of the names, but each gives back what it set before
// its script decides, so at least one of them takes them all (a caller's
// script runs after its own give-back: both refused would need each
// script to run before the other's give-back). Never both, never none.
func TestTwoMultiLocksRacingForFreeNamesNeverBothFail(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		clients := []*redislock.Client{redislock.New(b.rdb, quiet), redislock.New(b.rdb, quiet)}
		for _, c := range clients { // a script ran: their first attempts are SETs
			l, err := c.AcquireMulti(ctx, []string{"race:warm"})
			require.NoError(t, err)
			require.NoError(t, l.Release(ctx))
		}
		for round := range 100 {
			names := []string{fmt.Sprintf("race:%d:a", round), fmt.Sprintf("race:%d:b", round), fmt.Sprintf("race:%d:c", round)}
			start := make(chan struct{})
			results := make(chan error, 2)
			var locks sync.Map
			for i, c := range clients {
				go func() {
					<-start
					l, err := c.AcquireMulti(ctx, names)
					if err == nil {
						locks.Store(i, l)
					}
					results <- err
				}()
			}
			close(start)
			won := 0
			for range clients {
				if err := <-results; err == nil {
					won++
				} else {
					require.ErrorIs(t, err, redislock.ErrNotAcquired)
				}
			}
			require.Equal(t, 1, won, "round %d: exactly one takes the names", round)
			locks.Range(func(_, l any) bool {
				require.NoError(t, l.(*redislock.Lock).Release(ctx))
				return true
			})
			require.Zero(t, b.rdb.Exists(ctx, "lock:{"+names[0]+"}", "lock:{"+names[1]+"}", "lock:{"+names[2]+"}").Val(), "round %d: nothing left held", round)
		}
	})
}
