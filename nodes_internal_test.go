package redislock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redislock/redislock/internal/redistest"
)

// TestWhichErrorsReloadTheSlotMap: a node that refuses connections, times
// out, cuts the connection, or answers CLUSTERDOWN, MOVED or READONLY says
// the slot map may be stale; a reply about the lock or the script, a
// command that never left the queue, or one its caller's ctx cut short
// (every waiter that gives up), says nothing of where the slot is.
func TestWhichErrorsReloadTheSlotMap(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	// A dial past its timeout, which matches context.DeadlineExceeded.
	_, dialTimeout := (&net.Dialer{Timeout: time.Nanosecond}).Dial("tcp", "127.0.0.1:1")
	require.ErrorIs(t, dialTimeout, context.DeadlineExceeded)
	for _, err := range []error{
		refused,
		fmt.Errorf("redislock: extend %q: %w", "job", refused),
		&net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}, // a SIGSTOPped node only times out
		dialTimeout,
		&net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET},
		io.EOF,
		errors.New("CLUSTERDOWN The cluster is down"),
		errors.New("MOVED 3999 127.0.0.1:6381"),
		errors.New("READONLY You can't write against a read only replica."),
	} {
		require.True(t, staleMap(err), "%v", err)
	}
	for _, err := range []error{
		unsentError{context.DeadlineExceeded},
		context.DeadlineExceeded,
		context.Canceled,
		&onItsWay{cause: context.DeadlineExceeded},
		&onItsWay{cause: context.Canceled},
		fmt.Errorf("redislock: acquire %q: %w", "job", context.DeadlineExceeded),
		errors.New("NOSCRIPT No matching script"),
		errors.New("TRYAGAIN Multiple keys request during rehashing of slot"),
		errors.New("WRONGTYPE Operation against a key holding the wrong kind of value"),
		errors.New("ERR Error running script"),
	} {
		require.False(t, staleMap(err), "%v", err)
	}
}

// TestTheSlotMapIsReloadedWhileErrorsComeAtMostEvery250ms: the first stale
// reply has go-redis reload the map at once; while more come, it is reloaded
// again from a timer, at most every reloadEvery; after Close (stop), no timer.
func TestTheSlotMapIsReloadedWhileErrorsComeAtMostEvery250ms(t *testing.T) {
	var loads atomic.Int32
	rdb := redis.NewClusterClient(&redis.ClusterOptions{ClusterSlots: func(context.Context) ([]redis.ClusterSlot, error) {
		loads.Add(1)
		return []redis.ClusterSlot{{Start: 0, End: 16383, Nodes: []redis.ClusterNode{{Addr: "127.0.0.1:1"}}}}, nil
	}})
	defer rdb.Close()
	one := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer one.Close()
	require.Nil(t, newSlotMap(one), "only a cluster client has a slot map")
	m := newSlotMap(rdb)
	m.note(errors.New("WRONGTYPE Operation against a key holding the wrong kind of value"))
	require.Nil(t, m.timer, "no reload for a reply about the key")

	down := errors.New("CLUSTERDOWN The cluster is down")
	start := time.Now()
	for loads.Load() < 3 { // the first at once, the others by the timer
		require.Less(t, time.Since(start), 10*time.Second, "reloads while errors come")
		m.note(down)
		time.Sleep(time.Millisecond) // errors coming, not a synchronisation
	}
	took := time.Since(start)
	// An upper bound only, which a slow machine cannot break: one at once,
	// then one per reloadEvery at most (go-redis adds none: it loads on
	// demand only, the first time a command needs the map).
	require.LessOrEqual(t, int(loads.Load()), 1+int(took/reloadEvery), "reloads in %v", took)

	m.stop()
	m.note(down)
	m.mu.Lock()
	defer m.mu.Unlock()
	require.Nil(t, m.timer, "no timer after stop")
}

// Close ends the slot map reloads of every node: a quorum's Cluster nodes
// each have a slot map. (Close stopped the single store's only: a quorum
// node's timer went on reloading, from the time.AfterFunc goroutine, after
// Close had returned.)
func TestCloseStopsEverySlotMap(t *testing.T) {
	cluster := redis.NewClusterClient(&redis.ClusterOptions{ClusterSlots: func(context.Context) ([]redis.ClusterSlot, error) {
		return []redis.ClusterSlot{{Start: 0, End: 16383, Nodes: []redis.ClusterNode{{Addr: "127.0.0.1:1"}}}}, nil
	}})
	defer cluster.Close()
	others := []*redis.Client{redis.NewClient(&redis.Options{Addr: "127.0.0.1:2"}), redis.NewClient(&redis.Options{Addr: "127.0.0.1:3"})}
	for _, c := range others {
		defer c.Close()
	}
	c, err := NewQuorum([]redis.UniversalClient{cluster, others[0], others[1]}, WithLogger(discard()))
	require.NoError(t, err)
	m := c.store.(*quorumStore).nodes[0].slots
	m.note(errors.New("CLUSTERDOWN The cluster is down"))
	require.NoError(t, c.Close(context.Background()))
	m.mu.Lock()
	defer m.mu.Unlock()
	require.True(t, m.stopped, "the node's reloads ended with Close")
	require.Nil(t, m.timer)
}

// Close gives multi locks back a few at a time, not on a goroutine each: with
// their releases held up, the goroutines giving them back are at most
// multiGiveBacks once abandonWithMulti waits for them. (One goroutine per
// multi lock: 40 here.)
func TestMultiLocksAreGivenBackAFewAtATime(t *testing.T) {
	mini := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mini.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	c := New(rdb, WithLogger(discard()))
	ctx := context.Background()
	locks := make([]*Lock, 40) // kept: a dropped Lock is given back by its finalizer
	for i := range locks {
		var err error
		locks[i], err = c.AcquireMulti(ctx, []string{fmt.Sprint("a", i), fmt.Sprint("b", i)})
		require.NoError(t, err)
	}
	gate := make(chan struct{})
	rdb.AddHook(holdScript{sha: multiReleaseSHA, gate: gate})
	closed := make(chan error, 1)
	go func() { closed <- c.Close(ctx) }()
	var workers int
	waitFor(t, func() bool {
		var waiting bool
		waiting, workers = givingBackMulti()
		return waiting
	}, "Close never waited for the multi locks' give-backs")
	close(gate)
	require.NoError(t, <-closed)
	runtime.KeepAlive(locks)
	require.LessOrEqual(t, workers, multiGiveBacks, "goroutines giving multi locks back at once")
	require.Positive(t, workers)
}

// givingBackMulti reads every goroutine's stack: whether abandonWithMulti
// waits for its goroutines, and how many there are.
func givingBackMulti() (waiting bool, workers int) {
	buf := make([]byte, 1<<22)
	for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		switch {
		case strings.Contains(g, "abandonWithMulti.func"):
			workers++

		case strings.Contains(g, "singleStore.abandonWithMulti(") && strings.Contains(g, "sync.(*WaitGroup).Wait"):
			waiting = true

		}
	}
	return waiting, workers
}

// holdScript is a go-redis hook that holds every call of one script (by
// SHA1), lone or pipelined, until gate closes.
type holdScript struct {
	sha  any
	gate <-chan struct{}
}

func (h holdScript) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h holdScript) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.hold([]redis.Cmder{cmd})
		return next(ctx, cmd)
	}
}

func (h holdScript) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.hold(cmds)
		return next(ctx, cmds)
	}
}

func (h holdScript) hold(cmds []redis.Cmder) {
	for _, cmd := range cmds {
		if args := cmd.Args(); len(args) > 1 && args[1] == h.sha {
			<-h.gate
			return
		}
	}
}

// The watchdog keeps which Cluster nodes failed their last batch, not which
// multi locks did: a multi lock may span nodes, and one released while its
// extensions failed left its entry behind for good.
func TestReleasedMultiLocksLeaveTheWatchdogNothing(t *testing.T) {
	t.Parallel()
	rdb := redistest.SharedCluster(t).Client(t)
	failing := &failScript{sha: multiExtendSHA}
	failing.on.Store(true)
	rdb.AddHook(failing)
	obs := &extendFailures{names: map[string]bool{}}
	// A minute's lease extended every 50 ms: failed extensions are retried
	// long before any lease could end.
	c := New(rdb, WithLogger(discard()), WithObserver(obs), WithTTL(time.Minute), WithExtendInterval(50*time.Millisecond))
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	ctx := context.Background()
	locks := make([]*Lock, 10)
	for i := range locks {
		var err error
		locks[i], err = c.AcquireMulti(ctx, []string{fmt.Sprint("wd-a", i), fmt.Sprint("wd-b", i)})
		require.NoError(t, err)
	}
	waitFor(t, func() bool { return obs.count() == len(locks) }, "not every multi lock's extension failed")
	for _, l := range locks {
		require.NoError(t, l.Release(ctx))
	}
	s := c.watchdog()
	s.mu.Lock()
	defer s.mu.Unlock()
	for key := range s.failing {
		require.NotContains(t, key, "{wd-", "an entry for a released multi lock")
	}
}

// failScript is a go-redis hook that, while on, answers every call of one
// script (by SHA1) with a connection error instead of sending it.
type failScript struct {
	sha any
	on  atomic.Bool
}

func (h *failScript) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *failScript) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.fails([]redis.Cmder{cmd}) {
			return cmd.Err()
		}
		return next(ctx, cmd)
	}
}

func (h *failScript) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.fails(cmds) {
			return cmds[0].Err()
		}
		return next(ctx, cmds)
	}
}

func (h *failScript) fails(cmds []redis.Cmder) bool {
	if !h.on.Load() {
		return false
	}
	for _, cmd := range cmds {
		if args := cmd.Args(); len(args) < 2 || args[1] != h.sha {
			return false
		}
	}
	for _, cmd := range cmds {
		cmd.SetErr(&net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET})
	}
	return true
}

// extendFailures is an Observer that keeps the names whose extension failed.
type extendFailures struct {
	mu    sync.Mutex
	names map[string]bool
}

func (o *extendFailures) ObserveAcquire(AcquireEvent)   {}
func (o *extendFailures) ObserveRelease(ReleaseEvent)   {}
func (o *extendFailures) ObserveFailOpen(FailOpenEvent) {}
func (o *extendFailures) ObserveLost(LostEvent)         {}
func (o *extendFailures) ObserveExtend(e ExtendEvent) {
	if e.Err != nil {
		o.mu.Lock()
		o.names[e.Name] = true
		o.mu.Unlock()
	}
}

func (o *extendFailures) count() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.names)
}
