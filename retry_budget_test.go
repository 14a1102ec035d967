package redislock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/internal/faultproxy"
)

// askLog is a RetryStrategy that records every NextBackoff call.
type askLog struct {
	mu    sync.Mutex
	asked []int
	inner redislock.RetryStrategy
}

func (s *askLog) NextBackoff(attempt int) (time.Duration, bool) {
	s.mu.Lock()
	s.asked = append(s.asked, attempt)
	s.mu.Unlock()
	return s.inner.NextBackoff(attempt)
}

func (s *askLog) calls() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int(nil), s.asked...)
}

// LimitRetry(s, n) is n waits of s's backoff, whatever re-checks happen in
// between, and each NextBackoff(k) is asked once, in order.
func TestLimitRetryIsNWaitsAskedOnceEach(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		holder, err := redislock.New(b.rdb, quiet).Acquire(ctx, "budget")
		require.NoError(t, err)
		defer holder.Release(ctx)

		for _, n := range []int{1, 3} {
			strategy := &askLog{inner: redislock.LimitRetry(redislock.LinearBackoff(100*time.Millisecond), n)}
			obs := &recordingObserver{}
			c := redislock.New(b.rdb, quiet, redislock.WithObserver(obs))
			start := time.Now()
			_, err := c.Acquire(ctx, "budget", redislock.WithRetry(strategy))
			waited := time.Since(start)
			require.ErrorIs(t, err, redislock.ErrNotAcquired)
			want := make([]int, n+1)
			for k := range want {
				want[k] = k + 1 // n waits, then the "no" that ends them
			}
			require.Equal(t, want, strategy.calls(), "n=%d", n)
			// n waits of 100 ms: never before they have passed.
			require.GreaterOrEqual(t, waited, time.Duration(n)*100*time.Millisecond, "n=%d gave up early", n)
		}
	})
}

// A waiter queued behind a holder of the same Client keeps to its own
// strategy: it gives up after its waits, not at ctx's deadline.
func TestAWaiterBehindTheSameClientKeepsToItsStrategy(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		c := redislock.New(b.rdb, quiet)
		holder, err := c.Acquire(ctx, "same", redislock.WithRetry(redislock.LinearBackoff(10*time.Millisecond)))
		require.NoError(t, err)
		defer holder.Release(ctx)

		strategy := &askLog{inner: redislock.LimitRetry(redislock.LinearBackoff(100*time.Millisecond), 3)}
		waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		done := make(chan error, 1)
		go func() {
			_, err := c.Acquire(waitCtx, "same", redislock.WithRetry(strategy))
			done <- err
		}()
		select {
		case err := <-done:
			require.ErrorIs(t, err, redislock.ErrNotAcquired)
			require.NoError(t, waitCtx.Err(), "it gave up on its strategy, not on ctx")
			require.Equal(t, []int{1, 2, 3, 4}, strategy.calls())
		case <-time.After(10 * time.Second):
			t.Fatal("the waiter ignored its strategy (still waiting after 10 s)")
		}
	})
}

// A ctx that is done before any attempt had an answer is not "another
// instance holds it": the error matches ctx.Err() and not ErrNotAcquired.
// When the lock was seen held, the error matches both.
func TestErrNotAcquiredOnlyWhenTheLockWasSeenHeld(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		c := redislock.New(b.rdb, quiet)
		done, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := c.Acquire(done, "shutdown")
		require.ErrorIs(t, err, context.Canceled)
		require.False(t, errors.Is(err, redislock.ErrNotAcquired), "a shutdown is not a held lock: %v", err)
		err = c.RunWithLock(done, "shutdown", func(context.Context) error { return nil })
		require.ErrorIs(t, err, context.Canceled)
		require.False(t, errors.Is(err, redislock.ErrNotAcquired))

		ctx := context.Background()
		holder, err := c.Acquire(ctx, "held")
		require.NoError(t, err)
		defer holder.Release(ctx)
		waitCtx, cancelWait := context.WithTimeout(ctx, time.Second) // long enough for a loaded machine's first answer: it saw the lock held
		defer cancelWait()
		_, err = redislock.New(b.rdb, quiet).Acquire(waitCtx, "held", redislock.WithRetry(redislock.LinearBackoff(20*time.Millisecond)))
		require.ErrorIs(t, err, redislock.ErrNotAcquired)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.NotContains(t, err.Error(), "\n", "one line")
	})
}

// Every error is one line, and New's bad arguments are said once.
func TestErrorsAreOneLineAndSaidOnce(t *testing.T) {
	ctx := context.Background()
	_, err := redislock.New(nil, quiet).Acquire(ctx, "x")
	require.ErrorIs(t, err, redislock.ErrInvalidArgument)
	require.Equal(t, 1, countSubstr(err.Error(), "nil redis client"), err.Error())

	_, err = redislock.New(newMini(t), redislock.WithTTL(0), redislock.WithLogger(nil)).Acquire(ctx, "x")
	require.ErrorIs(t, err, redislock.ErrInvalidArgument)
	require.NotContains(t, err.Error(), "\n")
	require.Equal(t, 1, countSubstr(err.Error(), "TTL 0s"), err.Error())
	require.Equal(t, 1, countSubstr(err.Error(), "nil logger"), err.Error())
}

func countSubstr(s, sub string) int {
	n := 0
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			n++
		}
	}
	return n
}

// Waiters whose ctx ends return at once; leaving the server's queue
// happens after, in the background. The link to Redis is slow when they
// give up (a second each way), so a waiter that left the queue before
// returning would take a second or more. (Before, in a burst of 10,000
// waiters giving up: p50 270 ms after the deadline, some over a second.)
func TestWaitersReturnWhenTheirContextEnds(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		holder, err := redislock.New(b.rdb, quiet).Acquire(ctx, "crowd")
		require.NoError(t, err)
		defer holder.Release(ctx)

		proxy := newProxy(t, b.rdb.Options().Addr)
		rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ContextTimeoutEnabled: true, PoolSize: 64})
		t.Cleanup(func() { _ = rdb.Close() })
		shared := redislock.New(rdb, quiet)
		// A deadline, as in the burst: go-redis (ContextTimeoutEnabled)
		// cuts an attempt in flight at a ctx deadline, not at a cancel.
		deadline := time.Now().Add(5 * time.Second)
		waitCtx, cancel := context.WithDeadline(ctx, deadline)
		defer cancel()
		const waiters = 40
		var wg sync.WaitGroup
		returned := make([]time.Time, waiters)
		errs := make([]error, waiters)
		for i := range waiters {
			c := shared // half of them in line in one process
			if i%2 == 0 {
				c = redislock.New(rdb, quiet) // the others each in a "process" of its own
			}
			wg.Go(func() {
				_, errs[i] = c.Acquire(waitCtx, "crowd", redislock.WithRetry(redislock.LinearBackoff(time.Hour)))
				returned[i] = time.Now()
			})
		}
		// Every "process" has a waiter in the server's queue.
		eventually(t, 10*time.Second, func() bool { return queueLen(t, b.rdb, "crowd") == waiters/2+1 }, "the waiters did not queue")
		require.Less(t, time.Until(deadline), 5*time.Second)
		require.Greater(t, time.Until(deadline), 500*time.Millisecond, "too slow to queue: the test needs the link slowed before the deadline")
		proxy.SetDelay(time.Second)
		proxy.SetMode(faultproxy.Delay)
		cancelled := deadline
		wg.Wait()
		proxy.SetMode(faultproxy.Pass)
		var worst time.Duration
		for i := range waiters {
			require.ErrorIs(t, errs[i], context.DeadlineExceeded, "waiter %d", i)
			worst = max(worst, returned[i].Sub(cancelled))
		}
		t.Logf("latest return after the deadline: %v", worst)
		require.Less(t, worst, 500*time.Millisecond, "a waiter waited for the slow link before returning")
		// And the queue is left, in the background, once the link heals.
		eventually(t, 10*time.Second, func() bool { return queueLen(t, b.rdb, "crowd") == 0 }, "the waiters did not leave the queue")
	})
}

func TestAStrategyThatChangesItsMindDoesNotPanic(t *testing.T) {
	rdb := newMini(t)
	ctx := context.Background()
	holder, err := redislock.New(rdb, quiet).Acquire(ctx, "job")
	require.NoError(t, err)
	calls := 0
	flip := retryFunc(func(int) (time.Duration, bool) { // against the advice: it holds state
		calls++
		return time.Millisecond, calls > 1
	})
	require.NotPanics(t, func() {
		_, err = redislock.New(rdb, quiet).Acquire(ctx, "job", redislock.WithRetry(flip))
	})
	require.ErrorIs(t, err, redislock.ErrNotAcquired)
	require.NoError(t, holder.Release(ctx))
}
