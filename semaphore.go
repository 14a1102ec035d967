package redislock

import "context"

// MaxSemaphoreLimit is the largest limit AcquireSemaphore accepts. A
// semaphore's scripts count its holders on every call, so a limit far
// beyond the holders one deployment can serve is a mistake, not a setting.
const MaxSemaphoreLimit = 100_000

// AcquireSemaphore takes one of the limit slots of the semaphore called
// name, or fails: at most limit holders, across every process that uses
// the name with the same limit, hold it at once.
//
// Each holder gets a Lock of its own, with everything a Lock from Acquire
// has (fences come from the name's one counter); a crashed holder's slot
// comes back when its lease ends. Waiting is Acquire's, served in arrival
// order: a release hands its slot to the first waiter in line, of whatever
// Client. A name is a lock or a semaphore: Acquire of a semaphore's name, or
// the other way round, fails with Redis' WRONGTYPE error.
//
// Errors: as Acquire's, and ErrLimitMismatch when the current holders use
// another limit (the caller is not queued); ErrInvalidArgument for a limit
// outside 1..MaxSemaphoreLimit, WithFailOpen, or a quorum Client. A failed
// call leaves no slot held and no place in the queue. On success the
// caller must call Lock.Release.
func (c *Client) AcquireSemaphore(ctx context.Context, name string, limit int, opts ...Option) (*Lock, error) {
	switch err := c.usable(); {
	case err != nil:
		return nil, err
	case limit < 1 || limit > MaxSemaphoreLimit:
		return nil, invalidf("semaphore limit %d is outside 1..%d", limit, MaxSemaphoreLimit)
	}
	return c.take(ctx, semaphoreSlot, name, opts, layoutSemaphore(limit))
}

// RunWithSemaphore is RunWithLock with a slot of the semaphore called name
// (see AcquireSemaphore), whose error it returns when fn did not run;
// WithFailOpen is refused.
func (c *Client) RunWithSemaphore(ctx context.Context, name string, limit int, fn func(ctx context.Context) error, opts ...Option) error {
	return runWith(ctx, fn, "semaphore", name, func() (*Lock, error) { return c.AcquireSemaphore(ctx, name, limit, opts...) })
}
