package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"net"
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

// TestCluster runs against one real Redis Cluster (3 primaries, 3
// replicas), started once for all its subtests to keep CI short; each
// subtest flushes the primaries when it ends.
func TestCluster(t *testing.T) {
	t.Parallel()
	cluster := redistest.SharedCluster(t)
	rdb := cluster.Client(t)
	flush := func(t *testing.T) {
		t.Cleanup(func() {
			ctx := context.Background()
			for _, p := range cluster.Primaries(t) {
				require.NoError(t, newRedisClient(t, p.Addr).FlushAll(ctx).Err())
			}
		})
	}

	t.Run("every feature works through a ClusterClient", func(t *testing.T) {
		flush(t)
		ctx := context.Background()
		clock := &extensionClock{}
		c := redislock.New(rdb, quiet, redislock.WithFencing())

		l, err := c.Acquire(ctx, "job", redislock.WithTTL(time.Second), redislock.WithObserver(clock))
		require.NoError(t, err)
		require.Positive(t, l.Fence())
		_, err = c.Acquire(ctx, "job")
		require.ErrorIs(t, err, redislock.ErrNotAcquired)

		// The watchdog keeps a 1s lease alive past 1s; lost only if an
		// extension is held up for 660 ms (300 ms is within a loaded
		// machine's stalls).
		eventually(t, 10*time.Second, func() bool { _, n := clock.last(); return n >= 4 || l.Context().Err() != nil }, "the watchdog extended the lock")
		require.NoError(t, l.Context().Err(), "still held")
		require.Equal(t, l.Token(), rdb.Get(ctx, l.Key()).Val())

		require.NoError(t, l.Extend(ctx, time.Minute))
		ttl, err := l.TTL(ctx)
		require.NoError(t, err)
		require.Greater(t, ttl, 50*time.Second)
		require.NoError(t, l.Release(ctx))
		require.Zero(t, rdb.Exists(ctx, l.Key()).Val())

		var second int64
		err = c.RunWithLock(ctx, "job", func(ctx context.Context) error {
			fence, ok := redislock.FenceFromContext(ctx)
			require.True(t, ok)
			require.Greater(t, fence, l.Fence(), "the counter lives on with the lock")
			second = fence
			return nil
		})
		require.NoError(t, err)
		require.Equal(t, strconv.FormatInt(second, 10), rdb.Get(ctx, "lock:{job}:fence").Val())
	})

	t.Run("Inspect and Break through a ClusterClient", func(t *testing.T) {
		flush(t)
		inspectAndBreakOn(t, rdb)
	})

	t.Run("1000 lock names spread over all three primaries, and fencing works on each", func(t *testing.T) {
		flush(t)
		ctx := context.Background()
		c := redislock.New(rdb, quiet, redislock.WithFencing(), redislock.WithWatchdog(false), redislock.WithTTL(time.Minute))
		primaries := cluster.Primaries(t)
		require.Len(t, primaries, 3)

		expected := map[string]int{} // keys per primary, from the slot map
		var locks []*redislock.Lock
		for i := range 1000 {
			l, err := c.Acquire(ctx, fmt.Sprintf("spread:%d", i))
			require.NoError(t, err)
			require.Positive(t, l.Fence())
			locks = append(locks, l)
			for _, p := range primaries {
				if p.Owns(clusterSlot(l.Key())) {
					expected[p.Addr] += 2 // the lock and its fence counter
				}
			}
		}
		counts := map[string]int{}
		for _, p := range primaries {
			n, err := newRedisClient(t, p.Addr).DBSize(ctx).Result()
			require.NoError(t, err)
			counts[p.Addr] = int(n)
			require.Greater(t, counts[p.Addr], 0, "primary %s holds no lock", p.Addr)
		}
		t.Logf("keys per primary (lock + fence counter): %v", counts)
		require.Equal(t, expected, counts, "every key is where its slot says")

		// Fencing on each primary: a second holder gets the next number,
		// and the counter sits on the same node as the lock.
		for _, p := range primaries {
			direct := newRedisClient(t, p.Addr)
			for i, l := range locks {
				if !p.Owns(clusterSlot(l.Key())) {
					continue
				}
				require.NoError(t, l.Release(ctx))
				again, err := c.Acquire(ctx, l.Name())
				require.NoError(t, err)
				require.Greater(t, again.Fence(), l.Fence(), "on %s", p.Addr)
				require.Equal(t, strconv.FormatInt(again.Fence(), 10), direct.Get(ctx, l.Key()+":fence").Val(), "the counter is on %s", p.Addr)
				require.Equal(t, again.Token(), direct.Get(ctx, l.Key()).Val(), "the lock is on %s", p.Addr)
				locks[i] = again
				break
			}
		}
		for _, l := range locks {
			require.NoError(t, l.Release(ctx))
		}
		for _, p := range primaries {
			require.EqualValues(t, counts[p.Addr]/2, newRedisClient(t, p.Addr).DBSize(ctx).Val(), "only the fence counters remain on %s", p.Addr)
		}
	})

	t.Run("a waiter on each primary gets the lock when it is released", func(t *testing.T) {
		flush(t)
		ctx := context.Background()
		c := redislock.New(rdb, quiet, redislock.WithFencing())
		names := namesOnEachPrimary(t, cluster, "wait")

		type result struct {
			lock *redislock.Lock
			err  error
		}
		results := make([]chan result, len(names))
		refused := make([]chan struct{}, len(names))
		var holders []*redislock.Lock
		for i, name := range names {
			holder, err := c.Acquire(ctx, name)
			require.NoError(t, err)
			holders = append(holders, holder)
			results[i], refused[i] = make(chan result, 1), make(chan struct{})
			go func() {
				waitCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
				defer cancel()
				retry := &signalFirstRetry{refused: refused[i], every: 5 * time.Millisecond}
				l, err := c.Acquire(waitCtx, name, redislock.WithRetry(retry))
				results[i] <- result{l, err}
			}()
		}
		for i := range names {
			select {
			case <-refused[i]: // the waiter found the lock held and is polling
			case <-time.After(10 * time.Second):
				t.Fatalf("waiter %d never tried", i)
			}
			require.NoError(t, holders[i].Release(ctx))
		}
		for i, name := range names {
			select {
			case r := <-results[i]:
				require.NoError(t, r.err, name)
				require.Greater(t, r.lock.Fence(), holders[i].Fence(), "the waiter is the next holder of %s", name)
				require.NoError(t, r.lock.Release(ctx))
			case <-time.After(30 * time.Second):
				t.Fatalf("waiter for %s never returned", name)
			}
		}
	})

	t.Run("a release on any primary wakes its waiter before the backoff", func(t *testing.T) {
		flush(t)
		ctx := context.Background()
		c := redislock.New(rdb, quiet)
		for _, name := range namesOnEachPrimary(t, cluster, "notify") {
			holder, err := c.Acquire(ctx, name, redislock.WithTTL(time.Minute))
			require.NoError(t, err)
			refused := make(chan struct{})
			result := make(chan error, 1)
			go func() {
				// Polling alone would next try at the holder's TTL (1m),
				// long after this context ends.
				waitCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
				defer cancel()
				l, err := c.Acquire(waitCtx, name, redislock.WithRetry(&signalFirstRetry{refused: refused, every: time.Hour}))
				if err == nil {
					err = l.Release(ctx)
				}
				result <- err
			}()
			<-refused
			require.NoError(t, holder.Release(ctx))
			require.NoError(t, <-result, "the waiter for %s was woken by the release (sharded pub/sub)", name)
		}
	})

	t.Run("another Client's waiter on each primary takes the lock handed to it without a claim", func(t *testing.T) {
		flush(t)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		holders := redislock.New(rdb, quiet)
		wrdb := cluster.Client(t)
		attempts := redislock.CountAcquireScript()
		wrdb.AddHook(attempts)
		waiter := redislock.New(wrdb, quiet)
		for _, name := range namesOnEachPrimary(t, cluster, "handed") {
			key := "lock:{" + name + "}"
			holder, err := holders.Acquire(ctx, name, redislock.WithTTL(time.Minute))
			require.NoError(t, err)
			before := attempts.Calls()
			got := pod{c: waiter}.waitFor(ctx, name, redislock.WithTTL(time.Minute))
			eventually(t, 10*time.Second, func() bool { return rdb.ZCard(ctx, key+":q").Val() == 1 }, "the waiter for %s did not queue", name)
			// It tries, subscribes (SSUBSCRIBE), and tries once more.
			eventually(t, 10*time.Second, func() bool { return attempts.Calls() >= before+2 }, "the waiter for %s did not settle", name)
			before = attempts.Calls()
			released := time.Now()
			require.NoError(t, holder.Release(ctx))
			g := <-got
			require.NoError(t, g.err, name)
			stalledPastRefresh(t, attempts.Calls()-before, released, name)
			require.Equal(t, g.l.Token(), rdb.Get(ctx, key).Val())
			eventually(t, 10*time.Second, func() bool { return rdb.PTTL(ctx, key).Val() > 20*time.Second }, "the lease of %s was not extended to the waiter's TTL", name)
			require.NoError(t, g.l.Release(ctx))
		}
	})

	t.Run("Elect passes leadership on at a release and at a dead leader's lease end", func(t *testing.T) {
		flush(t)
		testElectOn(t, func(t *testing.T) redis.UniversalClient { return cluster.Client(t) }, "cluster-leader")
	})

	t.Run("a held lock survives the migration of its slot with no second holder", func(t *testing.T) {
		flush(t)
		testSlotMigration(t, cluster, rdb)
	})
}

// namesOnEachPrimary returns one lock name per primary, each hashing to a
// slot that primary owns.
func namesOnEachPrimary(t *testing.T, cluster *redistest.Cluster, prefix string) []string {
	t.Helper()
	var names []string
	for _, p := range cluster.Primaries(t) {
		for i := 0; ; i++ {
			name := prefix + ":" + strconv.Itoa(i)
			if p.Owns(clusterSlot("lock:{" + name + "}")) {
				names = append(names, name)
				break
			}
		}
	}
	return names
}

// signalFirstRetry polls every interval and closes refused when the first
// attempt has found the lock held.
type signalFirstRetry struct {
	refused chan struct{}
	every   time.Duration
	once    sync.Once
}

func (s *signalFirstRetry) NextBackoff(int) (time.Duration, bool) {
	s.once.Do(func() { close(s.refused) })
	return s.every, true
}

// migrationPhase is where a slot migration stands; the contender files each
// attempt under the phase in which it started.
type migrationPhase int32

const (
	beforeMigration migrationPhase = iota
	slotMigrating                  // IMPORTING/MIGRATING set, keys on the source
	keysSplit                      // the fence counter moved, the lock not yet
	keysMoved                      // both keys on the target, slot still migrating
	migrationDone                  // the slot is assigned to the target
	migrationPhases
)

func (p migrationPhase) String() string {
	return [...]string{"before", "slot migrating", "keys split", "keys moved", "done"}[p]
}

func testSlotMigration(t *testing.T, cluster *redistest.Cluster, rdb *redis.ClusterClient) {
	ctx := context.Background()
	const name = "migrating"
	key := "lock:{" + name + "}"
	slot := clusterSlot(key)
	source := cluster.Owner(t, slot)
	var target redistest.ClusterNode
	for _, p := range cluster.Primaries(t) {
		if p.ID != source.ID {
			target = p
			break
		}
	}
	sourceRdb, targetRdb := newRedisClient(t, source.Addr), newRedisClient(t, target.Addr)
	targetHost, targetPort, err := net.SplitHostPort(target.Addr)
	require.NoError(t, err)
	migrate := func(key string) {
		t.Helper()
		require.NoError(t, sourceRdb.Do(ctx, "MIGRATE", targetHost, targetPort, "", 0, 5000, "KEYS", key).Err(), "MIGRATE %s", key)
	}

	clock := &extensionClock{}
	holderClient := redislock.New(rdb, quiet, redislock.WithFencing(), redislock.WithTTL(time.Second), redislock.WithObserver(clock))
	held, err := holderClient.Acquire(ctx, name)
	require.NoError(t, err)
	require.Positive(t, held.Fence())

	// A second "pod" with its own cluster client tries to take the lock
	// without pause through every phase of the migration.
	var phase atomic.Int32
	var mu sync.Mutex
	tally := make([]map[string]int, migrationPhases)
	for i := range tally {
		tally[i] = map[string]int{}
	}
	attempts := func(p migrationPhase) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, count := range tally[p] {
			n += count
		}
		return n
	}
	contender := redislock.New(cluster.Client(t), quiet, redislock.WithFencing())
	stop := make(chan struct{})
	contenderDone := make(chan struct{})
	go func() {
		defer close(contenderDone)
		for {
			select {
			case <-stop:
				return
			default:
			}
			p := migrationPhase(phase.Load())
			attemptCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
			l, err := contender.Acquire(attemptCtx, name)
			cancel()
			outcome := "not acquired"
			switch {
			case err == nil:
				outcome = "ACQUIRED WHILE HELD"
				_ = l.Release(ctx)
			case errors.Is(err, redislock.ErrNotAcquired):
			case strings.Contains(err.Error(), "TRYAGAIN"):
				outcome = "TRYAGAIN"
			default:
				outcome = "error: " + err.Error()
			}
			mu.Lock()
			tally[p][outcome]++
			mu.Unlock()
		}
	}()
	enter := func(p migrationPhase) {
		t.Helper()
		phase.Store(int32(p))
		// The contender's next two attempts start in this phase.
		start := attempts(p)
		eventually(t, 20*time.Second, func() bool { return attempts(p) >= start+2 }, "the contender made no attempt in phase %v", p)
	}

	enter(beforeMigration)
	require.NoError(t, targetRdb.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", source.ID).Err())
	require.NoError(t, sourceRdb.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", target.ID).Err())
	enter(slotMigrating)

	// A lock that does not exist yet, in the same slot: the source answers
	// ASK, and the script runs on the target (after ASKING). Without
	// fencing it is one key, and it is taken there.
	siblings := siblingNames(t, slot, 3)
	fresh, err := holderClient.Acquire(ctx, siblings[0], redislock.WithFencing(), redislock.WithWatchdog(false), redislock.WithTTL(time.Minute))
	require.ErrorContains(t, err, "TRYAGAIN", "two keys missing on an importing node: Redis refuses a multi-key script until the slot is settled")
	require.NotErrorIs(t, err, redislock.ErrNotAcquired)
	fresh, err = redislock.New(rdb, quiet).Acquire(ctx, siblings[1], redislock.WithWatchdog(false), redislock.WithTTL(time.Minute))
	require.NoError(t, err, "acquiring a new unfenced lock in a migrating slot")
	// A waiter's attempt names the queue's keys too, which do not exist
	// on either node: Redis refuses it with TRYAGAIN, and the library
	// falls back to the one-key script (no queue until the slot settles).
	// Its release names them too, and falls back the same way.
	waited, err := redislock.New(rdb, quiet).Acquire(ctx, siblings[2], redislock.WithWatchdog(false),
		redislock.WithRetry(redislock.LimitRetry(redislock.LinearBackoff(time.Millisecond), 3)))
	require.NoError(t, err, "a waiting acquisition of a new lock in a migrating slot")
	require.Equal(t, waited.Token(), rdb.Get(ctx, waited.Key()).Val(), "taken (on the importing node, which the ClusterClient reaches by ASK)")
	require.NoError(t, waited.Release(ctx), "released while the slot is migrating")
	require.Zero(t, rdb.Exists(ctx, waited.Key()).Val())

	migrate(key + ":fence")
	enter(keysSplit)
	require.NoError(t, held.Extend(ctx, time.Second), "extending while the keys are split (the lock key is still on the source)")

	migrate(key)
	extensions := func() int { _, n := clock.last(); return n }
	before := extensions()
	enter(keysMoved)
	eventually(t, 10*time.Second, func() bool { return extensions() > before }, "the watchdog extended through ASK")
	require.NoError(t, held.Extend(ctx, time.Second), "extending after the keys moved, before the slot is reassigned")

	for _, p := range []redistest.ClusterNode{target, source} {
		require.NoError(t, newRedisClient(t, p.Addr).Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", target.ID).Err())
	}
	for _, p := range cluster.Primaries(t) {
		if p.ID != source.ID && p.ID != target.ID {
			require.NoError(t, newRedisClient(t, p.Addr).Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", target.ID).Err())
		}
	}
	cluster.WaitHealthy(t)
	require.Equal(t, target.ID, cluster.Owner(t, slot).ID)
	before = extensions()
	enter(migrationDone)
	eventually(t, 10*time.Second, func() bool { return extensions() > before }, "the watchdog extended after MOVED")

	close(stop)
	<-contenderDone
	mu.Lock()
	for p, outcomes := range tally {
		t.Logf("contender in phase %-14v %v", migrationPhase(p), outcomes)
		require.Zero(t, outcomes["ACQUIRED WHILE HELD"], "a second holder in phase %v", migrationPhase(p))
	}
	require.Positive(t, tally[keysSplit]["TRYAGAIN"], "with the keys split, Redis answers TRYAGAIN")
	mu.Unlock()

	require.NoError(t, held.Context().Err(), "the watchdog kept the lock: %v", context.Cause(held.Context()))
	require.Equal(t, held.Token(), targetRdb.Get(ctx, key).Val(), "the lock is on the target")
	require.Equal(t, fresh.Token(), targetRdb.Get(ctx, fresh.Key()).Val(), "the lock taken during the migration is on the target")
	require.Zero(t, targetRdb.Exists(ctx, "lock:{"+siblings[0]+"}", "lock:{"+siblings[0]+"}:fence").Val(), "the refused fenced acquisition left nothing")
	late, err := holderClient.Acquire(ctx, siblings[0], redislock.WithWatchdog(false))
	require.NoError(t, err, "the fenced lock refused during the migration is taken once the slot is settled")
	require.Positive(t, late.Fence())
	require.NoError(t, late.Release(ctx))
	require.NoError(t, held.Extend(ctx, time.Minute))
	require.NoError(t, held.Release(ctx))
	require.NoError(t, fresh.Release(ctx))

	require.Equal(t, strconv.FormatInt(held.Fence(), 10), targetRdb.Get(ctx, key+":fence").Val(), "the fence counter moved with the lock")
	next, err := contender.Acquire(ctx, name)
	require.NoError(t, err, "free after release")
	require.Greater(t, next.Fence(), held.Fence())
	require.NoError(t, next.Release(ctx))
}

// siblingNames returns n lock names, other than "migrating", whose keys
// hash to slot.
func siblingNames(t *testing.T, slot, n int) []string {
	t.Helper()
	var names []string
	for i := 0; i < 10_000_000 && len(names) < n; i++ {
		name := "sibling:" + strconv.Itoa(i)
		if clusterSlot("lock:{"+name+"}") == slot {
			names = append(names, name)
		}
	}
	require.Len(t, names, n, "names for slot %d", slot)
	return names
}
