package redislock

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// cancelAfterRelease is a store whose release ends the caller's ctx once
// the reply is in: a request timing out just after its Release was
// answered.
type cancelAfterRelease struct {
	store
	cancel   context.CancelFunc
	releases atomic.Int32
}

func (s *cancelAfterRelease) release(ctx context.Context, ref *lockRef) (int64, error) {
	s.releases.Add(1)
	reply, err := s.store.release(ctx, ref)
	s.cancel()
	return reply, err
}

// A ctx that ends after the release was answered does not make Release
// try again: one release, the key deleted, nil, and no loss reported (a
// second attempt would find the key gone and call it lost).
func TestAContextEndingAfterTheReplyKeepsTheRelease(t *testing.T) {
	mini := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mini.Addr()})
	defer rdb.Close()
	lost := &lossCounter{}
	c := New(rdb, WithLogger(discard()), WithObserver(lost))
	l, err := c.Acquire(context.Background(), "answered")
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	wrapped := &cancelAfterRelease{store: c.store, cancel: cancel}
	c.store = wrapped
	require.NoError(t, l.Release(ctx), "the release was answered: the key is deleted")
	require.Error(t, ctx.Err())
	require.EqualValues(t, 1, wrapped.releases.Load(), "one release sent")
	require.False(t, mini.Exists(l.Key()))
	require.Zero(t, lost.n.Load(), "nothing was lost")
}

// stalledRelease is a store whose release hangs, as against a Redis that
// stopped answering, until the caller's ctx ends or the test lets it go.
type stalledRelease struct {
	store
	free     chan struct{}
	releases atomic.Int32
}

func (s *stalledRelease) release(ctx context.Context, ref *lockRef) (int64, error) {
	s.releases.Add(1)
	select {
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-s.free:
		return s.store.release(ctx, ref)
	}
}

// RunWithLock's release is bounded by ReleaseTimeout, as documented: one
// attempt on its detached, bounded context, not a second detached attempt
// of another ReleaseTimeout once the first timed out (RunWithLock returned
// after twice ReleaseTimeout). What is left goes to the background.
func TestRunWithLocksReleaseIsBoundedByReleaseTimeout(t *testing.T) {
	t.Parallel()
	mini := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mini.Addr()})
	defer rdb.Close()
	c := New(rdb, WithLogger(discard()))
	defer c.Close(context.Background())
	stalled := &stalledRelease{store: c.store, free: make(chan struct{})}
	c.store = stalled
	defer close(stalled.free)

	err := c.RunWithLock(context.Background(), "stalled", func(context.Context) error { return nil })
	require.NoError(t, err, "a failed release after fn is logged, not returned")
	require.EqualValues(t, 1, stalled.releases.Load(), "one release attempt within ReleaseTimeout before RunWithLock returned")
}
