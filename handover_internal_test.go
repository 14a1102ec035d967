package redislock

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redislock/redislock/internal/redistest"
)

// roundTrips records what a client sends, one entry per round trip: the
// command names of a command or of a pipeline. onPipeline, when set, runs
// before a pipeline is sent.
type roundTrips struct {
	mu         sync.Mutex
	trips      [][]string
	onPipeline atomic.Pointer[func()]
}

func (h *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		switch cmd.Name() {
		case "hello", "client", "ping": // a new connection's set-up
		default:
			h.record(cmd)
		}
		return next(ctx, cmd)
	}
}

func (h *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if cmds[0].Name() == "hello" || cmds[0].Name() == "client" {
			return next(ctx, cmds) // a new connection's set-up
		}
		if f := h.onPipeline.Load(); f != nil {
			(*f)()
		}
		h.record(cmds...)
		return next(ctx, cmds)
	}
}

func (h *roundTrips) record(cmds ...redis.Cmder) {
	names := make([]string, len(cmds))
	for i, c := range cmds {
		names[i] = c.Name()
	}
	h.mu.Lock()
	h.trips = append(h.trips, names)
	h.mu.Unlock()
}

// take returns the round trips recorded since the last call.
func (h *roundTrips) take() [][]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	trips := h.trips
	h.trips = nil
	return trips
}

// forEachServer runs test on miniredis and on a real redis-server.
func forEachServer(t *testing.T, test func(t *testing.T, addr string)) {
	t.Run("miniredis", func(t *testing.T) { test(t, miniredis.RunT(t).Addr()) })
	t.Run("redis-server", func(t *testing.T) { test(t, redistest.Start(t).Addr()) })
}

// queuedBehind starts an Acquire of name on c that waits (an hour of
// backoff) and returns once it is in line in c's room, behind the turn.
func queuedBehind(t *testing.T, ctx context.Context, c *Client, name string, opts ...Option) <-chan acquireResult {
	t.Helper()
	got := make(chan acquireResult, 1)
	go func() {
		opts = append([]Option{WithRetry(LinearBackoff(time.Hour))}, opts...)
		l, err := c.Acquire(ctx, name, opts...)
		got <- acquireResult{l, err}
	}()
	waitFor(t, func() bool { return c.rooms().queued(DefaultKeyPrefix+"{"+name+"}") == 1 }, "the waiter did not get in line")
	return got
}

// newTracedClient returns a Client whose callers wait (an hour of backoff)
// on a go-redis client whose round trips are recorded.
func newTracedClient(t *testing.T, addr string, opts ...Option) (*Client, *redis.Client, *roundTrips) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = rdb.Close() })
	trips := &roundTrips{}
	rdb.AddHook(trips)
	opts = append([]Option{WithLogger(discard()), WithRetry(LinearBackoff(time.Hour))}, opts...)
	return New(rdb, opts...), rdb, trips
}

// warmUp runs one cycle on c, which loads the scripts.
func warmUp(t *testing.T, ctx context.Context, c *Client) {
	t.Helper()
	l, err := c.Acquire(ctx, "warm-up")
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
}

type acquireResult struct {
	l   *Lock
	err error
}

func TestTheNextLocalWaitersAttemptRidesOnTheRelease(t *testing.T) {
	forEachServer(t, func(t *testing.T, addr string) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, rdb, trips := newTracedClient(t, addr, WithFencing())

		warmUp(t, ctx, c)
		holder, err := c.Acquire(ctx, "job") // a waiter's Acquire: it holds the room's turn
		require.NoError(t, err)
		waiter := queuedBehind(t, ctx, c, "job")
		trips.take()

		require.NoError(t, holder.Release(ctx))
		got := <-waiter
		require.NoError(t, got.err)
		require.Equal(t, [][]string{{"evalsha", "evalsha"}}, trips.take(),
			"one round trip: the release, then the waiter's attempt; the waiter sent nothing of its own")
		require.NotEqual(t, holder.Token(), got.l.Token(), "a real acquisition, with a token of its own")
		require.Greater(t, got.l.Fence(), holder.Fence(), "and a fence of its own")
		require.Equal(t, got.l.Token(), rdb.Get(ctx, got.l.Key()).Val())
		ttl := rdb.PTTL(ctx, got.l.Key()).Val()
		require.Greater(t, ttl, DefaultTTL-5*time.Second, "the waiter's own lease")
		require.NoError(t, got.l.Release(ctx))
		require.Zero(t, rdb.Exists(ctx, got.l.Key(), got.l.Key()+":q", got.l.Key()+":qx").Val(), "nothing left behind")
	})
}

func TestAWaiterWhoGivesUpWhileItsAttemptRidesOnTheReleaseUndoesIt(t *testing.T) {
	forEachServer(t, func(t *testing.T, addr string) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, rdb, trips := newTracedClient(t, addr)
		warmUp(t, ctx, c)

		holder, err := c.Acquire(ctx, "job")
		require.NoError(t, err)
		waitCtx, giveUp := context.WithCancel(ctx)
		defer giveUp()
		waiter := queuedBehind(t, waitCtx, c, "job")
		// The waiter gives up while the release and its attempt are on
		// their way: its context ends before the turn reaches it, so it
		// hears the end first, and the attempt made for it (which takes
		// the lock) must be undone.
		cancelFirst := func() { giveUp() }
		trips.take()
		trips.onPipeline.Store(&cancelFirst)
		require.NoError(t, holder.Release(ctx))
		trips.onPipeline.Store(nil)

		got := <-waiter
		require.ErrorIs(t, got.err, ErrNotAcquired)
		require.ErrorIs(t, got.err, context.Canceled)
		require.Nil(t, got.l)
		// The undo goes in the background, after the waiter returned.
		var sent [][]string
		waitFor(t, func() bool {
			sent = append(sent, trips.take()...)
			return len(sent) >= 2
		}, "the undo was not sent")
		sent = sent[:min(len(sent), 2)]
		require.Equal(t, [][]string{{"evalsha", "evalsha"}, {"evalsha"}}, sent, "release + attempt, then the undo")
		// (The hook records a command as it leaves: wait for its effect.)
		waitFor(t, func() bool { return rdb.Exists(ctx, holder.Key(), holder.Key()+":q", holder.Key()+":qx").Val() == 0 },
			"the lock taken for the waiter was not given back, or it left a place in line")
		trips.take() // the checks' EXISTS
		// The turn went on: the room is free for the next caller.
		l, err := c.Acquire(ctx, "job", WithRetry(NoRetry()))
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))
	})
}

func TestAFailedEarlyAttemptIsMadeAgainByTheWaiter(t *testing.T) {
	// The release and the attempt fail together (here: the script cache
	// was flushed, so both EVALSHAs get NOSCRIPT): the release goes again
	// as EVAL, and the waiter makes its own attempt.
	forEachServer(t, func(t *testing.T, addr string) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, rdb, trips := newTracedClient(t, addr)

		holder, err := c.Acquire(ctx, "job")
		require.NoError(t, err)
		waiter := queuedBehind(t, ctx, c, "job")
		require.NoError(t, rdb.ScriptFlush(ctx).Err())
		trips.take()
		require.NoError(t, holder.Release(ctx))
		got := <-waiter
		require.NoError(t, got.err)
		require.Equal(t, got.l.Token(), rdb.Get(ctx, got.l.Key()).Val())
		sent := trips.take()
		require.Equal(t, []string{"evalsha", "evalsha"}, sent[0], "release and attempt went together")
		require.Contains(t, sent[1:], []string{"eval"}, "then each again, as EVAL")
		require.NoError(t, got.l.Release(ctx))
	})
}
