package redislock

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// One node's failure stays on that node. On a Cluster, what the library
// sends for many locks at once (the watchdog's extensions, the give-backs
// of Close and the janitor) goes out as one round trip per node, each
// node's replies handled as they arrive: one go-redis pipeline across the
// Cluster returns only once its slowest node's part has given up, and with
// a dead primary that was after the locks on the other primaries had run
// out (issue 36). And when a reply says the slot map may be stale, go-redis
// is asked to reload it (see slotMap).

// nodeOf names the primary of key's slot as the cluster client's map has it
// ("" when it has none, and for any other client). The batcher's lanes, the
// watchdog's rounds and eachNode split by it.
func nodeOf(ctx context.Context, c *redis.ClusterClient, key string) string {
	if c != nil {
		if node, err := c.MasterForKey(ctx, key); err == nil {
			return node.Options().Addr
		}
	}
	return ""
}

// node names the node of key's slot on a Cluster (see nodeOf).
func (s singleStore) node(key string) string {
	c, _ := s.rdb.(*redis.ClusterClient)
	return nodeOf(context.Background(), c, key)
}

// eachNode runs send for each node's part of refs at once, and returns
// when all have: the replies and errors in refs' order.
func (s singleStore) eachNode(refs []*lockRef, send func(refs []*lockRef) ([]int64, []error)) ([]int64, []error) {
	groups := map[string][]int{}
	for i, ref := range refs {
		node := s.node(ref.key)
		groups[node] = append(groups[node], i)
	}
	if len(groups) < 2 {
		return send(refs)
	}
	replies, errs := make([]int64, len(refs)), make([]error, len(refs))
	var wg sync.WaitGroup
	for _, at := range groups {
		wg.Go(func() {
			part := make([]*lockRef, len(at))
			for j, i := range at {
				part[j] = refs[i]
			}
			r, e := send(part)
			for j, i := range at {
				replies[i], errs[i] = r[j], e[j]
			}
		})
	}
	wg.Wait()
	return replies, errs
}

// slotMap asks go-redis to reload a Cluster's slot map when a reply says
// it may be stale: a connection refused, cut or timed out, CLUSTERDOWN,
// MOVED (after go-redis's own redirections) or READONLY. go-redis itself
// reloads on MOVED, and otherwise every ClusterStateReloadInterval (60 s by
// default): after a failover, the commands for the failed-over slots went
// on dialling the dead primary for 7 to 46 s (issue 36). A command under
// way does not tell us until go-redis has given up (4 tries of 5 dials by
// default, 1.6 s), so from the first such error it reloads at once and then
// every reloadEvery, from a timer (a goroutine only while it runs), until
// none came for followFor: the first reload after the promotion has a
// command's next try (go-redis picks the node again from its map after the
// second) reach the new primary. ReloadState loads in the background, on
// go-redis's goroutine, which ends within its 200 ms cooldown. nil (any
// other client) does nothing.
type slotMap struct {
	rdb     *redis.ClusterClient
	mu      sync.Mutex  // guards what follows
	failed  time.Time   // when the last such error came
	timer   *time.Timer // set while reloads follow errors
	stopped bool        // by Client.Close: no more timers
}

const (
	// reloadEvery: 4 CLUSTER SLOTS a second at most, per Client.
	reloadEvery = 250 * time.Millisecond
	// followFor: longer than go-redis takes to give up on a command
	// whose node is dead (1.6 s with its defaults), so that reloads go on
	// while every command to the failed-over slots is stuck in there.
	followFor = 2 * time.Second
)

func newSlotMap(rdb redis.UniversalClient) *slotMap {
	if c, ok := rdb.(*redis.ClusterClient); ok {
		return &slotMap{rdb: c}
	}
	return nil
}

// note starts the reloads if err says the map may be stale (see slotMap).
func (m *slotMap) note(err error) {
	if m == nil || err == nil || err == redis.Nil || !staleMap(err) {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.failed = time.Now()
	if m.timer == nil && !m.stopped {
		m.timer = time.AfterFunc(0, m.reload)
	}
}

// reload asks for a reload and comes again after reloadEvery, while errors
// came within followFor.
func (m *slotMap) reload() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopped || time.Since(m.failed) >= followFor {
		m.timer = nil
		return
	}
	m.rdb.ReloadState(context.Background())
	m.timer.Reset(reloadEvery)
}

func (s singleStore) stop() { s.slots.stop() }

// stop ends the reloads (Client.Close).
func (m *slotMap) stop() {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopped = true; m.timer != nil {
		m.timer.Stop()
		m.timer = nil
	}
}

// staleMap tells whether err is one a node gives when it is not where the
// map says, or gone. A connection's failure counts, a timeout included
// (go-redis's dial, read and write timeouts: a SIGSTOPped or partitioned
// primary only times out). A command that never left the batcher's queue
// says nothing of its node, nor one whose caller's ctx ended (on its way,
// or go-redis's ctx error; context.DeadlineExceeded is a net.Error too): on
// a Cluster every waiter that gave up had the map reloaded.
func staleMap(err error) bool {
	var unsent unsentError
	var way *onItsWay
	var op *net.OpError
	var netErr net.Error
	_, moved := redis.IsMovedError(err)
	switch {
	case errors.As(err, &unsent) || errors.As(err, &way):
		return false
	case errors.As(err, &op): // (a dial's timeout matches context.DeadlineExceeded)
		return true
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		return false
	}
	return errors.As(err, &netErr) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || moved ||
		redis.IsClusterDownError(err) || redis.IsReadOnlyError(err)
}
