package redislock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

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
