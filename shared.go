package redislock

import "context"

// AcquireShared takes a shared hold of the lock called name (a reader's,
// in a readers-writer lock), or fails: any number of shared holders hold
// the name at once, and none while an exclusive holder (Acquire) does.
// Writers are not starved: once an exclusive waiter is queued, later
// shared callers queue behind it.
//
// The Lock has everything a Lock from Acquire has, with a lease of its own.
// With WithFencing, every shared holder of one epoch (from the name going
// shared until the last share ends) gets the same fence, above every fence
// before it and below the next exclusive holder's. Waiting is Acquire's.
//
// Errors: as Acquire's; ErrInvalidArgument for WithFailOpen and on a
// quorum Client. A failed call leaves no share held and no place in the
// queue. On success the caller must call Lock.Release.
func (c *Client) AcquireShared(ctx context.Context, name string, opts ...Option) (*Lock, error) {
	return c.take(ctx, sharedHold, name, opts, nil)
}

// RunWithSharedLock is RunWithLock with a shared hold (see AcquireShared).
// When fn did not run it returns AcquireShared's error; WithFailOpen is
// refused.
func (c *Client) RunWithSharedLock(ctx context.Context, name string, fn func(ctx context.Context) error, opts ...Option) error {
	return runWith(ctx, fn, "shared lock", name, func() (*Lock, error) { return c.AcquireShared(ctx, name, opts...) })
}
