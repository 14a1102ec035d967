package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/internal/redistest"
)

// failoverTrialsEnv sets how many failover trials TestSentinel runs per
// row (default 3, to keep CI short). The figures in docs/deployment.md come from
//
//	REDISLOCK_FAILOVER_TRIALS=50 go test -count=1 -timeout 60m -run 'TestSentinel$/failover' -v .
const failoverTrialsEnv = "REDISLOCK_FAILOVER_TRIALS"

// TestSentinel runs against one real Sentinel deployment: a primary, a
// replica and three sentinels on loopback.
func TestSentinel(t *testing.T) {
	t.Parallel()
	set := redistest.SharedSentinel(t)
	rdb := set.Client(t)
	ctx := context.Background()

	t.Run("every feature works through a FailoverClient", func(t *testing.T) {
		clock := &extensionClock{}
		c := redislock.New(rdb, quiet, redislock.WithFencing())
		// A 1s lease, past it: lost only if an extension is held up for
		// 660 ms (300 ms is within a loaded machine's stalls).
		l, err := c.Acquire(ctx, "job", redislock.WithTTL(time.Second), redislock.WithObserver(clock))
		require.NoError(t, err)
		require.Positive(t, l.Fence())
		_, err = c.Acquire(ctx, "job")
		require.ErrorIs(t, err, redislock.ErrNotAcquired)
		eventually(t, 10*time.Second, func() bool { _, n := clock.last(); return n >= 4 || l.Context().Err() != nil }, "the watchdog extended the lock")
		require.NoError(t, l.Context().Err(), "still held")
		require.NoError(t, l.Extend(ctx, time.Minute))
		require.NoError(t, l.Release(ctx))

		err = c.RunWithLock(ctx, "job", func(ctx context.Context) error {
			fence, ok := redislock.FenceFromContext(ctx)
			require.True(t, ok)
			require.Greater(t, fence, l.Fence())
			return nil
		})
		require.NoError(t, err)
	})

	t.Run("Inspect and Break through a FailoverClient", func(t *testing.T) {
		inspectAndBreakOn(t, rdb)
	})

	t.Run("with WithReplicaAck the replica has the lock when Acquire returns", func(t *testing.T) {
		replica := newRedisClient(t, set.Replica(t).Addr())
		c := redislock.New(rdb, quiet, redislock.WithReplicaAck(1, 5*time.Second), redislock.WithFencing())
		for i := range 20 {
			l, err := c.Acquire(ctx, "acked:"+strconv.Itoa(i))
			require.NoError(t, err)
			// No polling: WAIT returned only once the replica had applied it.
			require.Equal(t, l.Token(), replica.Get(ctx, l.Key()).Val())
			require.Equal(t, strconv.FormatInt(l.Fence(), 10), replica.Get(ctx, l.Key()+":fence").Val())
			require.NoError(t, l.Release(ctx))
		}
	})

	t.Run("Elect passes leadership on at a release and at a dead leader's lease end", func(t *testing.T) {
		testElectOn(t, func(t *testing.T) redis.UniversalClient { return set.Client(t) }, "sentinel-leader")
	})

	t.Run("failover right after acquiring: a second holder only without replica ack", func(t *testing.T) {
		if testing.Short() {
			t.Skip("the failover trials take about 80 s: run without -short (CI does)")
		}
		trials := 3
		if v := os.Getenv(failoverTrialsEnv); v != "" {
			n, err := strconv.Atoi(v)
			require.NoError(t, err, "%s=%q", failoverTrialsEnv, v)
			require.Positive(t, n, "%s", failoverTrialsEnv)
			trials = n
		}
		cells := []struct {
			scenario string
			dropLink bool
			mode     string
			ack      bool
		}{
			{"replica in sync", false, "no replica ack", false},
			{"replica in sync", false, "WithReplicaAck(1, 1s)", true},
			{"replica link dropped just before", true, "no replica ack", false},
			{"replica link dropped just before", true, "WithReplicaAck(1, 1s)", true},
		}
		tallies := make([]failoverTally, len(cells))
		start := time.Now()
		for i := range trials {
			for c, cell := range cells { // interleaved, so every cell sees the same conditions
				name := fmt.Sprintf("failover:%d:%d", i, c)
				t.Logf("trial %d of %d: %s, %s: acquiring, then SIGKILL to the primary", i+1, trials, cell.scenario, cell.mode)
				outcome := failoverTrial(t, set, name, cell.dropLink, cell.ack)
				tallies[c].add(outcome)
				t.Logf("trial %d, %s, %s: held %v, ErrReplicaAck %v, second holder %v, promotion after %v",
					i+1, cell.scenario, cell.mode, outcome.held, outcome.ackRefused, outcome.double, outcome.failover.Round(10*time.Millisecond))
			}
		}
		t.Logf("%d trials per row in %v. The first client acquires, the primary is killed (SIGKILL) as soon as Acquire returns, Sentinel promotes the replica, a second client tries the same lock:", trials, time.Since(start).Round(time.Second))
		t.Logf("| scenario | mode | trials | first client held the lock | refused by ErrReplicaAck | second client also acquired it | average kill-to-promotion |")
		t.Logf("|---|---|---|---|---|---|---|")
		for c, cell := range cells {
			tally := tallies[c]
			t.Logf("| %s | %s | %d | %d | %d | **%d** | %v |", cell.scenario, cell.mode, tally.trials, tally.held, tally.ackRefused, tally.doubles, tally.averageFailover())
		}
		for c, cell := range cells {
			require.Equal(t, trials, tallies[c].trials)
			if cell.ack {
				require.Zero(t, tallies[c].doubles, "%s, %s: the promoted replica acknowledged every lock held", cell.scenario, cell.mode)
			} else {
				require.Equal(t, trials, tallies[c].held, "%s, %s: without replica ack every acquisition succeeds", cell.scenario, cell.mode)
			}
		}
	})
}

type failoverOutcome struct {
	held       bool // the first client acquired the lock
	ackRefused bool // the first client got ErrReplicaAck instead
	double     bool // the second client acquired the lock the first held
	failover   time.Duration
}

type failoverTally struct {
	trials, held, ackRefused, doubles, promotions int
	failover                                      time.Duration
}

func (f *failoverTally) add(o failoverOutcome) {
	f.trials++
	if o.held {
		f.held++
		f.promotions++
		f.failover += o.failover
	}
	if o.ackRefused {
		f.ackRefused++
	}
	if o.double {
		f.doubles++
	}
}

func (f *failoverTally) averageFailover() time.Duration {
	if f.promotions == 0 {
		return 0
	}
	return (f.failover / time.Duration(f.promotions)).Round(10 * time.Millisecond)
}

// failoverTrial has one client acquire name (with WithReplicaAck(1, 1s) if
// ack), kills the primary with SIGKILL as soon as Acquire returns, waits for
// Sentinel to promote the replica, and has a second client (its own
// failover client: another pod) try the same lock on the new primary. With
// dropLink, the primary first drops its replica's connection (CLIENT KILL
// TYPE replica), as a network blip would: the replica reconnects within
// about a second, so a write made in between reaches it only then. The
// killed server then rejoins as a replica, so the next trial starts from a
// healthy set.
func failoverTrial(t *testing.T, set *redistest.SentinelSet, name string, dropLink, ack bool) failoverOutcome {
	t.Helper()
	ctx := context.Background()
	podA := redis.NewFailoverClient(set.FailoverOptions())
	defer podA.Close()
	require.NoError(t, podA.Ping(ctx).Err(), "a warm connection, so that Acquire is one round trip")
	primary := set.Primary(t)
	opts := []redislock.Option{quiet, redislock.WithWatchdog(false), redislock.WithTTL(time.Minute)}
	if ack {
		opts = append(opts, redislock.WithReplicaAck(1, time.Second))
	}

	if dropLink {
		direct := redis.NewClient(&redis.Options{Addr: primary.Addr()})
		dropped, err := direct.Do(ctx, "CLIENT", "KILL", "TYPE", "replica").Int64()
		_ = direct.Close()
		require.NoError(t, err)
		require.EqualValues(t, 1, dropped, "the replica's link was dropped")
	}
	held, err := redislock.New(podA, opts...).Acquire(ctx, name)
	if err != nil {
		require.True(t, ack, "without replica ack the first client acquires: %v", err)
		require.ErrorIs(t, err, redislock.ErrReplicaAck)
		set.WaitHealthy(t) // the replica reconnects by itself
		return failoverOutcome{ackRefused: true}
	}
	primary.Kill()
	killed := time.Now()
	set.WaitPromotion(t, primary)
	failover := time.Since(killed)

	podB := redis.NewFailoverClient(set.FailoverOptions())
	defer podB.Close()
	second, err := redislock.New(podB, quiet, redislock.WithWatchdog(false)).Acquire(ctx, name)
	if err == nil {
		require.NoError(t, second.Release(ctx))
	} else {
		require.ErrorIs(t, err, redislock.ErrNotAcquired, "the second client either gets the lock or is refused")
	}
	// The first holder's release reaches the new primary (the failover
	// client follows the switch): it deletes the lock where it survived and
	// finds it gone where it did not. Either way its timers stop.
	if releaseErr := held.Release(ctx); releaseErr != nil && !errors.Is(releaseErr, redislock.ErrNotHeld) {
		t.Logf("release by the first holder: %v", releaseErr)
	}
	set.Rejoin(t, primary)
	return failoverOutcome{held: true, double: err == nil, failover: failover}
}

// TestSentinelFailoverIsBackWithinASecond measures, on a Sentinel set of its
// own, how soon locks work again after the sentinels announce the promoted
// replica (+switch-master, the first announcement any sentinel makes): the
// first Acquire of a fresh name (NoRetry, tried again at once until one
// succeeds), and a caller that was already waiting with a retry strategy
// when the primary was killed (it rides through the outage). go-redis's
// default FailoverOptions. The figures go to the log (FIGURE lines, see
// docs/RELIABILITY.md); the test checks that every trial ends in both locks.
//
//	go test -count=1 -run 'TestSentinelFailoverIsBackWithinASecond' -v . | grep FIGURE
func TestSentinelFailoverIsBackWithinASecond(t *testing.T) {
	if testing.Short() {
		t.Skip("five failovers take about a minute: run without -short (CI does)")
	}
	t.Parallel()
	set := redistest.StartSentinel(t)
	const trials = 5
	var first, waiter, promotion []time.Duration
	for i := range trials {
		f, w, p := sentinelSwitchTrial(t, set, "switch:"+strconv.Itoa(i))
		first, waiter, promotion = append(first, f), append(waiter, w), append(promotion, p)
		t.Logf("FIGURE sentinel trial %d: kill to +switch-master %v; then first Acquire %v, waiting caller %v",
			i+1, p.Round(time.Millisecond), f.Round(time.Millisecond), w.Round(time.Millisecond))
	}
	for _, row := range []struct {
		what string
		d    []time.Duration
	}{{"first Acquire after +switch-master", first}, {"waiting caller in after +switch-master", waiter}, {"kill to +switch-master", promotion}} {
		median, worst := medianAndMax(row.d)
		t.Logf("FIGURE sentinel %s: median %v, max %v over %d trials", row.what, median.Round(time.Millisecond), worst.Round(time.Millisecond), trials)
	}
	// The bounds: back within a second of +switch-master (median),
	// none over two. A caller's next try after the switch goes to the new
	// primary (go-redis's failover client asks the sentinels on a refused
	// dial), measured at about 0.1 s: a loaded machine has room under both.
	for _, row := range []struct {
		what string
		d    []time.Duration
	}{{"first Acquire after +switch-master", first}, {"waiting caller in after +switch-master", waiter}} {
		median, worst := medianAndMax(row.d)
		require.LessOrEqual(t, median, time.Second, "%s: %v", row.what, row.d)
		require.LessOrEqual(t, worst, 2*time.Second, "%s: %v", row.what, row.d)
	}
}

func medianAndMax(d []time.Duration) (median, worst time.Duration) {
	sorted := slices.Clone(d)
	slices.Sort(sorted)
	return sorted[len(sorted)/2], sorted[len(sorted)-1]
}

// sentinelSwitchTrial: a holder takes name, a waiter queues for it with an
// hour's backoff and a 30 s ctx, the lock is made to expire (replicated
// before the kill: the lock is free on the promoted replica), the primary is
// killed (SIGKILL) at once; from the first
// +switch-master on, fresh names are tried until one is taken. It returns the
// times from the switch to that first acquisition and to the waiter's, and
// from the kill to the switch; the killed server rejoins as a replica.
func sentinelSwitchTrial(t *testing.T, set *redistest.SentinelSet, name string) (first, waiter, promotion time.Duration) {
	t.Helper()
	ctx := context.Background()
	switched := make(chan time.Time, len(set.SentinelAddrs()))
	for _, addr := range set.SentinelAddrs() {
		sc := redis.NewSentinelClient(&redis.Options{Addr: addr})
		defer sc.Close()
		sub := sc.Subscribe(ctx, "+switch-master")
		_, err := sub.Receive(ctx) // subscribed before the kill
		require.NoError(t, err)
		go func() {
			if _, err := sub.ReceiveMessage(ctx); err == nil {
				switched <- time.Now()
			}
		}()
		defer sub.Close()
	}
	holder := redislock.New(set.Client(t), quiet, redislock.WithWatchdog(false), redislock.WithTTL(time.Minute))
	held, err := holder.Acquire(ctx, name)
	require.NoError(t, err)
	waiting := redislock.New(set.Client(t), quiet)
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	in := make(chan error, 1)
	var waiterAt time.Time
	go func() {
		l, err := waiting.Acquire(waitCtx, name, redislock.WithRetry(redislock.LinearBackoff(time.Hour)))
		waiterAt = time.Now()
		if err == nil {
			err = l.Release(ctx)
		}
		in <- err
	}()
	primary := set.Primary(t)
	direct := newRedisClient(t, primary.Addr())
	eventually(t, 10*time.Second, func() bool { return direct.ZCard(ctx, queueKey(name)).Val() == 1 }, "the waiter did not queue")

	freshRDB := set.Client(t) // another pod's, connected before the failover
	require.NoError(t, freshRDB.Ping(ctx).Err())
	fresh := redislock.New(freshRDB, quiet)
	require.NoError(t, direct.PExpire(ctx, held.Key(), time.Millisecond).Err())
	require.EqualValues(t, 1, direct.Do(ctx, "WAIT", 1, 5000).Val(), "the replica has the expiry")
	primary.Kill()
	killed := time.Now()
	var switchAt time.Time
	select {
	case switchAt = <-switched:
	case <-time.After(time.Minute):
		t.Fatal("no +switch-master within a minute of the kill")
	}
	for n := 0; ; n++ {
		attemptCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		l, err := fresh.Acquire(attemptCtx, name+":fresh:"+strconv.Itoa(n))
		cancel()
		if err == nil {
			first = time.Since(switchAt)
			require.NoError(t, l.Release(ctx))
			break
		}
		require.Less(t, time.Since(switchAt), 30*time.Second, "no Acquire succeeded within 30 s of the switch: %v", err)
	}
	select {
	case err := <-in:
		require.NoError(t, err, "the waiting caller rides through the failover into the lock")
	case <-time.After(40 * time.Second):
		t.Fatal("the waiting caller did not return within 40 s")
	}
	set.WaitPromotion(t, primary)
	set.Rejoin(t, primary)
	return first, waiterAt.Sub(switchAt), switchAt.Sub(killed)
}
