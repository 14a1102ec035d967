package redislock_test

// Fence trials (issue 14): each fault that loses the fence counter or brings
// it back older, on real servers, repeated. Every trial asserts the
// invariant (no fence handed out after the fault is at or below one handed
// out before it) and that the holder is told; the rest is measured and
// logged on lines starting with FIGURE. docs/RELIABILITY.md collects them:
//
//	REDISLOCK_FENCE_TRIALS=20 go test -count=1 -timeout 30m -run 'TestFenceTrials' -v . | grep FIGURE
//
// and with REDISLOCK_FENCE_TRIALS_WATCH=off, the same without the restart
// watch.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/internal/redistest"
)

// fenceTrialsEnv sets how many trials TestFenceTrials runs per fault
// (default 2, to keep CI short).
const fenceTrialsEnv = "REDISLOCK_FENCE_TRIALS"

// fenceTrialsWatchEnv set to "off" runs the trials without the restart
// watch (see restartwatch.go), to measure what it changes.
const fenceTrialsWatchEnv = "REDISLOCK_FENCE_TRIALS_WATCH"

// fenceTrialTTL is short, so that a trial lasts about a second; the extend
// interval is the default, TTL/3.
const fenceTrialTTL = 2 * time.Second

// toldWithin bounds the wait for a holder to be told it lost its lock: far
// above the TTL, after which the safe deadline tells it even if Redis never
// answers.
const toldWithin = 10 * time.Second

func fenceTrialCount(t *testing.T) int {
	t.Helper()
	v := os.Getenv(fenceTrialsEnv)
	if v == "" {
		return 2
	}
	n, err := strconv.Atoi(v)
	require.NoError(t, err, "%s=%q", fenceTrialsEnv, v)
	require.Positive(t, n, "%s", fenceTrialsEnv)
	return n
}

// fenceRig is one fault, on servers of its own.
type fenceRig struct {
	fault string
	// dial returns a new go-redis client on the deployment (one per
	// instance: the holder and the contender each have their own).
	dial func(t *testing.T) redis.UniversalClient
	// midway, if set, runs after the first two of the fences taken before
	// the fault (a snapshot, a dropped replica link).
	midway func(t *testing.T)
	// beforeHold, if set, runs after the four fences taken before the
	// fault, right before the holder acquires.
	beforeHold func(t *testing.T)
	// randomPhase: wait a random part of the extend interval between the
	// holder's acquisition and the fault, so that the fault lands anywhere
	// in the watchdog's cycle, as it would in production. Not a
	// synchronisation: the trial measures whatever phase it gets.
	randomPhase bool
	// inject breaks the deployment while name is held and returns when the
	// server answers again (for faults without an outage: when the fault
	// is done), with what it saw, for the trial's log line.
	inject func(t *testing.T, name string, before []int64) (back time.Time, note string)
	// after, if set, restores the deployment for the next trial (not
	// run after the last).
	after func(t *testing.T, name string)
}

// fenceTrialOutcome is what one trial measured.
type fenceTrialOutcome struct {
	regressions int  // fences after the fault at or below one before it
	lost        bool // the holder was told it lost the lock
	reason      redislock.LostReason
	told        time.Duration // server answering again -> holder told
	overlap     bool          // another Client acquired while the holder still believed it held
	window      time.Duration // that Client's Acquire returning -> holder told
	held        time.Duration // how long the lock was held when the fault began
	note        string
}

// TestFenceTrials runs each fault that loses or rolls back the fence
// counter on real servers, fenceTrialCount times: a holder (TTL 2 s,
// default extend interval) holds a fenced lock, the fault strikes, another
// Client (another instance) tries the same name as soon as the server
// answers again. Fences must never go backwards; the holder must be told.
func TestFenceTrials(t *testing.T) {
	trials := fenceTrialCount(t)
	watch := "on"
	if v := os.Getenv(fenceTrialsWatchEnv); v != "" {
		require.Contains(t, []string{"on", "off"}, v, "%s", fenceTrialsWatchEnv)
		watch = v
	}
	if watch == "off" {
		defer redislock.DisableRestartWatch()()
	}
	type row struct {
		fault    string
		outcomes []fenceTrialOutcome
	}
	var rows []row
	run := func(name string, rig func(t *testing.T) fenceRig) {
		t.Run(name, func(t *testing.T) {
			r := rig(t)
			start := time.Now()
			var outcomes []fenceTrialOutcome
			for i := range trials {
				lockName := fmt.Sprintf("trial-%d", i)
				t.Logf("trial %d of %d: %s", i+1, trials, name)
				o := fenceTrial(t, r, lockName)
				outcomes = append(outcomes, o)
				if o.lost {
					t.Logf("trial %d: fault after %v of holding, regressions %d, lost (%v), told %v after the server answered, two holders %v for %v; %s",
						i+1, o.held.Round(time.Millisecond), o.regressions, o.reason, o.told.Round(time.Millisecond), o.overlap, o.window.Round(time.Millisecond), o.note)
				} else {
					t.Logf("trial %d: regressions %d, the lock survived; %s", i+1, o.regressions, o.note)
				}
				if r.after != nil && i < trials-1 {
					r.after(t, lockName)
				}
			}
			t.Logf("%d trials in %v", trials, time.Since(start).Round(100*time.Millisecond))
			rows = append(rows, row{r.fault, outcomes})
		})
	}
	run("restart without persistence", restartRig)
	run("restart from an older RDB snapshot", snapshotRig)
	run("restart with AOF and appendfsync always", aofRig)
	run("allkeys-lru eviction", evictionRig)
	run("FLUSHALL", flushRig)
	run("Sentinel failover without WithReplicaAck", failoverRig)

	t.Logf("FIGURE fence trials: restart watch %s, TTL %v, extend interval TTL/3 (the default), %d trials per fault; two holders: from the second Client's Acquire returning to the first holder's context cancelled; told: from the server answering again to the holder's context cancelled", watch, fenceTrialTTL, trials)
	t.Logf("FIGURE | fault | trials | fence regressions | two-holder windows (count, max) | time to be told (p50 / max) | losses by reason |")
	t.Logf("FIGURE |---|---|---|---|---|---|")
	for _, r := range rows {
		t.Logf("FIGURE | %s | %d | **%d** | %s | %s | %s |", r.fault, len(r.outcomes), sumRegressions(r.outcomes), windowCell(r.outcomes), toldCell(r.outcomes), reasonCell(r.outcomes))
	}
}

// fenceTrial takes four fences for name (calling rig.midway after two and
// rig.beforeHold after four), then holds it (a fifth), injects the fault, has another Client acquire
// name, and takes three more fences after it, each of which must be above
// every fence before the fault.
func fenceTrial(t *testing.T, rig fenceRig, name string) fenceTrialOutcome {
	t.Helper()
	ctx := context.Background()
	holderRDB, contenderRDB := rig.dial(t), rig.dial(t)
	defer func() { _ = holderRDB.Close(); _ = contenderRDB.Close() }()
	opts := []redislock.Option{quiet, redislock.WithFencing(), redislock.WithTTL(fenceTrialTTL)}
	holder, contender := redislock.New(holderRDB, opts...), redislock.New(contenderRDB, opts...)
	defer func() {
		closeCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_ = holder.Close(closeCtx)
		_ = contender.Close(closeCtx)
	}()
	take := func(c *redislock.Client) int64 {
		t.Helper()
		// Waiting a little: a lock lost to the fault may still be
		// held by the other Client until it releases.
		waitCtx, cancel := context.WithTimeout(ctx, toldWithin)
		defer cancel()
		l, err := c.Acquire(waitCtx, name, redislock.WithRetry(redislock.ExponentialBackoff(5*time.Millisecond, 100*time.Millisecond)))
		require.NoError(t, err)
		if err := l.Release(ctx); err != nil {
			require.ErrorIs(t, err, redislock.ErrNotHeld)
		}
		return l.Fence()
	}

	var before []int64
	before = append(before, take(holder), take(holder))
	if rig.midway != nil {
		rig.midway(t)
	}
	before = append(before, take(holder), take(holder))
	if rig.beforeHold != nil {
		rig.beforeHold(t)
	}
	held, err := holder.Acquire(ctx, name)
	require.NoError(t, err)
	before = append(before, held.Fence())
	toldAt := lossStamp(held.Context())
	heldSince := time.Now()
	if rig.randomPhase {
		<-time.After(rand.N(fenceTrialTTL / 3))
	}
	heldFor := time.Since(heldSince)

	back, note := rig.inject(t, name, before)
	var o fenceTrialOutcome
	o.note, o.held = note, heldFor
	var after []int64
	second, err := contender.Acquire(ctx, name)
	acquiredAt := time.Now()
	stillBelieved := held.Context().Err() == nil
	if err == nil {
		after = append(after, second.Fence())
		o.overlap = stillBelieved
	} else {
		// The lock survived the fault (a replica that had it): the
		// holder keeps it, and must not be told otherwise.
		require.ErrorIs(t, err, redislock.ErrNotAcquired)
	}

	// The holder is told, whatever the fault: by the watchdog finding the
	// key gone or taken, or by the safe deadline. Unless the lock survived.
	if err == nil || held.Context().Err() != nil {
		at := toldAt(t, toldWithin)
		var lost *redislock.LostError
		require.ErrorAs(t, context.Cause(held.Context()), &lost)
		o.lost, o.reason, o.told = true, lost.Reason, at.Sub(back)
		if o.overlap {
			o.window = at.Sub(acquiredAt)
		}
	}
	if second != nil {
		if err := second.Release(ctx); err != nil {
			require.ErrorIs(t, err, redislock.ErrNotHeld)
		}
	}
	if releaseErr := held.Release(ctx); releaseErr != nil {
		require.True(t, o.lost, "the surviving lock is released: %v", releaseErr)
		require.ErrorIs(t, releaseErr, redislock.ErrNotHeld)
	}
	after = append(after, take(contender), take(holder), take(contender))

	highest := slices.Max(before)
	for i, fence := range after {
		if fence <= highest {
			o.regressions++
		}
		if i > 0 {
			require.Greater(t, fence, after[i-1], "fences after the fault keep growing")
		}
	}
	require.Zero(t, o.regressions, "%s: fences after the fault %v, before it %v", rig.fault, after, before)
	return o
}

func fenceCounter(name string) string { return "lock:{" + name + "}:fence" }

// dialServer dials a single server.
func dialServer(server *redistest.Server) func(t *testing.T) redis.UniversalClient {
	return func(*testing.T) redis.UniversalClient {
		return redis.NewClient(&redis.Options{Addr: server.Addr()})
	}
}

// restartRig: SIGKILL, then an empty server on the same port (no save, no
// AOF): the lock and the counter are gone.
func restartRig(t *testing.T) fenceRig {
	server := redistest.Start(t)
	admin := newRedisClient(t, server.Addr())
	return fenceRig{
		fault:       "restart without persistence (SIGKILL, `save \"\"`, `appendonly no`)",
		dial:        dialServer(server),
		randomPhase: true,
		inject: func(t *testing.T, name string, _ []int64) (time.Time, string) {
			server.Restart(t)
			back := time.Now()
			n, err := admin.Exists(context.Background(), "lock:{"+name+"}", fenceCounter(name)).Result()
			require.NoError(t, err)
			require.Zero(t, n, "the restarted server forgot the lock and the counter")
			return back, "lock and counter gone"
		},
	}
}

// snapshotRig: SAVE after two fences, two more fences and the hold, then
// SIGKILL and a restart that loads that dump: the counter is back at the
// second fence, older than the three after it.
func snapshotRig(t *testing.T) fenceRig {
	server := redistest.Start(t) // its own --dir: the dump is loaded on restart
	admin := newRedisClient(t, server.Addr())
	return fenceRig{
		fault:       "restart from an older RDB snapshot (SAVE, 3 more fences, SIGKILL)",
		dial:        dialServer(server),
		randomPhase: true,
		midway: func(t *testing.T) {
			require.NoError(t, admin.Save(context.Background()).Err())
		},
		inject: func(t *testing.T, name string, before []int64) (time.Time, string) {
			server.Restart(t)
			back := time.Now()
			counter, err := admin.Get(context.Background(), fenceCounter(name)).Int64()
			require.NoError(t, err, "the dump has the counter")
			require.Equal(t, before[1], counter, "the counter came back from the snapshot, older than the last fences")
			last := before[len(before)-1]
			return back, fmt.Sprintf("counter restored %d fences (%v of server clock) behind", len(before)-2, (time.Duration(last-counter) * time.Microsecond).Round(10*time.Microsecond))
		},
	}
}

// aofRig: SIGKILL and a restart that replays an AOF synced on every
// write: the lock and the counter survive, the holder keeps its lock. The
// control row: what persistence buys.
func aofRig(t *testing.T) fenceRig {
	server := redistest.Start(t, "--appendonly", "yes", "--appendfsync", "always")
	admin := newRedisClient(t, server.Addr())
	return fenceRig{
		fault:       "restart with `appendonly yes`, `appendfsync always` (SIGKILL)",
		dial:        dialServer(server),
		randomPhase: true,
		inject: func(t *testing.T, name string, before []int64) (time.Time, string) {
			server.Restart(t)
			back := time.Now()
			counter, err := admin.Get(context.Background(), fenceCounter(name)).Int64()
			require.NoError(t, err, "the AOF has the counter")
			require.Equal(t, before[len(before)-1], counter, "the counter survived")
			return back, "the restarted server had the key and the counter"
		},
	}
}

// evictionRig: a 4 MB server with allkeys-lru, filled with junk until the
// held lock's key is evicted.
func evictionRig(t *testing.T) fenceRig {
	server := redistest.Start(t, "--maxmemory", "4mb", "--maxmemory-policy", "allkeys-lru")
	admin := newRedisClient(t, server.Addr())
	junk := strings.Repeat("j", 1024)
	return fenceRig{
		fault:       "`allkeys-lru` eviction (4 MB `maxmemory`, filled with 1 KB keys until the lock key goes)",
		dial:        dialServer(server),
		randomPhase: true,
		inject: func(t *testing.T, name string, _ []int64) (time.Time, string) {
			ctx := context.Background()
			deadline := time.Now().Add(30 * time.Second)
			written := 0
			for {
				pipe := admin.Pipeline()
				for range 100 {
					pipe.Set(ctx, "junk:"+name+":"+strconv.Itoa(written), junk, 0)
					written++
				}
				exists := pipe.Exists(ctx, "lock:{"+name+"}")
				_, err := pipe.Exec(ctx)
				require.NoError(t, err)
				if exists.Val() == 0 {
					break
				}
				require.True(t, time.Now().Before(deadline), "the lock key was not evicted after %d junk keys", written)
			}
			gone := time.Now()
			counter := "counter kept"
			if admin.Exists(ctx, fenceCounter(name)).Val() == 0 {
				counter = "counter evicted too"
			}
			return gone, fmt.Sprintf("lock key evicted after %d KB of junk, %s", written, counter)
		},
		after: func(t *testing.T, _ string) {
			// Room for the next trial's fences; this trial's name is
			// not used again.
			require.NoError(t, admin.FlushAll(context.Background()).Err())
		},
	}
}

// flushRig: FLUSHALL while the lock is held.
func flushRig(t *testing.T) fenceRig {
	server := redistest.Start(t)
	admin := newRedisClient(t, server.Addr())
	return fenceRig{
		fault:       "FLUSHALL",
		dial:        dialServer(server),
		randomPhase: true,
		inject: func(t *testing.T, _ string, _ []int64) (time.Time, string) {
			require.NoError(t, admin.FlushAll(context.Background()).Err())
			return time.Now(), "everything gone"
		},
	}
}

// failoverRig: a primary, a replica and three sentinels. Right before the
// holder acquires, the primary drops its replica's link (CLIENT KILL TYPE
// replica, as a network blip would); the primary is killed (SIGKILL) as
// soon as the holder has the lock, and Sentinel promotes the replica. When
// the replica was not back in time, it has neither the lock nor the last
// fence; when it was, the holder keeps its lock. The killed server rejoins
// as a replica for the next trial.
func failoverRig(t *testing.T) fenceRig {
	if testing.Short() {
		t.Skip("the Sentinel failover trials take about 20 s: run without -short (CI does)")
	}
	set := redistest.SharedSentinel(t)
	var killed *redistest.Server
	t.Cleanup(func() {
		// The set is shared: the server the last trial killed rejoins.
		if killed != nil && killed.PID() == 0 {
			set.Rejoin(t, killed)
		}
	})
	return fenceRig{
		fault: "Sentinel failover without WithReplicaAck (replica link dropped, primary SIGKILLed right after the acquisition)",
		dial: func(*testing.T) redis.UniversalClient {
			return redis.NewFailoverClient(set.FailoverOptions())
		},
		beforeHold: func(t *testing.T) {
			// Asked now, so that the kill follows the acquisition at once.
			killed = set.Primary(t)
			direct := redis.NewClient(&redis.Options{Addr: killed.Addr()})
			defer direct.Close()
			dropped, err := direct.Do(context.Background(), "CLIENT", "KILL", "TYPE", "replica").Int64()
			require.NoError(t, err)
			require.EqualValues(t, 1, dropped, "the replica's link was dropped")
		},
		inject: func(t *testing.T, name string, before []int64) (time.Time, string) {
			killed.Kill()
			killedAt := time.Now()
			promoted := set.WaitPromotion(t, killed)
			back := time.Now()
			promotion := fmt.Sprintf("promoted %v after the kill", back.Sub(killedAt).Round(10*time.Millisecond))
			direct := redis.NewClient(&redis.Options{Addr: promoted.Addr()})
			defer direct.Close()
			counter, err := direct.Get(context.Background(), fenceCounter(name)).Int64()
			if errors.Is(err, redis.Nil) {
				return back, promotion + ", without the counter"
			}
			require.NoError(t, err)
			missed := slices.Index(before, counter)
			if missed < 0 {
				return back, fmt.Sprintf("%s, counter at %d", promotion, counter)
			}
			return back, fmt.Sprintf("%s, its counter %d fences behind", promotion, len(before)-1-missed)
		},
		after: func(t *testing.T, _ string) {
			set.Rejoin(t, killed)
		},
	}
}

func sumRegressions(outcomes []fenceTrialOutcome) int {
	n := 0
	for _, o := range outcomes {
		n += o.regressions
	}
	return n
}

func windowCell(outcomes []fenceTrialOutcome) string {
	n, longest := 0, time.Duration(0)
	for _, o := range outcomes {
		if o.overlap {
			n++
			longest = max(longest, o.window)
		}
	}
	if n == 0 {
		return "0"
	}
	return fmt.Sprintf("%d, max %v", n, longest.Round(time.Millisecond))
}

func toldCell(outcomes []fenceTrialOutcome) string {
	var told []time.Duration
	for _, o := range outcomes {
		if o.lost {
			told = append(told, o.told)
		}
	}
	if len(told) == 0 {
		return "n/a (no lock lost)"
	}
	slices.Sort(told)
	cell := fmt.Sprintf("%v / %v", told[(len(told)-1)/2].Round(time.Millisecond), told[len(told)-1].Round(time.Millisecond))
	if early := slices.IndexFunc(told, func(d time.Duration) bool { return d >= 0 }); early != 0 {
		if early < 0 {
			early = len(told)
		}
		cell += fmt.Sprintf(", %d told before the server answered again", early)
	}
	if len(told) < len(outcomes) {
		cell += fmt.Sprintf(" (%d of %d lost the lock)", len(told), len(outcomes))
	}
	return cell
}

func reasonCell(outcomes []fenceTrialOutcome) string {
	counts := map[redislock.LostReason]int{}
	var reasons []redislock.LostReason
	for _, o := range outcomes {
		if !o.lost {
			continue
		}
		if counts[o.reason] == 0 {
			reasons = append(reasons, o.reason)
		}
		counts[o.reason]++
	}
	slices.Sort(reasons)
	parts := make([]string, 0, len(reasons))
	for _, r := range reasons {
		parts = append(parts, fmt.Sprintf("%v %d", r, counts[r]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
