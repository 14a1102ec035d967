package redislock_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redislock/redislock"
)

// The seams between the exclusive lock and the lock family (issue 29):
// what a waiter leaves behind when it goes, and who is told when a lock
// is let go.

// familyKind is one way of taking a name, as a test drives it.
type familyKind struct {
	name    string
	acquire func(ctx context.Context, c *redislock.Client, name string, opts ...redislock.Option) (*redislock.Lock, error)
}

var (
	exclusiveKind = familyKind{"exclusive", func(ctx context.Context, c *redislock.Client, name string, opts ...redislock.Option) (*redislock.Lock, error) {
		return c.Acquire(ctx, name, opts...)
	}}
	sharedKind = familyKind{"shared", func(ctx context.Context, c *redislock.Client, name string, opts ...redislock.Option) (*redislock.Lock, error) {
		return c.AcquireShared(ctx, name, opts...)
	}}
	semaphoreKind = familyKind{"semaphore of 1", func(ctx context.Context, c *redislock.Client, name string, opts ...redislock.Option) (*redislock.Lock, error) {
		return c.AcquireSemaphore(ctx, name, 1, opts...)
	}}
	multiKind = familyKind{"multi", func(ctx context.Context, c *redislock.Client, name string, opts ...redislock.Option) (*redislock.Lock, error) {
		return c.AcquireMulti(ctx, []string{name, name + "-other"}, opts...)
	}}
)

// A waiter that gave up (its ctx ended, or its strategy ran out) is never
// handed the lock: the release right after it returned lets the next
// caller in, and a caller that does not wait finds the name free. With the
// waiter's place still in the server's queue, the release handed the lock
// to it, and the name was held by nobody until that hand-over lapsed.
func TestAWaiterThatGaveUpIsHandedNothing(t *testing.T) {
	t.Parallel()
	cases := []struct{ holder, waiter familyKind }{
		{exclusiveKind, exclusiveKind},
		{exclusiveKind, sharedKind},
		{semaphoreKind, semaphoreKind},
	}
	forEachBackend(t, func(t *testing.T, b *backend) {
		for _, tc := range cases {
			for _, waiters := range []int{1, 3} {
				for _, sameClient := range []bool{true, false} {
					where := "on other Clients"
					if sameClient {
						where = "on the holder's Client"
					}
					t.Run(fmt.Sprintf("%s holder, %d %s waiters %s", tc.holder.name, waiters, tc.waiter.name, where), func(t *testing.T) {
						for trial := range 3 {
							requireGoneWaitersHandedNothing(t, b, tc.holder, tc.waiter, waiters, sameClient,
								fmt.Sprintf("gone-%s-%d-%v-%d", tc.waiter.name, waiters, sameClient, trial))
						}
					})
				}
			}
		}
	})
}

func requireGoneWaitersHandedNothing(t *testing.T, b *backend, holderKind, waiterKind familyKind, waiters int, sameClient bool, name string) {
	t.Helper()
	ctx := context.Background()
	c := redislock.New(b.rdb, quiet)
	holder, err := holderKind.acquire(ctx, c, name, redislock.WithTTL(200*time.Millisecond), redislock.WithWatchdog(false))
	require.NoError(t, err)
	require.NoError(t, holder.Extend(ctx, 3*time.Second))

	var wg sync.WaitGroup
	errs := make([]error, waiters)
	for i := range waiters {
		wc := c
		if !sameClient {
			wc = redislock.New(b.rdb, quiet)
		}
		wg.Go(func() {
			wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			defer cancel()
			_, errs[i] = waiterKind.acquire(wctx, wc, name, redislock.WithRetry(redislock.LinearBackoff(10*time.Second)))
		})
	}
	wg.Wait()
	for i, err := range errs {
		require.ErrorIs(t, err, redislock.ErrNotAcquired, "waiter %d gives up", i)
	}

	require.NoError(t, holder.Release(ctx))
	next, err := holderKind.acquire(ctx, c, name, redislock.WithTTL(300*time.Millisecond))
	require.NoError(t, err, "a caller that does not wait, right after the release")
	require.NoError(t, next.Release(ctx))
}
