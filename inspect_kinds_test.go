package redislock_test

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/internal/redistest"
)

// Inspect and Break see every kind of lock: an exclusive lock, a lock
// held shared, a semaphore. Each holder of the two last is listed with its
// metadata and its lease, never its token.
func TestInspectAndBreakSeeEveryKind(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		operator := redislock.New(b.rdb, quiet)
		holders := func(info redislock.Info) []string {
			var out []string
			for _, h := range info.Holders {
				require.Positive(t, h.TTL, h.Metadata)
				require.LessOrEqual(t, h.TTL, time.Minute, h.Metadata)
				out = append(out, h.Metadata)
			}
			return out
		}

		t.Run("an exclusive lock: one holder, described by Metadata and TTL", func(t *testing.T) {
			l, err := operator.Acquire(ctx, "one", redislock.WithMetadata("host=a"))
			require.NoError(t, err)
			info, err := operator.Inspect(ctx, "one")
			require.NoError(t, err)
			require.Equal(t, "lock", info.Kind)
			require.Equal(t, 1, info.Count)
			require.Zero(t, info.Limit)
			require.Equal(t, []redislock.HolderInfo{{ID: idOf(l), Metadata: "host=a", TTL: info.TTL}}, info.Holders)
			require.NoError(t, l.Release(ctx))
			info, err = operator.Inspect(ctx, "one")
			require.NoError(t, err)
			require.Equal(t, redislock.Info{Name: "one", Key: "lock:{one}"}, info, "not held: no kind")
		})

		t.Run("a semaphore: its limit, and each holder's metadata and lease", func(t *testing.T) {
			c := redislock.New(b.rdb, quiet, redislock.WithFencing())
			var held []*redislock.Lock
			for i, ttl := range []time.Duration{40 * time.Second, 20 * time.Second, time.Minute} {
				l, err := c.AcquireSemaphore(ctx, "pool", 5, redislock.WithTTL(ttl), redislock.WithMetadata(fmt.Sprintf("host=web-%d", i)))
				require.NoError(t, err)
				held = append(held, l)
			}
			info, err := operator.Inspect(ctx, "pool")
			require.NoError(t, err)
			require.True(t, info.Held)
			require.Equal(t, "semaphore", info.Kind)
			require.Equal(t, 5, info.Limit)
			require.Equal(t, 3, info.Count)
			require.Zero(t, info.Shared)
			require.Empty(t, info.Metadata, "each holder has its own")
			require.Equal(t, []string{"host=web-1", "host=web-0", "host=web-2"}, holders(info), "the lease that ends first first")
			require.Greater(t, info.Holders[2].TTL, info.Holders[0].TTL)
			require.Greater(t, info.TTL, 50*time.Second, "the latest lease")
			require.Equal(t, held[2].Fence(), info.Fence)
			for _, l := range held {
				require.NotContains(t, fmt.Sprintf("%#v", info), l.Token())
			}

			require.NoError(t, held[1].Release(ctx))
			info, err = operator.Inspect(ctx, "pool")
			require.NoError(t, err)
			require.Equal(t, 2, info.Count)
			require.Equal(t, []string{"host=web-0", "host=web-2"}, holders(info))
			for _, l := range []*redislock.Lock{held[0], held[2]} {
				require.NoError(t, l.Release(ctx))
			}
			info, err = operator.Inspect(ctx, "pool")
			require.NoError(t, err)
			require.False(t, info.Held)
			require.Empty(t, info.Kind)
			require.Zero(t, info.Limit)
		})

		t.Run("a lock held shared: each reader's metadata and lease", func(t *testing.T) {
			c := redislock.New(b.rdb, quiet)
			var readers []*redislock.Lock
			for i := range 3 {
				l, err := c.AcquireShared(ctx, "prices", redislock.WithMetadata(fmt.Sprintf("reader=%d", i)), redislock.WithTTL(time.Duration(30+i)*time.Second))
				require.NoError(t, err)
				readers = append(readers, l)
			}
			info, err := operator.Inspect(ctx, "prices")
			require.NoError(t, err)
			require.Equal(t, "shared", info.Kind)
			require.Equal(t, 3, info.Shared)
			require.Equal(t, 3, info.Count)
			require.Zero(t, info.Limit)
			require.Equal(t, []string{"reader=0", "reader=1", "reader=2"}, holders(info))
			for _, l := range readers {
				require.NotContains(t, fmt.Sprintf("%#v", info), l.Token())
				require.NoError(t, l.Release(ctx))
			}
		})

		t.Run("Break ends a semaphore: every slot, and its waiters take them", func(t *testing.T) {
			rec := &logRecorder{}
			breaker := redislock.New(b.rdb, redislock.WithLogger(slogTo(rec)))
			c := redislock.New(b.rdb, quiet)
			var held []*redislock.Lock
			for i := range 2 { // found broken at the next extension (every 100 ms), whatever a stall

				l, err := c.AcquireSemaphore(ctx, "full", 2, redislock.WithTTL(time.Minute), redislock.WithExtendInterval(100*time.Millisecond), redislock.WithMetadata(fmt.Sprintf("slot=%d", i)))
				require.NoError(t, err)
				held = append(held, l)
			}
			waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			waiter := goAcquire(func() (*redislock.Lock, error) {
				return redislock.New(b.rdb, quiet).AcquireSemaphore(waitCtx, "full", 2, redislock.WithRetry(redislock.LinearBackoff(time.Hour)))
			})
			eventually(t, 5*time.Second, func() bool { return queueLen(t, b.rdb, "full") == 1 }, "the waiter queued")

			info, err := breaker.Break(ctx, "full")
			require.NoError(t, err)
			require.True(t, info.Held)
			require.Equal(t, "semaphore", info.Kind)
			require.Equal(t, 2, info.Count)
			require.Equal(t, 2, info.Limit)
			require.Equal(t, 1, info.Waiters)
			require.ElementsMatch(t, []string{"slot=0", "slot=1"}, holders(info))
			line, ok := rec.find(slog.LevelWarn, "redislock: lock broken")
			require.True(t, ok)
			require.Contains(t, line, "kind=semaphore")
			require.Contains(t, line, "holders=2")

			r := receive(t, waiter, 10*time.Second) // woken by the break's announcement
			require.NoError(t, r.err)
			for _, l := range held {
				waitDone(t, l.Context(), 10*time.Second) // at its next extension
				var lost *redislock.LostError
				require.ErrorAs(t, context.Cause(l.Context()), &lost)
				require.Equal(t, redislock.Expired, lost.Reason)
			}
			info, err = operator.Inspect(ctx, "full")
			require.NoError(t, err)
			require.Equal(t, 1, info.Count, "the waiter's slot alone")
			require.NoError(t, r.l.Release(ctx))
			require.Zero(t, b.rdb.Exists(ctx, "lock:{full}").Val())
		})

		t.Run("Break ends every share of a lock held shared", func(t *testing.T) {
			c := redislock.New(b.rdb, quiet)
			l, err := c.AcquireShared(ctx, "readers", redislock.WithMetadata("reader=a"))
			require.NoError(t, err)
			info, err := operator.Break(ctx, "readers")
			require.NoError(t, err)
			require.Equal(t, "shared", info.Kind)
			require.Equal(t, []string{"reader=a"}, holders(info))
			require.Zero(t, b.rdb.Exists(ctx, "lock:{readers}", "lock:{readers}:s").Val())
			require.ErrorIs(t, l.Release(ctx), redislock.ErrNotHeld)
		})

		t.Run("at most 100 holders are listed; Count has them all", func(t *testing.T) {
			c := redislock.New(b.rdb, quiet, redislock.WithWatchdog(false), redislock.WithTTL(time.Minute))
			var holders []*redislock.Lock // kept: a dropped Lock is released by itself
			for i := range 120 {
				l, err := c.AcquireSemaphore(ctx, "crowd", 200, redislock.WithMetadata(fmt.Sprintf("n=%03d", i)))
				require.NoError(t, err)
				holders = append(holders, l)
			}
			info, err := operator.Inspect(ctx, "crowd")
			require.NoError(t, err)
			require.Equal(t, 120, info.Count)
			require.Len(t, info.Holders, 100)
			require.True(t, slices.IsSortedFunc(info.Holders, func(a, b redislock.HolderInfo) int { return int(a.TTL - b.TTL) }))
			_, err = operator.Break(ctx, "crowd")
			require.NoError(t, err)
			runtime.KeepAlive(holders)
		})

		t.Run("still one round trip", func(t *testing.T) {
			l, err := operator.AcquireSemaphore(ctx, "trips", 3)
			require.NoError(t, err)
			log := &commandLog{}
			rdb := newRedisClient(t, b.rdb.Options().Addr)
			rdb.AddHook(log)
			c := redislock.New(rdb, quiet)
			_, err = c.Inspect(ctx, "trips") // loads the script if the server lacks it
			require.NoError(t, err)
			log.take()
			log.resetTrips()
			info, err := c.Inspect(ctx, "trips")
			require.NoError(t, err)
			require.Equal(t, "semaphore", info.Kind)
			trips, _ := log.tripsAndExtensions()
			require.Equal(t, int64(1), trips)
			require.Equal(t, []string{"evalsha"}, log.take())
			require.NoError(t, l.Release(ctx))
		})
	})
}

// docs/security.md's line for Inspect and Break is enough: on top of the
// minimal ACL, +zcard +zcount +zrange +zscore +type for an exclusive lock
// (and a lone reader's or semaphore holder's, which has its shape), and
// +zrangebyscore for the holders of a semaphore or of a lock held shared
// by several (which
// their own users have, see semaphoreACLCommands); Break and BreakHolder
// also +zrem and +publish.
func TestInspectAndBreakACL(t *testing.T) {
	server := redistest.Start(t)
	admin := newRedisClient(t, server.Addr())
	ctx := context.Background()
	inspect := []string{"+zcard", "+zcount", "+zrange", "+zscore", "+type"}
	breaking := []string{"+zrem", "+publish"}
	rules := func(extra ...string) []string {
		return append(append(append([]string{"~lock:*", "resetchannels", "&lock:*"}, minimalACLCommands...), inspect...), extra...)
	}
	holders := redislock.New(admin, quiet)
	l, err := holders.Acquire(ctx, "acl-lock")
	require.NoError(t, err)
	s, err := holders.AcquireSemaphore(ctx, "acl-sem", 2)
	require.NoError(t, err)
	s2, err := holders.AcquireSemaphore(ctx, "acl-sem", 2) // two: the holders' set
	require.NoError(t, err)
	r, err := holders.AcquireShared(ctx, "acl-shared")
	require.NoError(t, err)
	r2, err := redislock.New(admin, quiet).AcquireShared(ctx, "acl-shared") // two: the holders' set
	require.NoError(t, err)
	lone, err := holders.AcquireShared(ctx, "acl-lone") // one: the exclusive lock's shape
	require.NoError(t, err)
	loneSlot, err := holders.AcquireSemaphore(ctx, "acl-lone-slot", 2) // likewise
	require.NoError(t, err)

	operator := redislock.New(setACLUser(t, admin, "inspector", rules()...), quiet)
	for name, kind := range map[string]string{"acl-lock": "lock", "acl-lone": "shared", "acl-lone-slot": "semaphore"} {
		info, err := operator.Inspect(ctx, name)
		require.NoError(t, err, name)
		require.Equal(t, kind, info.Kind)
	}
	require.NoError(t, lone.Release(ctx))
	require.NoError(t, loneSlot.Release(ctx))
	for _, name := range []string{"acl-sem", "acl-shared"} {
		_, err = operator.Inspect(ctx, name)
		require.Error(t, err, "%s without +zrangebyscore", name) // NOPERM, or ERR on Redis 7.0
	}

	operator = redislock.New(setACLUser(t, admin, "operator", rules(append(breaking, "+zrangebyscore")...)...), quiet)
	for name, kind := range map[string]string{"acl-lock": "lock", "acl-sem": "semaphore", "acl-shared": "shared"} {
		info, err := operator.Inspect(ctx, name)
		require.NoError(t, err, name)
		require.Equal(t, kind, info.Kind)
		info, err = operator.Break(ctx, name)
		require.NoError(t, err, name)
		require.Equal(t, kind, info.Kind)
	}
	for _, held := range []*redislock.Lock{l, s, s2, r, r2} {
		require.ErrorIs(t, held.Release(ctx), redislock.ErrNotHeld)
	}
	// BreakHolder needs no more than Break.
	l, err = holders.Acquire(ctx, "acl-lock")
	require.NoError(t, err)
	s, err = holders.AcquireSemaphore(ctx, "acl-sem", 2)
	require.NoError(t, err)
	r, err = holders.AcquireShared(ctx, "acl-shared")
	require.NoError(t, err)
	for name, held := range map[string]*redislock.Lock{"acl-lock": l, "acl-sem": s, "acl-shared": r} {
		_, err := operator.BreakHolder(ctx, name, redislock.HolderID(held))
		require.NoError(t, err, name)
		require.ErrorIs(t, held.Release(ctx), redislock.ErrNotHeld)
	}
}
