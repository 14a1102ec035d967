package redislock_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/internal/redistest"
)

// idOf is a hold's ID as docs/holders.md defines it, computed here on its
// own: the first 16 hex digits of SHA1("holder:" + token).
func idOf(l *redislock.Lock) string {
	sum := sha1.Sum([]byte("holder:" + l.Token()))
	return hex.EncodeToString(sum[:8])
}

func holderIDs(info redislock.Info) []string {
	var ids []string
	for _, h := range info.Holders {
		ids = append(ids, h.ID)
	}
	return ids
}

// attr returns the value of key in a logRecorder line ("" when absent).
func attr(line, key string) string {
	for _, field := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(field, key+"="); ok {
			return v
		}
	}
	return ""
}

// Every kind's holders are in Info.Holders, each with the ID its log lines
// carry (acquired, released, lock lost), which is none of the token.
func TestEveryHolderHasTheIDOfItsLogLines(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		rec := &logRecorder{}
		c := redislock.New(b.rdb, redislock.WithLogger(slogTo(rec)))
		operator := redislock.New(b.rdb, quiet)
		logged := func(msg string, l *redislock.Lock) string {
			t.Helper()
			for _, line := range rec.lines() {
				if strings.Contains(line, msg) && attr(line, "holder") == idOf(l) {
					return line
				}
			}
			t.Fatalf("no %q line with holder=%s in\n%s", msg, idOf(l), strings.Join(rec.lines(), "\n"))
			return ""
		}
		inspect := func(name string) redislock.Info {
			t.Helper()
			info, err := operator.Inspect(ctx, name)
			require.NoError(t, err)
			return info
		}

		t.Run("an exclusive lock: one holder, with its metadata and lease", func(t *testing.T) {
			l, err := c.Acquire(ctx, "one", redislock.WithMetadata("host=a"))
			require.NoError(t, err)
			info := inspect("one")
			require.Equal(t, []redislock.HolderInfo{{ID: idOf(l), Metadata: "host=a", TTL: info.TTL}}, info.Holders)
			require.Len(t, info.Holders[0].ID, 16)
			require.NotContains(t, l.Token(), info.Holders[0].ID)
			require.NotContains(t, info.Holders[0].ID, l.Token()[:8])
			logged("redislock: acquired", l)
			require.NoError(t, l.Release(ctx))
			logged("redislock: released", l)
			require.Nil(t, inspect("one").Holders)
		})

		t.Run("a multi lock: one holder on each name, the same", func(t *testing.T) {
			l, err := c.AcquireMulti(ctx, []string{"m1", "m2"})
			require.NoError(t, err)
			require.Equal(t, []string{idOf(l)}, holderIDs(inspect("m1")))
			require.Equal(t, []string{idOf(l)}, holderIDs(inspect("m2")))
			logged("redislock: acquired", l)
			require.NoError(t, l.Release(ctx))
		})

		t.Run("an election: the leader", func(t *testing.T) {
			leading := make(chan redislock.Info, 1)
			err := c.Elect(ctx, "leader", func(ctx context.Context) error {
				l, ok := redislock.LockFromContext(ctx)
				require.True(t, ok)
				info := inspect("leader")
				require.Equal(t, []string{idOf(l)}, holderIDs(info))
				leading <- info
				return nil
			})
			require.NoError(t, err)
			require.Len(t, (<-leading).Holders, 1)
		})

		t.Run("shared holders and a semaphore's: each, with its own ID", func(t *testing.T) {
			var shared, slots []*redislock.Lock
			for i := range 3 {
				l, err := c.AcquireShared(ctx, "readers", redislock.WithTTL(time.Duration(30+i)*time.Second))
				require.NoError(t, err)
				shared = append(shared, l)
				l, err = c.AcquireSemaphore(ctx, "pool", 5, redislock.WithTTL(time.Duration(40-i)*time.Second))
				require.NoError(t, err)
				slots = append(slots, l)
			}
			ids := func(locks ...*redislock.Lock) []string {
				var out []string
				for _, l := range locks {
					out = append(out, idOf(l))
				}
				return out
			}
			require.Equal(t, ids(shared...), holderIDs(inspect("readers")), "the first to end first")
			require.Equal(t, ids(slots[2], slots[1], slots[0]), holderIDs(inspect("pool")), "the first to end first")
			for _, l := range append(shared, slots...) {
				logged("redislock: acquired", l)
				require.NoError(t, l.Release(ctx))
				logged("redislock: released", l)
			}
			all := append(ids(shared...), ids(slots...)...)
			slices.Sort(all)
			require.Len(t, slices.Compact(all), 6, "distinct between holds")
		})

		t.Run("a waiter handed the lock holds it under its own ID", func(t *testing.T) {
			first, err := c.Acquire(ctx, "handed")
			require.NoError(t, err)
			waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			waiter := goAcquire(func() (*redislock.Lock, error) {
				return redislock.New(b.rdb, quiet).Acquire(waitCtx, "handed", redislock.WithRetry(redislock.LinearBackoff(time.Hour)))
			})
			eventually(t, 5*time.Second, func() bool { return queueLen(t, b.rdb, "handed") == 1 }, "the waiter queued")
			require.NoError(t, first.Release(ctx)) // hands the lock to the waiter
			r := receive(t, waiter, 10*time.Second)
			require.NoError(t, r.err)
			require.Equal(t, []string{idOf(r.l)}, holderIDs(inspect("handed")))
			require.NotEqual(t, idOf(first), idOf(r.l))
			require.NoError(t, r.l.Release(ctx))
		})

		t.Run("the lock lost line names the holder Inspect showed", func(t *testing.T) {
			l, err := c.Acquire(ctx, "lost", redislock.WithExtendInterval(50*time.Millisecond))
			require.NoError(t, err)
			id := inspect("lost").Holders[0].ID
			require.NoError(t, b.rdb.Set(ctx, "lock:{lost}", "someone-else", time.Minute).Err())
			waitDone(t, l.Context(), 10*time.Second) // at its next extension, within 50 ms unless stalled
			require.Equal(t, id, attr(logged("redislock: lock lost", l), "holder"))
		})
	})
}

// A key no kind of this library wrote is not a lock: Inspect and Break say
// ErrNotALock (Break leaves it as it was), never a zero Info.
func TestInspectOfAForeignKeyIsNotALock(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		c := redislock.New(b.rdb, quiet)
		future := float64(time.Now().Add(time.Hour).UnixMilli())
		for name, write := range map[string]func(key string) error{
			"a sorted set of other members": func(key string) error {
				return b.rdb.ZAdd(ctx, key, redis.Z{Score: future, Member: "user:42"}, redis.Z{Score: 3, Member: "user:7"}).Err()
			},
			"a sorted set of past scores": func(key string) error { return b.rdb.ZAdd(ctx, key, redis.Z{Score: 1, Member: "leaderboard"}).Err() },
			// Upper-case words look like base32 but have no token's length.
			"a sorted set of upper-case names": func(key string) error {
				return b.rdb.ZAdd(ctx, key, redis.Z{Score: future, Member: "ALICE"}, redis.Z{Score: future + 1, Member: "bob smith"}).Err()
			},
			"a sorted set whose first member looks like a token": func(key string) error {
				return b.rdb.ZAdd(ctx, key, redis.Z{Score: 1, Member: "ABCDEFGHIJKLMNOPQRSTUVWXYZ"}, redis.Z{Score: future, Member: "carol"}).Err()
			},
			"a hash": func(key string) error { return b.rdb.HSet(ctx, key, "field", "value").Err() },
			"a list": func(key string) error { return b.rdb.RPush(ctx, key, "a", "b").Err() },
			"a set":  func(key string) error { return b.rdb.SAdd(ctx, key, "a").Err() },
		} {
			t.Run(name, func(t *testing.T) {
				key := "lock:{" + name + "}"
				require.NoError(t, write(key))
				info, err := c.Inspect(ctx, name)
				require.ErrorIs(t, err, redislock.ErrNotALock)
				require.False(t, info.Held)
				dump := b.rdb.Dump(ctx, key).Val()
				_, err = c.Break(ctx, name)
				require.ErrorIs(t, err, redislock.ErrNotALock)
				require.Equal(t, dump, b.rdb.Dump(ctx, key).Val(), "Break left it as it was")
			})
		}
		t.Run("a semaphore whose limit key is gone is still one", func(t *testing.T) {
			l, err := c.AcquireSemaphore(ctx, "sem", 2)
			require.NoError(t, err)
			require.NoError(t, b.rdb.Del(ctx, "lock:{sem}:limit").Err())
			info, err := c.Inspect(ctx, "sem")
			require.NoError(t, err)
			require.Equal(t, "semaphore", info.Kind)
			require.Equal(t, []string{idOf(l)}, holderIDs(info))
			require.NoError(t, l.Release(ctx))
		})
	})
}

// listed runs List to the end: the Infos by name (each name once), and the errors.
func listed(t *testing.T, c *redislock.Client, prefix string) (map[string]redislock.Info, []error) {
	t.Helper()
	infos := map[string]redislock.Info{}
	var errs []error
	for info, err := range c.List(context.Background(), prefix) {
		if err != nil {
			errs = append(errs, err)
			continue
		}
		_, twice := infos[info.Name]
		require.False(t, twice, "%q listed twice", info.Name)
		infos[info.Name] = info
	}
	return infos, errs
}

func names(infos map[string]redislock.Info) []string {
	var out []string
	for name := range infos {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// holdEveryKind takes a lock of every kind on c, and leaves names with a
// fence counter only, with waiters only, with expired holders only, and
// keys of no lock; it returns the names List must find.
func holdEveryKind(t *testing.T, c *redislock.Client, rdb redis.UniversalClient) []string {
	t.Helper()
	ctx := context.Background()
	hold := func(l *redislock.Lock, err error) {
		t.Helper()
		require.NoError(t, err)
		t.Cleanup(func() { _ = l.Release(context.Background()) })
	}
	hold(c.Acquire(ctx, "job", redislock.WithMetadata("host=a")))
	hold(c.Acquire(ctx, "a*b"))
	hold(c.Acquire(ctx, `x?[y]\z`))
	hold(c.AcquireMulti(ctx, []string{"m1", "m2"}))
	hold(c.AcquireShared(ctx, "readers"))
	hold(c.AcquireShared(ctx, "readers"))
	hold(c.AcquireSemaphore(ctx, "pool", 3))
	hold(c.AcquireSemaphore(ctx, "pool", 3))
	// A fence counter alone: taken, then released.
	l, err := c.Acquire(ctx, "fenced", redislock.WithFencing())
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
	require.NoError(t, rdb.Exists(ctx, "lock:{fenced}:fence").Err())
	// A queue alone (its holder gone), and a semaphore whose holders expired.
	require.NoError(t, rdb.ZAdd(ctx, "lock:{queued}:q", redis.Z{Score: 1, Member: "AAAA"}).Err())
	require.NoError(t, rdb.ZAdd(ctx, "lock:{queued}:qx", redis.Z{Score: float64(time.Now().Add(time.Hour).UnixMilli()), Member: "AAAA"}).Err())
	require.NoError(t, rdb.ZAdd(ctx, "lock:{expired}", redis.Z{Score: 1, Member: "AAAA"}).Err())
	// Keys that are no lock: another program's, another prefix's.
	require.NoError(t, rdb.HSet(ctx, "lock:{profile}", "name", "x").Err())
	require.NoError(t, rdb.Set(ctx, "lock:job", "no braces", 0).Err())
	require.NoError(t, rdb.Set(ctx, "other:{job}", "x", 0).Err())
	return []string{"a*b", "job", "m1", "m2", "pool", "readers", `x?[y]\z`}
}

// List finds every kind of lock once, leaves out what holds nothing, and
// takes its prefix literally.
func TestListFindsEveryLockOnce(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		c := redislock.New(b.rdb, quiet)
		want := holdEveryKind(t, c, b.rdb)
		infos, errs := listed(t, c, "")
		require.Empty(t, errs)
		require.Equal(t, want, names(infos))
		for name, info := range infos {
			inspected, err := c.Inspect(context.Background(), name)
			require.NoError(t, err)
			require.Equal(t, inspected.Key, info.Key)
			require.Equal(t, inspected.Kind, info.Kind, name)
			require.Equal(t, holderIDs(inspected), holderIDs(info), name)
		}
		require.Equal(t, "host=a", infos["job"].Metadata)
		require.Len(t, infos["readers"].Holders, 2)
		require.Equal(t, 3, infos["pool"].Limit)

		for prefix, want := range map[string][]string{
			"a*": {"a*b"}, "a": {"a*b"}, "*": nil, "x?[y]": {`x?[y]\z`}, `x?[y]\`: {`x?[y]\z`}, "x": {`x?[y]\z`},
			"?": nil, "[": nil, "m": {"m1", "m2"}, "m1": {"m1"}, "job": {"job"}, "jobs": nil, "fenced": nil, "queued": nil,
		} {
			infos, errs := listed(t, c, prefix)
			require.Empty(t, errs)
			require.Equal(t, want, names(infos), "prefix %q", prefix)
		}
		other, errs := listed(t, redislock.New(b.rdb, quiet, redislock.WithKeyPrefix("other:")), "")
		require.Empty(t, errs)
		require.Equal(t, []string{"job"}, names(other), "its own key alone (a string is a lock to Inspect)")
	})
}

// countingHook counts the commands sent, by name, and the round trips (a
// pipeline is one).
type countingHook struct {
	mu    sync.Mutex
	calls map[string]int
	trips int
	// counts: the COUNT argument of every SCAN, each value once.
	counts []string
}

func (h *countingHook) scanCounts() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.counts)
}

func (h *countingHook) count(cmds ...redis.Cmder) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.calls == nil {
		h.calls = map[string]int{}
	}
	if len(cmds) > 1 || cmds[0].Name() != "hello" && cmds[0].Name() != "client" { // not a new connection's set-up
		h.trips++
	}
	for _, cmd := range cmds {
		h.calls[cmd.Name()]++
		if args := cmd.Args(); cmd.Name() == "scan" {
			count := "none"
			if i := slices.Index(args, any("count")); i >= 0 && i+1 < len(args) {
				count = fmt.Sprint(args[i+1])
			}
			if !slices.Contains(h.counts, count) {
				h.counts = append(h.counts, count)
			}
		}
	}
}

// get returns a copy of the counts so far.
func (h *countingHook) get() (calls map[string]int, trips int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return maps.Clone(h.calls), h.trips
}

func (h *countingHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *countingHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.count(cmd); return next(ctx, cmd) }
}
func (h *countingHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { h.count(cmds...); return next(ctx, cmds) }
}

// fillLocks writes n held locks, lock:{n0000}..., straight to Redis.
func fillLocks(t testing.TB, rdb redis.Cmdable, n int) {
	t.Helper()
	ctx := context.Background()
	pipe := rdb.Pipeline()
	for i := range n {
		pipe.Set(ctx, fmt.Sprintf("lock:{n%05d}", i), "TOKEN", time.Hour)
	}
	_, err := pipe.Exec(ctx)
	require.NoError(t, err)
}

// List scans with a bounded SCAN, inspects each batch of names in one
// round trip, and stops scanning when the loop breaks or ctx ends.
func TestListScansInBatchesAndStops(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		const n = 2500
		fillLocks(t, b.rdb, n)
		hook := &countingHook{}
		rdb := newRedisClient(t, b.rdb.Options().Addr)
		rdb.AddHook(hook)
		c := redislock.New(rdb, quiet)
		_, err := c.Inspect(ctx, "n00000") // loads the script, so that no NOSCRIPT doubles a trip
		require.NoError(t, err)

		before, tripsBefore := hook.get()
		infos, errs := listed(t, c, "n")
		require.Empty(t, errs)
		require.Len(t, infos, n)
		after, tripsAfter := hook.get()
		scans, inspections := after["scan"]-before["scan"], after["evalsha"]-before["evalsha"]
		require.Zero(t, after["keys"])
		require.Equal(t, n, inspections, "each name inspected once")
		require.Equal(t, []string{"1000"}, hook.scanCounts(), "every SCAN with COUNT 1000")
		if b.server != nil { // miniredis answers a SCAN with every key, whatever its COUNT
			require.Greater(t, scans, 1, "more than one SCAN call")
		}
		// Each SCAN call is a trip, and each pipeline of at most 100 names
		// one; a call returns about COUNT keys, split into batches.
		require.LessOrEqual(t, tripsAfter-tripsBefore, scans+n/100+scans)

		t.Run("a break stops the scan", func(t *testing.T) {
			before, _ := hook.get()
			for range c.List(ctx, "") {
				break
			}
			after, _ := hook.get()
			require.Equal(t, 1, after["scan"]-before["scan"])
			require.LessOrEqual(t, after["evalsha"]-before["evalsha"], 100, "one batch inspected")
		})

		t.Run("the end of ctx stops it, with ctx's error once", func(t *testing.T) {
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			before, _ := hook.get()
			var got, errs int
			var last error
			for _, err := range c.List(ctx, "") {
				if err != nil {
					errs++
					last = err
					continue
				}
				got++
				cancel()
			}
			after, _ := hook.get()
			require.Equal(t, 1, got, "nothing yielded after ctx ended")
			require.Equal(t, 1, errs)
			require.ErrorIs(t, last, context.Canceled)
			require.Equal(t, 1, after["scan"]-before["scan"])
		})
	})
}

func TestListRefusesBadArguments(t *testing.T) {
	c := redislock.New(newMini(t), quiet)
	first := func(c *redislock.Client, ctx context.Context, prefix string) (n int, err error) {
		for _, e := range c.List(ctx, prefix) {
			n++
			err = e
		}
		return n, err
	}
	//lint:ignore SA1012 a nil ctx is the bad input under test
	n, err := first(c, nil, "") //nolint:staticcheck
	require.Equal(t, 1, n)
	require.ErrorIs(t, err, redislock.ErrInvalidArgument)
	n, err = first(c, context.Background(), "}x")
	require.Equal(t, 1, n)
	require.ErrorIs(t, err, redislock.ErrInvalidArgument)
	n, err = first(&redislock.Client{}, context.Background(), "")
	require.Equal(t, 1, n)
	require.ErrorIs(t, err, redislock.ErrInvalidArgument)
	n, err = first(c, context.Background(), "nothing")
	require.Zero(t, n)
	require.NoError(t, err)
}

// On a quorum Client, List finds a name held on any node, with Nodes.
func TestListOnAQuorum(t *testing.T) {
	run := func(t *testing.T, nodes []redis.UniversalClient) {
		ctx := context.Background()
		c := newQuorum(t, nodes)
		l, err := c.Acquire(ctx, "job", redislock.WithMetadata("host=a"))
		require.NoError(t, err)
		defer func() { require.NoError(t, l.Release(ctx)) }()
		require.NoError(t, nodes[2].Set(ctx, "lock:{stale}", "TOKEN", time.Minute).Err())
		require.NoError(t, nodes[1].Set(ctx, "lock:{fenced}:fence", "7", 0).Err())
		infos, errs := listed(t, c, "")
		require.Empty(t, errs)
		require.Equal(t, []string{"job", "stale"}, names(infos))
		job := infos["job"]
		require.True(t, job.Held)
		require.Len(t, job.Nodes, 3)
		require.Equal(t, []redislock.HolderInfo{{ID: idOf(l), Metadata: "host=a", TTL: job.TTL}}, job.Holders)
		stale := infos["stale"]
		require.False(t, stale.Held, "one node of three")
		require.True(t, stale.Nodes[2].Held)
		require.False(t, stale.Nodes[0].Held)
	}
	t.Run("miniredis", func(t *testing.T) {
		var nodes []redis.UniversalClient
		for range 3 {
			nodes = append(nodes, newRedisClient(t, miniredis.RunT(t).Addr()))
		}
		run(t, nodes)
	})
	t.Run("redis-server", func(t *testing.T) {
		var nodes []redis.UniversalClient
		for _, n := range startQuorumServers(t, 3).nodes {
			nodes = append(nodes, n)
		}
		run(t, nodes)
	})
}

// On a Cluster, List scans every primary (not the replicas) and inspects
// each primary's names on it.
func TestListOnACluster(t *testing.T) {
	t.Parallel()
	cluster := redistest.SharedCluster(t)
	rdb := cluster.Client(t)
	c := redislock.New(rdb, quiet)
	want := holdEveryKind(t, c, rdb)
	const n = 300 // spread over the three primaries' slots
	fillLocks(t, rdb, n)
	for i := range n {
		want = append(want, fmt.Sprintf("n%05d", i))
	}
	slices.Sort(want)
	infos, errs := listed(t, c, "")
	require.Empty(t, errs)
	require.Equal(t, want, names(infos))
	part, errs := listed(t, c, "a*")
	require.Empty(t, errs)
	require.Equal(t, []string{"a*b"}, names(part))
	for _, name := range []string{"job", "pool", "readers", "m1"} {
		require.NotEmpty(t, infos[name].Holders, name)
	}
	var broke bool
	for _, err := range c.List(context.Background(), "") {
		require.NoError(t, err)
		broke = true
		break
	}
	require.True(t, broke)
}

// docs/security.md's line for List: Inspect's grants and +scan.
func TestListACL(t *testing.T) {
	server := redistest.Start(t)
	admin := newRedisClient(t, server.Addr())
	ctx := context.Background()
	l, err := redislock.New(admin, quiet).AcquireSemaphore(ctx, "acl-sem", 2)
	require.NoError(t, err)
	defer func() { require.NoError(t, l.Release(ctx)) }()
	rules := append([]string{"~lock:*", "resetchannels", "&lock:*", "+zcard", "+zcount", "+zrange", "+zscore", "+type", "+zrangebyscore"}, minimalACLCommands...)

	_, errs := listed(t, redislock.New(setACLUser(t, admin, "lister", rules...), quiet), "")
	require.Len(t, errs, 1, "without +scan")
	require.ErrorContains(t, errs[0], "NOPERM")
	infos, errs := listed(t, redislock.New(setACLUser(t, admin, "scanner", append(rules, "+scan")...), quiet), "")
	require.Empty(t, errs)
	require.Equal(t, []string{"acl-sem"}, names(infos))
}
