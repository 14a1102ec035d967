package redislock_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redislock/redislock"
)

// waitFor starts n callers waiting for name on c (each with its own
// Client's queue place) until ctx ends; it returns a function that waits
// for them and reports their locks, released.
func waitFor(t *testing.T, ctx context.Context, rdb redis.UniversalClient, name string, n int, opts ...redislock.Option) func() []*redislock.Lock {
	t.Helper()
	var wg sync.WaitGroup
	locks := make([]*redislock.Lock, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := redislock.New(rdb, quiet)
			l, err := c.Acquire(ctx, name, append([]redislock.Option{redislock.WithRetry(redislock.LinearBackoff(20 * time.Millisecond))}, opts...)...)
			if err == nil {
				locks[i] = l
			}
		}()
	}
	return func() []*redislock.Lock { wg.Wait(); return locks }
}

func TestInspect(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		c := redislock.New(b.rdb, quiet, redislock.WithFencing())

		t.Run("a lock nobody ever took is free, with no fence", func(t *testing.T) {
			info, err := c.Inspect(ctx, "never")
			require.NoError(t, err)
			require.Equal(t, redislock.Info{Name: "never", Key: "lock:{never}"}, info)
		})

		t.Run("a held lock shows its lease, metadata and fence, never its token", func(t *testing.T) {
			l, err := c.Acquire(ctx, "held", redislock.WithTTL(time.Minute), redislock.WithMetadata("host=web-3 pid=42"))
			require.NoError(t, err)
			info, err := c.Inspect(ctx, "held")
			require.NoError(t, err)
			require.True(t, info.Held)
			require.Equal(t, "host=web-3 pid=42", info.Metadata)
			require.Equal(t, l.Fence(), info.Fence)
			require.Greater(t, info.TTL, 50*time.Second)
			require.LessOrEqual(t, info.TTL, time.Minute)
			require.Zero(t, info.Waiters)
			require.Nil(t, info.Nodes)
			require.NotContains(t, fmt.Sprintf("%#v", info), l.Token())

			require.NoError(t, l.Release(ctx))
			info, err = c.Inspect(ctx, "held")
			require.NoError(t, err)
			require.False(t, info.Held, "released")
			require.Empty(t, info.Metadata, "the metadata went with the lock")
			require.Zero(t, info.TTL)
			require.Equal(t, l.Fence(), info.Fence, "the counter outlives the lock")
		})

		t.Run("waiters queued on the server are counted, from any Client", func(t *testing.T) {
			l, err := c.Acquire(ctx, "busy")
			require.NoError(t, err)
			waitCtx, cancel := context.WithCancel(ctx)
			done := waitFor(t, waitCtx, b.rdb, "busy", 3)
			eventually(t, 5*time.Second, func() bool {
				info, err := c.Inspect(ctx, "busy")
				return err == nil && info.Waiters == 3
			}, "3 waiters queued")
			cancel()
			for _, got := range done() {
				require.Nil(t, got, "nobody got the lock while it was held")
			}
			// Waiters that gave up leave the queue (their janitor's
			// release), or their place lapses.
			if b.mini != nil {
				b.mini.FastForward(2 * time.Second)
			}
			eventually(t, 5*time.Second, func() bool {
				info, err := c.Inspect(ctx, "busy")
				return err == nil && info.Waiters == 0
			}, "the waiters left")
			require.NoError(t, l.Release(ctx))
		})

		t.Run("a place in the queue that lapsed is not a waiter", func(t *testing.T) {
			future := float64(time.Now().Add(time.Hour).UnixMilli())
			require.NoError(t, b.rdb.ZAdd(ctx, "lock:{lapsed}:q", redis.Z{Score: 1, Member: "gone"}, redis.Z{Score: 2, Member: "here"}).Err())
			require.NoError(t, b.rdb.ZAdd(ctx, "lock:{lapsed}:qx", redis.Z{Score: 1, Member: "gone"}, redis.Z{Score: future, Member: "here"}).Err())
			info, err := c.Inspect(ctx, "lapsed")
			require.NoError(t, err)
			require.Equal(t, 1, info.Waiters)
		})

		t.Run("a key with no expiry reports a negative TTL", func(t *testing.T) {
			require.NoError(t, b.rdb.Set(ctx, "lock:{forever}", "someone", 0).Err())
			info, err := c.Inspect(ctx, "forever")
			require.NoError(t, err)
			require.True(t, info.Held)
			require.Negative(t, info.TTL)
			require.Empty(t, info.Metadata, "a value without the separator has no metadata")
		})

		t.Run("a key of another type is not a lock", func(t *testing.T) {
			for _, key := range []string{"lock:{typed}", "lock:{typed}:fence", "lock:{typed}:q", "lock:{typed}:qx"} {
				require.NoError(t, b.rdb.HSet(ctx, key, "f", "v").Err())
				_, err := c.Inspect(ctx, "typed")
				require.ErrorIs(t, err, redislock.ErrNotALock, key)
				require.ErrorContains(t, err, key+" holds a hash")
				require.NoError(t, b.rdb.Del(ctx, key).Err())
			}
			require.NoError(t, b.rdb.Set(ctx, "lock:{typed}:fence", "twelve", 0).Err())
			_, err := c.Inspect(ctx, "typed")
			require.ErrorIs(t, err, redislock.ErrNotALock)
			require.ErrorContains(t, err, `"twelve"`)
		})

		t.Run("one round trip", func(t *testing.T) {
			log := &commandLog{}
			rdb := newRedisClient(t, b.rdb.Options().Addr)
			rdb.AddHook(log)
			c := redislock.New(rdb, quiet)
			_, err := c.Inspect(ctx, "trips") // loads the script if the server lacks it
			require.NoError(t, err)
			log.take()
			log.resetTrips()
			_, err = c.Inspect(ctx, "trips")
			require.NoError(t, err)
			trips, _ := log.tripsAndExtensions()
			require.Equal(t, int64(1), trips)
			require.Equal(t, []string{"evalsha"}, log.take())
		})
	})
}

func TestInspectAndBreakRejectBadInput(t *testing.T) {
	c := redislock.New(newMini(t), quiet)
	calls := map[string]func(context.Context, string) (redislock.Info, error){"Inspect": c.Inspect, "Break": c.Break}
	for method, call := range calls {
		t.Run(method, func(t *testing.T) {
			//lint:ignore SA1012 a nil context is the bad input under test
			_, err := call(nil, "job") //nolint:staticcheck
			require.ErrorIs(t, err, redislock.ErrInvalidArgument)
			_, err = call(context.Background(), "")
			require.ErrorIs(t, err, redislock.ErrInvalidArgument)
			_, err = call(context.Background(), "}job")
			require.ErrorIs(t, err, redislock.ErrInvalidArgument)
			_, err = redislock.New(nil).Inspect(context.Background(), "job")
			require.ErrorIs(t, err, redislock.ErrInvalidArgument)
		})
	}
}

func TestBreak(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		rec := &logRecorder{}
		operator := redislock.New(b.rdb, redislock.WithLogger(slogTo(rec)))

		t.Run("a free lock: nothing to break", func(t *testing.T) {
			info, err := operator.Break(ctx, "free")
			require.NoError(t, err)
			require.False(t, info.Held)
		})

		t.Run("the first waiter gets the lock; the holder learns Taken; fences grow", func(t *testing.T) {
			holderClient := redislock.New(b.rdb, quiet, redislock.WithFencing())
			// The holder finds the break at its next extension (every 100
			// ms); its long TTL cannot run out first, however long a stall.
			held, err := holderClient.Acquire(ctx, "stuck", redislock.WithTTL(time.Minute), redislock.WithExtendInterval(100*time.Millisecond), redislock.WithMetadata("host=stuck-1"))
			require.NoError(t, err)
			waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			done := waitFor(t, waitCtx, b.rdb, "stuck", 1, redislock.WithFencing(), redislock.WithMetadata("host=next"))
			eventually(t, 5*time.Second, func() bool {
				info, err := operator.Inspect(ctx, "stuck")
				return err == nil && info.Waiters == 1
			}, "the waiter queued")

			info, err := operator.Break(ctx, "stuck")
			require.NoError(t, err)
			require.True(t, info.Held)
			require.Equal(t, "host=stuck-1", info.Metadata)
			require.Equal(t, held.Fence(), info.Fence)
			require.Equal(t, 1, info.Waiters)
			// Handed on in the break's script: the key holds the waiter's
			// value before the waiter has even answered.
			handed, err := operator.Inspect(ctx, "stuck")
			require.NoError(t, err)
			require.True(t, handed.Held)
			require.Equal(t, "host=next", handed.Metadata)

			next := done()[0]
			require.NotNil(t, next, "the waiter got the lock")
			defer next.Release(ctx)
			require.Greater(t, next.Fence(), held.Fence(), "the broken holder's fence is below the next one")
			now, err := operator.Inspect(ctx, "stuck")
			require.NoError(t, err)
			require.Equal(t, "host=next", now.Metadata)

			waitDone(t, held.Context(), 10*time.Second) // its next extension
			var lost *redislock.LostError
			require.ErrorAs(t, context.Cause(held.Context()), &lost)
			require.Equal(t, redislock.Taken, lost.Reason)

			line, ok := rec.find(slog.LevelWarn, "redislock: lock broken")
			require.True(t, ok, "Break logs what it broke")
			require.Contains(t, line, "metadata=host=stuck-1")
			require.Contains(t, line, "handed_to_waiter=true")
			require.NotContains(t, line, held.Token())
		})

		t.Run("with nobody waiting the key is deleted; the holder learns Expired", func(t *testing.T) {
			held, err := redislock.New(b.rdb, quiet).Acquire(ctx, "alone", redislock.WithTTL(time.Minute), redislock.WithExtendInterval(100*time.Millisecond))
			require.NoError(t, err)
			info, err := operator.Break(ctx, "alone")
			require.NoError(t, err)
			require.True(t, info.Held)
			require.Zero(t, b.rdb.Exists(ctx, "lock:{alone}").Val())
			waitDone(t, held.Context(), 10*time.Second)
			var lost *redislock.LostError
			require.ErrorAs(t, context.Cause(held.Context()), &lost)
			require.Equal(t, redislock.Expired, lost.Reason)
			require.ErrorIs(t, held.Release(ctx), redislock.ErrNotHeld)
		})

		t.Run("a key of another type is left alone", func(t *testing.T) {
			require.NoError(t, b.rdb.RPush(ctx, "lock:{list}", "x").Err())
			_, err := operator.Break(ctx, "list")
			require.ErrorIs(t, err, redislock.ErrNotALock)
			require.Equal(t, int64(1), b.rdb.LLen(ctx, "lock:{list}").Val())
		})
	})
}

// slogTo returns a logger writing to rec.
func slogTo(rec *logRecorder) *slog.Logger { return slog.New(rec) }

func TestQuorumInspectAndBreak(t *testing.T) {
	for _, real := range []bool{false, true} {
		name := "miniredis"
		if real {
			name = "redis-server"
		}
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			var nodes []*redis.Client
			if real {
				nodes = startQuorumServers(t, 3).nodes
			} else {
				for range 3 {
					nodes = append(nodes, newMini(t))
				}
			}
			clients := []redis.UniversalClient{nodes[0], nodes[1], nodes[2]}
			c := newQuorum(t, clients)

			l, err := c.Acquire(ctx, "q", redislock.WithMetadata("host=q1"), redislock.WithTTL(time.Minute))
			require.NoError(t, err)
			info, err := c.Inspect(ctx, "q")
			require.NoError(t, err)
			require.True(t, info.Held)
			require.Equal(t, "host=q1", info.Metadata)
			require.Greater(t, info.TTL, 50*time.Second)
			require.Len(t, info.Nodes, 3)
			for i, n := range info.Nodes {
				require.NoError(t, n.Err)
				require.True(t, n.Held && n.Majority, "node %d", i)
				require.Equal(t, "host=q1", n.Metadata)
				require.Contains(t, n.Node, fmt.Sprintf("node %d", i))
			}

			// One node lost the key, another holds someone else's value:
			// no majority for anyone.
			require.NoError(t, nodes[0].Del(ctx, l.Key()).Err())
			require.NoError(t, nodes[1].Set(ctx, l.Key(), "someone-else", time.Minute).Err())
			info, err = c.Inspect(ctx, "q")
			require.NoError(t, err)
			require.False(t, info.Held)
			require.Empty(t, info.Metadata)
			require.False(t, info.Nodes[0].Held)
			require.True(t, info.Nodes[1].Held)
			require.False(t, info.Nodes[1].Majority)
			require.True(t, info.Nodes[2].Held)
			require.False(t, info.Nodes[2].Majority)

			require.NoError(t, nodes[1].Set(ctx, l.Key(), "someone-else", time.Minute).Err())
			require.NoError(t, nodes[0].Set(ctx, l.Key(), "someone-else", time.Minute).Err())
			info, err = c.Inspect(ctx, "q")
			require.NoError(t, err)
			require.True(t, info.Held, "someone else holds a majority")
			require.False(t, info.Nodes[2].Majority)

			broken, err := c.Break(ctx, "q")
			require.NoError(t, err)
			require.True(t, broken.Held)
			for i, n := range nodes {
				require.Zero(t, n.Exists(ctx, l.Key()).Val(), "node %d", i)
			}
			require.ErrorIs(t, l.Release(ctx), redislock.ErrNotHeld)

			// Fewer than a majority answer: a *QuorumError, with each node's view.
			require.NoError(t, nodes[1].Close())
			require.NoError(t, nodes[2].Close())
			info, err = c.Inspect(ctx, "q")
			var qerr *redislock.QuorumError
			require.ErrorAs(t, err, &qerr)
			require.Equal(t, "inspect", qerr.Op)
			require.NoError(t, info.Nodes[0].Err)
			require.Error(t, info.Nodes[1].Err)
		})
	}
}

// inspectAndBreakOn runs Inspect and Break on a deployment (a cluster, a
// Sentinel set): a fenced holder with metadata and a queued waiter from
// another Client, listed in Info.Queue; Break (or BreakHolder) hands the
// lock to the waiter.
func inspectAndBreakOn(t *testing.T, rdb redis.UniversalClient) {
	ctx := context.Background()
	c := redislock.New(rdb, quiet, redislock.WithFencing())
	for _, name := range []string{"inspect-a", "inspect-b", "inspect-c"} { // different slots on a cluster
		// Found at the next extension (every 100 ms); a long TTL, that no stall runs out.
		held, err := c.Acquire(ctx, name, redislock.WithMetadata("host="+name), redislock.WithTTL(time.Minute), redislock.WithExtendInterval(100*time.Millisecond))
		require.NoError(t, err)
		waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		done := waitFor(t, waitCtx, rdb, name, 1, redislock.WithFencing(), redislock.WithMetadata("host=next"))
		eventually(t, 10*time.Second, func() bool {
			info, err := c.Inspect(ctx, name)
			return err == nil && info.Waiters == 1
		}, "the waiter queued")
		info, err := c.Inspect(ctx, name)
		require.NoError(t, err)
		require.True(t, info.Held)
		require.Equal(t, "host="+name, info.Metadata)
		require.Equal(t, held.Fence(), info.Fence)
		require.Positive(t, info.TTL)
		require.Len(t, info.Queue, 1)
		require.Equal(t, "host=next", info.Queue[0].Metadata)

		breakIt := c.Break
		if name == "inspect-b" { // one hold, by its ID: the same release
			breakIt = func(ctx context.Context, name string) (redislock.Info, error) {
				return c.BreakHolder(ctx, name, redislock.HolderID(held))
			}
		}
		broken, err := breakIt(ctx, name)
		require.NoError(t, err)
		require.Equal(t, "host="+name, broken.Metadata)
		next := done()[0]
		cancel()
		require.NotNil(t, next, "the waiter got the lock")
		require.Greater(t, next.Fence(), held.Fence())
		waitDone(t, held.Context(), 10*time.Second)
		var lost *redislock.LostError
		require.ErrorAs(t, context.Cause(held.Context()), &lost)
		require.Equal(t, redislock.Taken, lost.Reason)
		info, err = c.Inspect(ctx, name)
		require.NoError(t, err)
		require.Equal(t, "host=next", info.Metadata)
		require.NoError(t, next.Release(ctx))
	}
}
