package redislock_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/internal/redistest"
)

// nodeRounds counts each lock's confirmed extensions and, at the first loss
// of a lock named in frozenBy, keeps a copy of the counts: what had been
// confirmed before that loss was signalled (the observer's calls are
// ordered by its mutex, so the copy needs no timing).
type nodeRounds struct {
	nopObserver
	mu       sync.Mutex
	frozenBy map[string]bool
	counts   map[string]int
	frozen   map[string]int
	lost     []redislock.LostEvent
}

func (o *nodeRounds) ObserveExtend(e redislock.ExtendEvent) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if e.Err == nil {
		o.counts[e.Name]++
	}
}

func (o *nodeRounds) ObserveLost(e redislock.LostEvent) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.lost = append(o.lost, e)
	if o.frozenBy[e.Name] && o.frozen == nil {
		o.frozen = make(map[string]int, len(o.counts))
		for name, n := range o.counts {
			o.frozen[name] = n
		}
	}
}

func (o *nodeRounds) snapshot() (counts, frozen map[string]int, lost []redislock.LostEvent) {
	o.mu.Lock()
	defer o.mu.Unlock()
	counts = make(map[string]int, len(o.counts))
	for name, n := range o.counts {
		counts[name] = n
	}
	return counts, o.frozen, append([]redislock.LostEvent(nil), o.lost...)
}

// TestAStalledClusterNodeDelaysOnlyTheLocksOnIt freezes one primary of a
// Cluster of the test's own (SIGSTOP: connections stay open, nothing
// answers) and checks that the watchdog goes on extending the locks on the
// other primaries meanwhile, and tells at once of a loss there, while the
// frozen primary's locks are lost, as Unreachable, at their safe deadline.
// With one pipeline across the Cluster, every extension waited for the
// frozen node's part until the round's deadline (issue 36).
func TestAStalledClusterNodeDelaysOnlyTheLocksOnIt(t *testing.T) {
	t.Parallel()
	// A node timeout far above the test's length: the frozen primary is
	// not failed over, so the other primaries keep answering (no CLUSTERDOWN).
	cluster := redistest.StartCluster(t, "--cluster-node-timeout", "60000")
	rdb := cluster.Client(t)
	ctx := context.Background()
	primaries := cluster.Primaries(t)
	require.Len(t, primaries, 3)
	stalled := primaries[0]

	names := append(namesOnEachPrimary(t, cluster, "stall-a"), namesOnEachPrimary(t, cluster, "stall-b")...)
	rounds := &nodeRounds{frozenBy: map[string]bool{}, counts: map[string]int{}}
	// TTL 2 s, extended every 100 ms: about 15 extensions fit between the
	// freeze and the frozen locks' safe deadline; the test asks for 3, so a
	// loaded machine that runs the watchdog late still passes.
	c := redislock.New(rdb, quiet, redislock.WithTTL(2*time.Second), redislock.WithExtendInterval(100*time.Millisecond),
		redislock.WithObserver(rounds))
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	locks := map[string]*redislock.Lock{}
	for _, name := range names {
		l, err := c.Acquire(ctx, name)
		require.NoError(t, err)
		locks[name] = l
		if stalled.Owns(clusterSlot(l.Key())) {
			rounds.frozenBy[name] = true
		}
	}
	require.Len(t, rounds.frozenBy, 2)
	// And one on each primary that nothing here ends but Close, which gives
	// them back (a TTL of a minute: still there unless released).
	var long []*redislock.Lock
	for _, name := range namesOnEachPrimary(t, cluster, "stall-long") {
		l, err := c.Acquire(ctx, name, redislock.WithTTL(time.Minute))
		require.NoError(t, err)
		long = append(long, l)
	}
	require.True(t, stalled.Owns(clusterSlot(long[0].Key())))
	// A healthy lock whose key is deleted while the node is frozen: its loss
	// must come at its next extension, not after the frozen node's deadline.
	var deleted *redislock.Lock
	for name, l := range locks {
		if !rounds.frozenBy[name] {
			deleted = l
			break
		}
	}

	owner := newRedisClient(t, cluster.Owner(t, clusterSlot(deleted.Key())).Addr) // (Owner asks the nodes: before the freeze)
	before, _, _ := rounds.snapshot()
	node := cluster.Server(stalled.Addr)
	node.Pause(t)
	t.Cleanup(func() { node.Resume(t) })
	require.NoError(t, owner.Del(ctx, deleted.Key()).Err())

	for name, l := range locks {
		if rounds.frozenBy[name] {
			// The safe deadline is at most 2 s away; 30 s leaves room for a loaded machine.
			waitDone(t, l.Context(), 30*time.Second)
			var lost *redislock.LostError
			require.True(t, errors.As(context.Cause(l.Context()), &lost), "%s: %v", name, context.Cause(l.Context()))
			require.Equal(t, redislock.Unreachable, lost.Reason, name)
		}
	}
	_, frozen, lostEvents := rounds.snapshot()
	require.NotNil(t, frozen)
	for name := range locks {
		t.Logf("%s: %d extensions confirmed between the freeze and the frozen primary's first loss", name, frozen[name]-before[name])
	}
	for name, l := range locks {
		switch {
		case rounds.frozenBy[name]:
		case l == deleted:
			require.Error(t, l.Context().Err(), "the deleted lock was found gone")
			require.Equal(t, redislock.Expired, lostEvents[0].Reason, "the first loss told is the deleted key's: %+v", lostEvents)
			require.Equal(t, name, lostEvents[0].Name)
		default:
			require.NoError(t, l.Context().Err(), "%s, on a primary that answers, is still held", name)
			require.GreaterOrEqual(t, frozen[name]-before[name], 3,
				"%s: extensions confirmed between the freeze and the frozen primary's first loss", name)
		}
	}

	// Close gives the locks back per node: the primaries that answer, whose
	// script cache is flushed (as a promoted replica's is: scripts are not
	// replicated), have the release sent again as EVAL at once, not after
	// the frozen primary's part gave up at Close's deadline.
	for _, p := range primaries[1:] {
		require.NoError(t, newRedisClient(t, p.Addr).ScriptFlush(ctx).Err())
	}
	// 2 s: two round trips on loopback for the primaries that answer, with
	// room for a loaded machine; the frozen one's release cannot end before.
	closeCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	require.ErrorIs(t, c.Close(closeCtx), context.DeadlineExceeded, "the frozen primary's lock is not confirmed released")
	for _, l := range long[1:] {
		require.Zero(t, rdb.Exists(ctx, l.Key()).Val(), "%s, on a primary that answers, was released by Close", l.Name())
	}
	node.Resume(t)
}

// clusterTrialsEnv sets how many rounds of failovers TestClusterFailover
// runs (default 1: one failover per go-redis setting). The figures in
// docs/RELIABILITY.md come from
//
//	REDISLOCK_CLUSTER_TRIALS=5 go test -count=1 -timeout 30m -run 'TestClusterFailover$' -v . | grep FIGURE
//
// and with REDISLOCK_CLUSTER_FULL_COVERAGE=no, the nodes started with
// cluster-require-full-coverage no (see docs/deployment.md).
const (
	clusterTrialsEnv   = "REDISLOCK_CLUSTER_TRIALS"
	clusterCoverageEnv = "REDISLOCK_CLUSTER_FULL_COVERAGE"
)

// holdWatch observes a holder Client: per lock, when its last confirmed
// extension was sent, and its loss.
type holdWatch struct {
	nopObserver
	mu        sync.Mutex
	confirmed map[string]time.Time
	lost      map[string]redislock.LostReason
	lostAt    map[string]time.Time
	lastErr   map[string]string // the last failed extension's error
	down      int               // extensions refused with CLUSTERDOWN
}

func (w *holdWatch) ObserveExtend(e redislock.ExtendEvent) {
	if e.Err != nil {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.lastErr[e.Name] = e.Err.Error()
		if strings.Contains(e.Err.Error(), "CLUSTERDOWN") {
			w.down++
		}
		return
	}
	sent := time.Now().Add(-e.Latency)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.confirmed[e.Name] = sent
}

func (w *holdWatch) ObserveLost(e redislock.LostEvent) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lost[e.Name] = e.Reason
	w.lostAt[e.Name] = time.Now()
}

// refusedPastLease tells whether name's last confirmed extension left a
// safe deadline (as the library reckons it: TTL less drift) that came
// before until, the end of the Cluster's refusal, and every extension
// after it was refused with CLUSTERDOWN (its last error says so).
func (w *holdWatch) refusedPastLease(name string, ttl time.Duration, until time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	confirmed := w.confirmed[name]
	return !confirmed.IsZero() && !until.IsZero() && confirmed.Add(ttl-ttl/100-2*time.Millisecond).Before(until) &&
		strings.Contains(w.lastErr[name], "CLUSTERDOWN")
}

// settled tells whether name was lost, or confirmed by an extension sent after since.
func (w *holdWatch) settled(name string, since time.Time) (lost bool, reason redislock.LostReason, kept bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	reason, lost = w.lost[name]
	return lost, reason, w.confirmed[name].After(since)
}

// TestClusterFailover kills (SIGKILL) one primary of a Cluster of its own
// (3 primaries, 3 replicas, cluster-node-timeout 1000) per failover, while
// two holder Clients hold 500 fenced locks each (TTL 2 s and 30 s) spread
// over the slots, for each go-redis setting: timeouts of 300 ms, and the
// defaults. Asserted, as issue 36 states them: no lock on the primaries
// that stay up is lost (they ride through the CLUSTERDOWN window, about a
// second until the promotion), no name has two holders, and another pod
// (go-redis defaults) that keeps trying fresh names in the failed-over slots
// gets one within 2 s of the promotion (ROLE says master), within 1 s in the
// median. Logged (FIGURE): how many locks on the dead primary survive, the
// kill-to-promotion time, and when a caller already waiting got in.
func TestClusterFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("the Cluster failover trials take about a minute: run without -short (CI does)")
	}
	t.Parallel()
	rounds := 1
	if v := os.Getenv(clusterTrialsEnv); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err, "%s=%q", clusterTrialsEnv, v)
		require.Positive(t, n, "%s", clusterTrialsEnv)
		rounds = n
	}
	args := []string{"--cluster-node-timeout", "1000"}
	if v := os.Getenv(clusterCoverageEnv); v != "" {
		args = append(args, "--cluster-require-full-coverage", v)
	}
	cluster := redistest.StartCluster(t, args...)
	settings := []struct {
		label string
		tweak func(*redis.ClusterOptions)
	}{
		{"timeouts 300 ms", func(o *redis.ClusterOptions) {
			o.DialTimeout, o.ReadTimeout, o.WriteTimeout = 300*time.Millisecond, 300*time.Millisecond, 300*time.Millisecond
		}},
		{"go-redis defaults", func(*redis.ClusterOptions) {}},
	}
	var back, waited []time.Duration
	var rows []string
	for round := range rounds {
		for i, setting := range settings {
			id := fmt.Sprintf("%d.%d", round, i)
			r := clusterFailover(t, cluster, id, round*len(settings)+i, setting.tweak)
			back = append(back, r.back)
			if r.waiterErr == nil {
				waited = append(waited, r.waited)
			}
			row := fmt.Sprintf("| %s | %s | %v | %s | %d | %d of %d (replica had %d) | %d of %d (replica had %d) | %d (+%d refused by their primary past the lease) of %d | %v | %v |", id, setting.label,
				r.promotion.Round(10*time.Millisecond), r.downWindow, r.clusterDown, r.survived[0], r.onVictim[0], r.onReplica[0], r.survived[1], r.onVictim[1], r.onReplica[1],
				r.healthyLost, r.refusedLost, r.healthy, r.back.Round(time.Millisecond), gotOrGaveUp(r.waiterErr, r.waited.Round(time.Millisecond)))
			t.Logf("FIGURE %s", row)
			rows = append(rows, row)
		}
	}
	t.Logf("FIGURE cluster failover: 3 primaries + 3 replicas, cluster-node-timeout 1000, SIGKILL of one primary per trial; two holders of 500 fenced locks each (TTL 2 s, TTL 30 s)")
	t.Logf("FIGURE | trial | go-redis | kill → promotion | CLUSTERDOWN on a primary that stayed up (after the kill) | extensions answered CLUSTERDOWN (retried) | TTL 2 s: kept on the dead primary | TTL 30 s: kept on the dead primary | lost on the other primaries | promotion → a fresh name taken (defaults) | promotion → the waiting caller's lock |")
	t.Logf("FIGURE |---|---|---|---|---|---|---|---|---|---|")
	for _, row := range rows {
		t.Logf("FIGURE %s", row)
	}
	ms := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
	t.Logf("FIGURE promotion → a fresh name taken, %d trials: median %v, max %v", len(back), ms(median(back)), ms(slices.Max(back)))
	if len(waited) > 0 {
		t.Logf("FIGURE promotion → the waiting caller's lock, %d of %d trials: median %v, max %v", len(waited), len(back), ms(median(waited)), ms(slices.Max(waited)))
	}
	// The bounds are the issue's. A pod that sees errors reloads the slot
	// map every 250 ms, and go-redis sends a command's third try by the new
	// map: about 0.3 s here, so a loaded machine still has room under 2 s.
	require.LessOrEqual(t, slices.Max(back), 2*time.Second, "promotion → a fresh name taken: %v", back)
	require.LessOrEqual(t, median(back), time.Second, "promotion → a fresh name taken: %v", back)
}

// median returns the middle of ds (of an even count, the mean of the two middles).
func median(ds []time.Duration) time.Duration {
	s := slices.Sorted(slices.Values(ds))
	return (s[(len(s)-1)/2] + s[len(s)/2]) / 2
}

// gotOrGaveUp is d, or the error that ended the wait.
func gotOrGaveUp(err error, d time.Duration) string {
	if err != nil {
		return "gave up: " + err.Error()
	}
	return d.String()
}

type clusterOutcome struct {
	promotion            time.Duration // SIGKILL → ROLE says master on the replica
	back                 time.Duration // promotion → a fresh name in a failed-over slot taken
	waited               time.Duration // promotion → the waiting caller's lock
	waiterErr            error
	onVictim, survived   [2]int // per holder (TTL 2 s, 30 s): locks on the dead primary, and kept
	onReplica            [2]int // of those, the keys the replica had at the kill
	healthy, healthyLost int
	// refusedLost: locks on the primaries that stayed up lost because those
	// primaries refused every command (CLUSTERDOWN) until after the lease's
	// safe deadline: Redis' verdict, not the Client's (see downWindow).
	refusedLost int
	clusterDown int    // extensions answered CLUSTERDOWN, and retried
	downWindow  string // when a primary that stayed up said cluster_state:fail
}

// clusterFailover runs one failover trial (see TestClusterFailover), and
// leaves the cluster healthy again: the killed node restarted, a replica.
func clusterFailover(t *testing.T, cluster *redistest.Cluster, id string, n int, tweak func(*redis.ClusterOptions)) clusterOutcome {
	ctx := context.Background()
	newRDB := func(tweak func(*redis.ClusterOptions)) *redis.ClusterClient {
		o := &redis.ClusterOptions{Addrs: cluster.Addrs()}
		tweak(o)
		rdb := redis.NewClusterClient(o)
		t.Cleanup(func() { _ = rdb.Close() })
		return rdb
	}
	defaults := func(*redis.ClusterOptions) {}
	primaries := cluster.Primaries(t)
	require.Len(t, primaries, 3)
	victim := primaries[n%len(primaries)]
	var replica string
	for _, node := range cluster.Topology(t) {
		if node.Of == victim.ID {
			replica = node.Addr
		}
	}
	require.NotEmpty(t, replica, "the replica of %s", victim.Addr)
	onVictim := func(name string) bool { return victim.Owns(clusterSlot("lock:{" + name + "}")) }

	var out clusterOutcome
	ttls := [2]time.Duration{2 * time.Second, 30 * time.Second}
	watches := [2]*holdWatch{}
	holders := [2]*redislock.Client{}
	locks := [2]map[string]*redislock.Lock{}
	for h, ttl := range ttls {
		watches[h] = &holdWatch{confirmed: map[string]time.Time{}, lost: map[string]redislock.LostReason{}, lostAt: map[string]time.Time{}, lastErr: map[string]string{}}
		holders[h] = redislock.New(newRDB(tweak), quiet, redislock.WithFencing(), redislock.WithTTL(ttl), redislock.WithObserver(watches[h]))
		locks[h] = map[string]*redislock.Lock{}
		for i := range 500 {
			name := fmt.Sprintf("held:%s:%v:%d", id, ttl, i)
			l, err := holders[h].Acquire(ctx, name)
			require.NoError(t, err)
			locks[h][name] = l
			if onVictim(name) {
				out.onVictim[h]++
			} else {
				out.healthy++
			}
		}
	}
	// Another pod, which knows the slot map from before the failure, takes
	// fresh names in the failed-over slots from the kill on.
	var fresh []string
	for i := 0; len(fresh) < 200; i++ {
		if name := fmt.Sprintf("fresh:%s:%d", id, i); onVictim(name) {
			fresh = append(fresh, name)
		}
	}
	comer := redislock.New(newRDB(defaults), quiet)
	warm, err := comer.Acquire(ctx, "warm:"+id)
	require.NoError(t, err)
	require.NoError(t, warm.Release(ctx))
	// And a caller already waiting, with a retry strategy, for a name on the
	// dead primary whose holder (watchdog off, TTL 2 s) took it right before the
	// kill: free again after the promotion, or about then.
	waitName := fresh[len(fresh)-1]
	blocker, err := redislock.New(newRDB(defaults), quiet).Acquire(ctx, waitName, redislock.WithWatchdog(false), redislock.WithTTL(2*time.Second))
	require.NoError(t, err)
	refused := make(chan struct{})
	waiterDone := make(chan error, 1)
	var waiterGot time.Time
	waiter := redislock.New(newRDB(defaults), quiet)
	go func() {
		waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		l, err := waiter.Acquire(waitCtx, waitName, redislock.WithRetry(&signalFirstRetry{refused: refused, every: 50 * time.Millisecond}))
		if err == nil {
			waiterGot = time.Now()
			err = l.Release(ctx)
		}
		waiterDone <- err
	}()
	<-refused
	require.NoError(t, blocker.Context().Err(), "the waiter waits for a held lock")

	// What the replica has at the kill: a key it lacks (replication is
	// asynchronous) is lost with the primary, whatever the holder does.
	replicaRDB := redis.NewClient(&redis.Options{Addr: replica})
	t.Cleanup(func() { _ = replicaRDB.Close() })
	for h := range holders {
		pipe := replicaRDB.Pipeline()
		pipe.Do(ctx, "READONLY")
		var exists []*redis.IntCmd
		for name, l := range locks[h] {
			if onVictim(name) {
				exists = append(exists, pipe.Exists(ctx, l.Key()))
			}
		}
		_, err := pipe.Exec(ctx)
		require.NoError(t, err)
		for _, e := range exists {
			out.onReplica[h] += int(e.Val())
		}
	}
	node := cluster.Server(victim.Addr)
	killed := time.Now()
	node.Kill()
	comeDone := make(chan time.Time, 1)
	go func() {
		defer close(comeDone)
		for _, name := range fresh[:len(fresh)-1] {
			if time.Since(killed) > 30*time.Second {
				return
			}
			attemptCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
			l, err := comer.Acquire(attemptCtx, name)
			cancel()
			if err == nil {
				comeDone <- time.Now()
				_ = l.Release(ctx)
				return
			}
			time.Sleep(10 * time.Millisecond) // pacing: a pod retrying, not a busy loop
		}
	}()
	// When another primary says the Cluster is down (cluster_state:fail,
	// as it then answers CLUSTERDOWN), until it is up again.
	// Both primaries that stay up are watched: the window is from the first
	// to say so to the last.
	type window struct {
		text  string
		until time.Time // the last time one said it (zero: never)
	}
	downDone := make(chan window, 1)
	go func() {
		var others []*redis.Client
		for i := 1; i < len(primaries); i++ {
			other := redis.NewClient(&redis.Options{Addr: primaries[(n+i)%len(primaries)].Addr})
			defer other.Close()
			others = append(others, other)
		}
		var first, last time.Duration
		for time.Since(killed) < 30*time.Second {
			down := false
			for _, other := range others {
				info, err := other.ClusterInfo(ctx).Result()
				down = down || err == nil && strings.Contains(info, "cluster_state:fail")
			}
			if down && first == 0 {
				first = time.Since(killed)
			}
			if down {
				last = time.Since(killed)
			} else if first > 0 || time.Since(killed) > 10*time.Second {
				break
			}
			time.Sleep(5 * time.Millisecond) // polling interval: the window lasts hundreds of ms
		}
		if first == 0 {
			downDone <- window{text: "never"}
			return
		}
		// (polled every 5 ms: the window ends within one poll of last)
		downDone <- window{fmt.Sprintf("%v–%v", first.Round(10*time.Millisecond), last.Round(10*time.Millisecond)), killed.Add(last + 5*time.Millisecond)}
	}()
	promoted := waitPrimary(t, replica, 30*time.Second)
	out.promotion = promoted.Sub(killed)
	came, ok := <-comeDone
	if out.back = came.Sub(promoted); !ok {
		out.back = time.Since(promoted) // counted as that long at least, and failed below
		t.Errorf("no fresh name in a failed-over slot was taken within 30 s of the kill (promotion after %v)", out.promotion)
	}
	// The waiter gets in as a fresh name is taken, by the same reloads,
	// when its wait rides through the errors of the outage (issue 36's
	// "waits ride through errors", acquire.go); else it fails closed.
	// Its ctx (30 s) outlasts the outage many times over: it must get in.
	out.waiterErr = <-waiterDone
	require.NoError(t, out.waiterErr, "the waiting caller rides through the outage")
	out.waited = waiterGot.Sub(promoted)
	require.LessOrEqual(t, out.waited, 2*time.Second, "promotion → the waiting caller's lock")

	// Each lock is lost, or confirmed by an extension sent after the
	// promotion: up to an extend interval (10 s at TTL 30 s) and its retries.
	lostAfter := [2]map[redislock.LostReason][]time.Duration{{}, {}} // the dead primary's locks lost: when, after the kill
	var lastErr [2]string
	down := <-downDone
	out.downWindow = down.text
	for h := range holders {
		for name := range locks[h] {
			eventually(t, time.Minute, func() bool { lost, _, kept := watches[h].settled(name, promoted); return lost || kept },
				"%s neither lost nor extended within a minute of the promotion", name)
			lost, reason, _ := watches[h].settled(name, promoted)
			switch {
			case !onVictim(name) && lost && watches[h].refusedPastLease(name, ttls[h], down.until):
				// Its own primary answered CLUSTERDOWN to every extension
				// until after the lease's safe deadline (a slow promotion, as
				// on a loaded machine; cluster-require-full-coverage yes):
				// no Client could have kept it. Counted, not failed.
				out.refusedLost++
			case !onVictim(name) && lost:
				out.healthyLost++
				t.Errorf("%s, on a primary that stayed up, was lost: %v", name, reason)
			case onVictim(name) && !lost:
				out.survived[h]++
			case lost:
				require.Contains(t, []redislock.LostReason{redislock.Unreachable, redislock.Expired}, reason, name)
				w := watches[h]
				lostAfter[h][reason] = append(lostAfter[h][reason], w.lostAt[name].Sub(killed))
				lastErr[h] = cmp.Or(lastErr[h], w.lastErr[name])
			}
		}
	}
	for h, w := range watches {
		out.clusterDown += w.down
		for reason, after := range lostAfter[h] {
			t.Logf("FIGURE %s: TTL %v, on the dead primary, %d lost %v %v–%v after the kill (promotion after %v); an extension's error: %s", id, ttls[h],
				len(after), reason, slices.Min(after).Round(10*time.Millisecond), slices.Max(after).Round(10*time.Millisecond), out.promotion.Round(10*time.Millisecond), lastErr[h])
		}
	}

	// Never two holders: another pod tries every name once; it may take only
	// what its holder was told it lost, with a greater fence.
	sweeper := redislock.New(newRDB(defaults), quiet)
	for h := range holders {
		for name, held := range locks[h] {
			l, err := sweeper.Acquire(ctx, name, redislock.WithFencing())
			if errors.Is(err, redislock.ErrNotAcquired) {
				continue
			}
			require.NoError(t, err, name)
			require.Error(t, held.Context().Err(), "%s: a second holder while the first was not told", name)
			require.Greater(t, l.Fence(), held.Fence(), name)
			require.NoError(t, l.Release(ctx))
		}
	}
	for _, c := range append(holders[:], comer, waiter, sweeper) {
		closeCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		require.NoError(t, c.Close(closeCtx))
		cancel()
	}
	// Back as a replica of the promoted node (it keeps its nodes.conf).
	node.Restart(t)
	cluster.WaitHealthy(t)
	return out
}

// waitPrimary polls ROLE on addr until it says master, and returns when it first did.
func waitPrimary(t *testing.T, addr string, within time.Duration) time.Time {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		role, err := rdb.Do(context.Background(), "ROLE").Slice()
		if err == nil && len(role) > 0 && role[0] == "master" {
			return time.Now()
		}
		time.Sleep(5 * time.Millisecond) // polling interval: the figures are in hundreds of ms
	}
	t.Fatalf("%s did not become a primary within %v", addr, within)
	return time.Time{}
}
