package redislock

import (
	"context"
	"errors"
	"net"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redislock/redislock/internal/redistest"
)

// sendGate is a go-redis hook that holds the acquire attempts (SET and the
// acquire script) a client sends, alone or in a pipeline, until the test
// opens the gate for each kind, and records the keys of the attempts of
// every round trip. Releases pass.
type sendGate struct {
	single, pipeline chan struct{} // closed: open
	opened           [2]sync.Once
	held             atomic.Int32 // sends waiting at the gate
	heldPipelines    atomic.Int32 // of which pipelines
	mu               sync.Mutex
	trips            [][]string
}

func newSendGate() *sendGate {
	return &sendGate{single: make(chan struct{}), pipeline: make(chan struct{})}
}

// openSingle lets commands sent alone through; openPipeline, pipelines.
func (g *sendGate) openSingle()   { g.opened[0].Do(func() { close(g.single) }) }
func (g *sendGate) openPipeline() { g.opened[1].Do(func() { close(g.pipeline) }) }

func (g *sendGate) DialHook(next redis.DialHook) redis.DialHook { return next }

func (g *sendGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		g.pass(ctx, g.single, cmd)
		return next(ctx, cmd)
	}
}

func (g *sendGate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		g.pass(ctx, g.pipeline, cmds...)
		return next(ctx, cmds)
	}
}

// pass records the keys of cmds' lock commands as one round trip and
// waits at gate (or until ctx ends) when there are any.
func (g *sendGate) pass(ctx context.Context, gate chan struct{}, cmds ...redis.Cmder) {
	var keys []string
	for _, cmd := range cmds {
		if key := lockKeyOf(cmd); key != "" {
			keys = append(keys, key)
		}
	}
	if len(keys) == 0 {
		return
	}
	g.mu.Lock()
	g.trips = append(g.trips, keys)
	g.mu.Unlock()
	pipeline := gate == g.pipeline
	if pipeline {
		g.heldPipelines.Add(1)
	}
	g.held.Add(1)
	select {
	case <-gate:
	case <-ctx.Done():
	}
	g.held.Add(-1)
	if pipeline {
		g.heldPipelines.Add(-1)
	}
}

// lockKeyOf returns the lock key of an acquire attempt (SET or the
// acquire script), or "": releases (and the janitor's) pass.
func lockKeyOf(cmd redis.Cmder) string {
	args := cmd.Args()
	pos := 0
	switch cmd.Name() {
	case "set":
		pos = 1
	case "evalsha", "eval":
		if sha, _ := args[1].(string); sha == releaseSHA || sha == scriptSources[releaseSHA.(string)] {
			return ""
		}
		pos = 3
	}
	if pos == 0 || len(args) <= pos {
		return ""
	}
	if key, ok := args[pos].(*string); ok { // (a multi lock's, see multiRef.keyArg)
		return *key
	}
	key, _ := args[pos].(string)
	return key
}

func (g *sendGate) takeTrips() [][]string {
	g.mu.Lock()
	defer g.mu.Unlock()
	trips := g.trips
	g.trips = nil
	return trips
}

// newGatedClient returns a warmed-up Client (its scripts loaded, its
// first look at the server done) on a go-redis client behind a sendGate,
// closed.
func newGatedClient(t *testing.T, ctx context.Context, addr string) (*Client, *redis.Client, *sendGate) {
	t.Helper()
	return gateClient(t, ctx, redis.NewClient(&redis.Options{Addr: addr}))
}

// gateClient is newGatedClient on rdb, which it closes in t.Cleanup.
func gateClient(t *testing.T, ctx context.Context, rdb *redis.Client) (*Client, *redis.Client, *sendGate) {
	t.Helper()
	t.Cleanup(func() { _ = rdb.Close() })
	c := New(rdb, WithLogger(discard()))
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	neverLate(c)
	warmUp(t, ctx, c)
	gate := newSendGate()
	rdb.AddHook(gate)
	t.Cleanup(func() { gate.openSingle(); gate.openPipeline() }) // before Close, on a failure
	return c, rdb, gate
}

// neverLate keeps c's batcher from counting a send as late (see
// batcher.lateAfter): tests that hold sends at a gate, for as long as
// they need, check what queues behind them.
func neverLate(c *Client) {
	b := c.store.(singleStore).batch
	b.mu.Lock()
	defer b.mu.Unlock()
	b.minLate, b.maxLate = time.Hour, time.Hour
}

// lateAsUsual undoes neverLate, also for the timer it set (an hour).
func lateAsUsual(c *Client) {
	b := c.store.(singleStore).batch
	b.mu.Lock()
	defer b.mu.Unlock()
	b.minLate, b.maxLate = defaultMinLate, defaultMaxLate
	if b.one.watch != nil {
		b.one.watch.Reset(0)
	}
}

// queuedCommands returns how many commands wait in c's batcher.
func queuedCommands(c *Client) int {
	b := c.store.(singleStore).batch
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.one.queue)
}

// acquireAsync starts c.Acquire(ctx, name) and returns its result's channel.
func acquireAsync(ctx context.Context, c *Client, name string) <-chan acquireResult {
	got := make(chan acquireResult, 1)
	go func() {
		l, err := c.Acquire(ctx, name)
		got <- acquireResult{l, err}
	}()
	return got
}

// blockTheSenders starts maxInFlight acquisitions that go out alone and
// wait at the gate, so that the next commands queue.
func blockTheSenders(t *testing.T, ctx context.Context, c *Client, gate *sendGate) []<-chan acquireResult {
	t.Helper()
	var got []<-chan acquireResult
	for i := range maxInFlight {
		got = append(got, acquireAsync(ctx, c, "alone-"+string(rune('a'+i))))
	}
	waitFor(t, func() bool { return gate.held.Load() == maxInFlight }, "the first sends did not reach the gate")
	return got
}

func TestConcurrentCallersShareOneRoundTrip(t *testing.T) {
	forEachServer(t, func(t *testing.T, addr string) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, rdb, gate := newGatedClient(t, ctx, addr)
		testSharedRoundTrip(t, ctx, c, rdb, gate)
	})
}

func TestConcurrentCallersShareOneRoundTripThroughSentinel(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	set := redistest.SharedSentinel(t)
	c, rdb, gate := gateClient(t, ctx, redis.NewFailoverClient(set.FailoverOptions()))
	testSharedRoundTrip(t, ctx, c, rdb, gate)
}

// testSharedRoundTrip checks that the acquire attempts of callers that
// queue behind the first sends go in one pipeline.
func testSharedRoundTrip(t *testing.T, ctx context.Context, c *Client, rdb *redis.Client, gate *sendGate) {
	t.Helper()
	first := blockTheSenders(t, ctx, c, gate)
	names := []string{"b0", "b1", "b2", "b3", "b4", "b5"}
	var rest []<-chan acquireResult
	for _, name := range names {
		rest = append(rest, acquireAsync(ctx, c, name))
	}
	waitFor(t, func() bool { return queuedCommands(c) == len(names) }, "the other callers did not queue")
	gate.openSingle()
	gate.openPipeline()

	var locks []*Lock
	for _, got := range append(first, rest...) {
		r := <-got
		require.NoError(t, r.err)
		require.Equal(t, r.l.Token(), rdb.Get(ctx, r.l.Key()).Val(), "each holds its own lock")
		locks = append(locks, r.l)
	}
	trips := gate.takeTrips()
	require.Len(t, trips, maxInFlight+1, "%d acquisitions in %d round trips: %v", len(locks), maxInFlight+1, trips)
	var batched []string
	for _, name := range names {
		batched = append(batched, DefaultKeyPrefix+"{"+name+"}")
	}
	require.ElementsMatch(t, batched, trips[maxInFlight], "the queued attempts went in one pipeline: %v", trips)
	for _, l := range locks {
		require.NoError(t, l.Release(ctx))
	}
	require.Zero(t, queuedCommands(c))
}

func TestACallerWhoseContextEndsWhileQueuedSendsNothing(t *testing.T) {
	forEachServer(t, func(t *testing.T, addr string) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, rdb, gate := newGatedClient(t, ctx, addr)

		first := blockTheSenders(t, ctx, c, gate)
		quitCtx, quit := context.WithCancel(ctx)
		quitter := acquireAsync(quitCtx, c, "quitter")
		waitFor(t, func() bool { return queuedCommands(c) == 1 }, "the caller did not queue")
		quit()
		r := <-quitter
		require.ErrorIs(t, r.err, context.Canceled, "it stops waiting at once, while the others' sends still hang")
		require.False(t, errors.Is(r.err, ErrNotAcquired), "no attempt had an answer")
		require.Zero(t, queuedCommands(c), "and its command left the queue")

		gate.openSingle()
		gate.openPipeline()
		for _, got := range first {
			r := <-got
			require.NoError(t, r.err)
			require.NoError(t, r.l.Release(ctx))
		}
		for _, trip := range gate.takeTrips() {
			require.NotContains(t, trip, DefaultKeyPrefix+"{quitter}", "its attempt was never sent")
		}
		require.Zero(t, rdb.Exists(ctx, DefaultKeyPrefix+"{quitter}").Val())
		c.cleaner.mu.Lock()
		defer c.cleaner.mu.Unlock()
		require.Zero(t, c.cleaner.items.Len(), "nor is there anything for the janitor to give back")
		require.False(t, c.cleaner.busy)
	})
}

func TestAReplyNobodyWaitsForAnyMoreLeavesNoLockHeld(t *testing.T) {
	forEachServer(t, func(t *testing.T, addr string) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, rdb, gate := newGatedClient(t, ctx, addr)

		first := blockTheSenders(t, ctx, c, gate)
		quitCtx, quit := context.WithCancel(ctx)
		quitter := acquireAsync(quitCtx, c, "quitter")
		stayer := acquireAsync(ctx, c, "stayer")
		waitFor(t, func() bool { return queuedCommands(c) == 2 }, "the callers did not queue")
		gate.openSingle() // the first sends end; the queue goes out in a pipeline, which waits at the gate
		waitFor(t, func() bool { return queuedCommands(c) == 0 && gate.heldPipelines.Load() == 1 }, "the pipeline did not leave")
		quit()
		r := <-quitter
		require.ErrorIs(t, r.err, context.Canceled, "it stops waiting while its attempt is on its way")

		gate.openPipeline() // the attempt lands: the key is taken for a token nobody holds
		for _, got := range append(first, stayer) {
			r := <-got
			require.NoError(t, r.err)
			require.NoError(t, r.l.Release(ctx))
		}
		key := DefaultKeyPrefix + "{quitter}"
		sent := false
		for _, trip := range gate.takeTrips() {
			sent = sent || len(trip) == 2 && (trip[0] == key || trip[1] == key)
		}
		require.True(t, sent, "the attempt went out in the pipeline with the other one")
		waitFor(t, func() bool { return rdb.Exists(ctx, key).Val() == 0 }, "the janitor did not give the lock back")
	})
}

// nodeGate is a go-redis hook that holds the lock commands a cluster
// client sends for keys on one node until the test opens it.
type nodeGate struct {
	onNode func(key string) bool
	open   chan struct{}
	held   atomic.Int32
}

func (g *nodeGate) DialHook(next redis.DialHook) redis.DialHook { return next }

func (g *nodeGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if key := lockKeyOf(cmd); key != "" && g.onNode(key) {
			g.held.Add(1)
			<-g.open
			g.held.Add(-1)
		}
		return next(ctx, cmd)
	}
}

func (g *nodeGate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func TestOneClusterNodesCommandsDoNotWaitForAnothers(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rdb := redistest.SharedCluster(t).Client(t)
	c := New(rdb, WithLogger(discard()))
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	neverLate(c)
	node := func(name string) string {
		n, err := rdb.MasterForKey(ctx, DefaultKeyPrefix+"{"+name+"}")
		require.NoError(t, err)
		return n.Options().Addr
	}
	slow := node("slow-0")
	var slowNames, fastNames []string
	for i := 0; len(slowNames) < maxInFlight+2 || len(fastNames) < 3; i++ {
		name := "name-" + strconv.Itoa(i)
		if node(name) == slow {
			slowNames = append(slowNames, name)
		} else {
			fastNames = append(fastNames, name)
		}
	}
	warmUp(t, ctx, c)
	gate := &nodeGate{onNode: func(key string) bool { n, _ := rdb.MasterForKey(ctx, key); return n.Options().Addr == slow }, open: make(chan struct{})}
	rdb.AddHook(gate)

	var slowGot []<-chan acquireResult
	for _, name := range slowNames {
		slowGot = append(slowGot, acquireAsync(ctx, c, name))
	}
	waitFor(t, func() bool { return gate.held.Load() == maxInFlight }, "the slow node's first sends did not reach the gate")
	b := c.store.(singleStore).batch
	waitFor(t, func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return len(b.lanes[slow].queue) == len(slowNames)-maxInFlight
	}, "the slow node's other commands did not queue")
	var fastGot []<-chan acquireResult
	for _, name := range fastNames {
		fastGot = append(fastGot, acquireAsync(ctx, c, name))
	}
	for _, got := range fastGot {
		r := <-got
		require.NoError(t, r.err, "acquired while the other node's commands wait")
		require.NoError(t, r.l.Release(ctx))
	}
	close(gate.open)
	for _, got := range slowGot {
		r := <-got
		require.NoError(t, r.err)
		require.NoError(t, r.l.Release(ctx))
	}
}

func TestCloseWaitsForCommandsUnderWay(t *testing.T) {
	forEachServer(t, func(t *testing.T, addr string) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, _, gate := newGatedClient(t, ctx, addr)

		first := blockTheSenders(t, ctx, c, gate)
		quitCtx, quit := context.WithCancel(ctx)
		quitter := acquireAsync(quitCtx, c, "quitter")
		stayer := acquireAsync(quitCtx, c, "stayer")
		waitFor(t, func() bool { return queuedCommands(c) == 2 }, "the callers did not queue")
		gate.openSingle() // the queued attempt goes out in a pipeline, which waits at the gate
		// (held alone could count a single send still leaving the gate.)
		waitFor(t, func() bool { return gate.heldPipelines.Load() == 1 }, "the pipeline did not leave")
		quit()
		require.ErrorIs(t, (<-quitter).err, context.Canceled)
		require.ErrorIs(t, (<-stayer).err, context.Canceled)
		lateAsUsual(c) // the releases queue behind the held pipeline until it is late
		for _, got := range first {
			r := <-got
			require.NoError(t, r.err)
			require.NoError(t, r.l.Release(ctx))
		}

		short, stop := context.WithTimeout(ctx, 50*time.Millisecond)
		defer stop()
		err := c.Close(short)
		require.ErrorIs(t, err, context.DeadlineExceeded, "a pipeline is still under way")
		require.ErrorContains(t, err, "commands under way")
		gate.openPipeline()
		select {
		case <-c.store.(singleStore).batch.idle():
		case <-ctx.Done():
			t.Fatal("the flusher did not end once its pipeline was answered")
		}
	})
}

// stallingNet dials connections whose replies stop coming once an acquire
// attempt for a name that starts with "stuck-" was written on them, until
// release: a connection stalled in the network, with its batch on it.
type stallingNet struct {
	released chan struct{}
	release  func()
	mu       sync.Mutex
	written  map[string]bool // the stuck names whose commands went out
}

var stuckName = regexp.MustCompile(`\{(stuck-\d+)\}`)

func newStallingNet() *stallingNet {
	n := &stallingNet{released: make(chan struct{}), written: make(map[string]bool)}
	n.release = sync.OnceFunc(func() { close(n.released) })
	return n
}

func (n *stallingNet) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &stallingConn{Conn: conn, net: n}, nil
}

// stuckWritten returns how many stuck names had a command written.
func (n *stallingNet) stuckWritten() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.written)
}

type stallingConn struct {
	net.Conn
	net   *stallingNet
	stuck atomic.Bool
}

func (c *stallingConn) Write(p []byte) (int, error) {
	if names := stuckName.FindAllSubmatch(p, -1); names != nil {
		c.stuck.Store(true)
		c.net.mu.Lock()
		for _, name := range names {
			c.net.written[string(name[1])] = true
		}
		c.net.mu.Unlock()
	}
	return c.Conn.Write(p)
}

func (c *stallingConn) Read(p []byte) (int, error) {
	if c.stuck.Load() {
		<-c.net.released
	}
	return c.Conn.Read(p)
}

func TestAStalledConnectionHoldsUpOnlyItsOwnBatch(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stall := newStallingNet()
	// (A read timeout longer than the test: the stuck replies are read
	// once released.)
	rdb := redis.NewClient(&redis.Options{Addr: redistest.Start(t).Addr(), Dialer: stall.dial, ReadTimeout: 2 * time.Minute})
	t.Cleanup(func() { _ = rdb.Close() })
	c := New(rdb, WithLogger(discard()))
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	t.Cleanup(stall.release) // before Close, on a failure
	warmUp(t, ctx, c)

	// More stuck names than sends may be live at once: the first go out
	// alone and stall, the others queue behind them, and go out once
	// those are late, in a batch that stalls too.
	const stuck = maxInFlight + 3
	var stuckGot []<-chan acquireResult
	for i := range stuck {
		stuckGot = append(stuckGot, acquireAsync(ctx, c, "stuck-"+strconv.Itoa(i)))
	}
	waitFor(t, func() bool { return stall.stuckWritten() == stuck }, "the attempts queued behind stalled sends never went out")

	for i := range 2 * maxInFlight {
		l, err := c.Acquire(ctx, "free-"+strconv.Itoa(i))
		require.NoError(t, err, "acquired on another connection while the stuck batches wait")
		require.NoError(t, l.Release(ctx))
	}
	for i, got := range stuckGot {
		select {
		case r := <-got:
			t.Fatalf("stuck-%d came back while its connection was stalled: %v", i, r.err)
		default:
		}
	}

	stall.release()
	for _, got := range stuckGot {
		r := <-got
		require.NoError(t, r.err, "a stalled send ends once its connection answers")
		require.NoError(t, r.l.Release(ctx))
	}
}

// A multi lock's SETs are one call of the batcher: queued behind busy
// sends, they go out in the next batch, with the other callers' commands;
// a caller whose ctx ends while they are queued sends none of them.
func TestAMultiLocksSETsQueueAsOneCall(t *testing.T) {
	forEachServer(t, func(t *testing.T, addr string) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, rdb, gate := newGatedClient(t, ctx, addr)
		names := []string{"set:a", "set:b", "set:c"}
		keys := []string{DefaultKeyPrefix + "{set:a}", DefaultKeyPrefix + "{set:b}", DefaultKeyPrefix + "{set:c}"}
		multiAsync := func(ctx context.Context) <-chan acquireResult {
			got := make(chan acquireResult, 1)
			go func() {
				l, err := c.AcquireMulti(ctx, names)
				got <- acquireResult{l, err}
			}()
			return got
		}

		first := blockTheSenders(t, ctx, c, gate)
		quitCtx, quit := context.WithCancel(ctx)
		quitter := multiAsync(quitCtx)
		waitFor(t, func() bool { return queuedCommands(c) == 1 }, "the multi lock's SETs did not queue as one call")
		quit()
		r := <-quitter
		require.ErrorIs(t, r.err, context.Canceled, "it stops waiting at once, while the others' sends still hang")
		require.Zero(t, queuedCommands(c), "and its SETs left the queue")

		multi := multiAsync(ctx)
		single := acquireAsync(ctx, c, "set:other")
		waitFor(t, func() bool { return queuedCommands(c) == 2 }, "the callers did not queue")
		gate.openSingle()
		gate.openPipeline()
		for _, got := range append(first, multi, single) {
			r := <-got
			require.NoError(t, r.err)
			require.NoError(t, r.l.Release(ctx))
		}
		trips := gate.takeTrips()
		require.Greater(t, len(trips), maxInFlight, "%v", trips)
		require.ElementsMatch(t, append(keys, DefaultKeyPrefix+"{set:other}"), trips[maxInFlight],
			"the queued commands went in one round trip: %v", trips)
		for i, trip := range trips {
			if i != maxInFlight {
				// (The release's script comes as its first key alone.)
				require.NotContains(t, trip, keys[1], "the quitter's SETs were never sent: %v", trips)
			}
		}
		require.Zero(t, rdb.Exists(ctx, keys...).Val(), "released, and nothing of the quitter's call was sent")
		c.cleaner.mu.Lock()
		defer c.cleaner.mu.Unlock()
		require.Zero(t, c.cleaner.items.Len(), "nor is there anything for the janitor to give back")
	})
}
