package redislock

import (
	"container/heap"
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// waiterKey marks a test goroutine's context, so that the store can tell
// who is asking.
type waiterKey struct{}

// countingStore records which callers (by their waiterKey) tried to acquire.
type countingStore struct {
	store
	mu     sync.Mutex
	tokens map[any]int
}

func (s *countingStore) acquire(ctx context.Context, o *options, ref *lockRef) (bool, int64, time.Duration, error) {
	s.mu.Lock()
	s.tokens[ctx.Value(waiterKey{})]++
	s.mu.Unlock()
	return s.store.acquire(ctx, o, ref)
}

func (s *countingStore) attempts() (callers, total int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range s.tokens {
		total += n
	}
	return len(s.tokens), total
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

func newInternalClient(t *testing.T) (*Client, *countingStore, *redis.Client) {
	t.Helper()
	mini := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mini.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	c := New(rdb, WithLogger(discard()))
	counting := &countingStore{store: c.store, tokens: map[any]int{}}
	c.store = counting
	return c, counting, rdb
}

func (w *waitRooms) queued(key string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	if room := w.rooms[key]; room != nil {
		return len(room.line)
	}
	return -1
}

func waitFor(t *testing.T, cond func() bool, msg string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal(msg)
		}
		time.Sleep(time.Millisecond) // polling interval
	}
}

func TestWaitersOfOneClientQueueInOrderAndOnlyTheHeadAsksRedis(t *testing.T) {
	t.Parallel()
	c, counting, rdb := newInternalClient(t)
	ctx := context.Background()
	other := New(rdb, WithLogger(discard())) // another pod holds the lock
	holder, err := other.Acquire(ctx, "job", WithTTL(time.Minute))
	require.NoError(t, err)

	const waiters = 5
	order := make(chan int, waiters)
	errs := make(chan error, waiters)
	var fences sync.Map
	for i := range waiters {
		go func() {
			waitCtx, cancel := context.WithTimeout(context.WithValue(ctx, waiterKey{}, i), 30*time.Second)
			defer cancel()
			l, err := c.Acquire(waitCtx, "job", WithRetry(LinearBackoff(2*time.Millisecond)), WithFencing())
			if err != nil {
				errs <- err
				return
			}
			order <- i
			fences.Store(i, l.Fence())
			errs <- l.Release(ctx)
		}()
		// Let waiter i take its place before the next one arrives.
		waitFor(t, func() bool { return c.rooms().queued("lock:{job}") == i }, "waiter did not queue")
	}
	// The head has been polling meanwhile; make sure it tried a few times.
	waitFor(t, func() bool { _, total := counting.attempts(); return total >= 5 }, "the head never tried")
	tokens, _ := counting.attempts()
	require.Equal(t, 1, tokens, "only the head of the queue talks to Redis")

	require.NoError(t, holder.Release(ctx))
	for range waiters {
		require.NoError(t, <-errs)
	}
	close(order)
	var got []int
	for i := range order {
		got = append(got, i)
	}
	require.Equal(t, []int{0, 1, 2, 3, 4}, got, "first come, first served")
	tokens, _ = counting.attempts()
	require.Equal(t, waiters, tokens, "each waiter made its own real acquisition")
	seen := map[int64]bool{}
	fences.Range(func(_, v any) bool { seen[v.(int64)] = true; return true })
	require.Len(t, seen, waiters, "each acquisition took its own fence")

	waitFor(t, func() bool { return c.rooms().queued("lock:{job}") == -1 }, "the room was not closed")
}

func TestWaitersWhoGiveUpLeaveNothingBehind(t *testing.T) {
	c, _, rdb := newInternalClient(t)
	ctx := context.Background()
	holder, err := New(rdb, WithLogger(discard())).Acquire(ctx, "job", WithTTL(time.Minute))
	require.NoError(t, err)
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			waitCtx, cancel := context.WithTimeout(ctx, time.Second) // long enough for a loaded machine's first answer: it saw the lock held
			defer cancel()
			_, err := c.Acquire(waitCtx, "job", WithRetry(LinearBackoff(time.Hour)))
			require.ErrorIs(t, err, ErrNotAcquired)
			require.ErrorIs(t, err, context.DeadlineExceeded)
		})
	}
	wg.Wait()
	// The room keeps its subscription for roomLinger, in case the lock is
	// waited for again, then closes it.
	waitFor(t, func() bool { return c.rooms().queued("lock:{job}") == -1 }, "no room left")
	n := c.rooms().notifier
	waitFor(t, func() bool {
		n.mu.Lock()
		subs := len(n.subs)
		n.mu.Unlock()
		n.io.Lock() // the connection is reconcile's
		defer n.io.Unlock()
		return subs == 0 && n.pubsub == nil
	}, "the pub/sub connection is closed")
	require.NoError(t, holder.Release(ctx))
}

func TestALostLockHandsTheTurnOn(t *testing.T) {
	c, _, rdb := newInternalClient(t)
	ctx := context.Background()
	first, err := c.Acquire(ctx, "job", WithRetry(LinearBackoff(time.Millisecond)), WithExtendInterval(5*time.Millisecond))
	require.NoError(t, err)
	got := make(chan error, 1)
	go func() {
		waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		l, err := c.Acquire(waitCtx, "job", WithRetry(LinearBackoff(time.Millisecond)))
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	waitFor(t, func() bool { return c.rooms().queued("lock:{job}") == 1 }, "the second waiter did not queue")
	require.NoError(t, rdb.Del(ctx, first.Key()).Err()) // lost, and never released
	<-first.Context().Done()
	require.NoError(t, <-got, "the next waiter got its turn without a Release")
}

// TestAReleaseRacingTheWatchdogIsNoLoss plays the race by hand: the
// scheduler has taken a due lock out of its heap, the holder releases it,
// then the scheduler gets to extend it. Nothing may reach Redis then, or
// the extension finds the key gone and reports a loss that never was.
func TestAReleaseRacingTheWatchdogIsNoLoss(t *testing.T) {
	mini := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mini.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	lost := &lossCounter{}
	c := New(rdb, WithLogger(discard()), WithObserver(lost), WithTTL(time.Minute), WithExtendInterval(time.Second))
	ctx := context.Background()
	l, err := c.Acquire(ctx, "race")
	require.NoError(t, err)

	s := c.watchdog()
	s.mu.Lock()
	require.Equal(t, 0, l.h.watch.index, "the lock waits in the heap")
	heap.Remove(&s.items, l.h.watch.index) // the scheduler pops it as due
	s.mu.Unlock()

	require.NoError(t, l.Release(ctx))
	before := mini.CommandCount()
	s.extend([]*hold{l.h}) // the scheduler's turn comes
	require.Equal(t, before, mini.CommandCount(), "no extension was sent after the release")
	require.Zero(t, lost.n.Load(), "the release was reported as a loss")
	require.ErrorIs(t, context.Cause(l.Context()), ErrReleased)
}

type lossCounter struct {
	n atomic.Int64
}

func (o *lossCounter) ObserveAcquire(AcquireEvent)   {}
func (o *lossCounter) ObserveExtend(ExtendEvent)     {}
func (o *lossCounter) ObserveLost(LostEvent)         { o.n.Add(1) }
func (o *lossCounter) ObserveRelease(ReleaseEvent)   {}
func (o *lossCounter) ObserveFailOpen(FailOpenEvent) {}

// TestAMaxHoldTimerFiringAfterReleaseIsNoLoss plays the race by hand: the
// max-hold timer fired just before Release and runs just after it.
func TestAMaxHoldTimerFiringAfterReleaseIsNoLoss(t *testing.T) {
	mini := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mini.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	lost := &lossCounter{}
	c := New(rdb, WithLogger(discard()), WithObserver(lost), WithMaxHold(time.Hour))
	l, err := c.Acquire(context.Background(), "job")
	require.NoError(t, err)
	require.NoError(t, l.Release(context.Background()))
	l.h.onMaxHold() // the callback that lost the race to Release
	require.Zero(t, lost.n.Load(), "a clean release was reported as a loss")
	require.ErrorIs(t, context.Cause(l.Context()), ErrReleased)
}
