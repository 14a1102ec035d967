package redislock

import (
	"context"
	"errors"
	"runtime"

	"github.com/redislock/redislock/internal/lockrules"
)

// RunWithLock acquires the lock called name, runs fn while holding it, and
// releases it, also when fn panics (the panic then continues) or ctx was
// cancelled: on a context detached from ctx, bounded by ReleaseTimeout.
// fn's context is derived from ctx and is also cancelled when the lock is
// lost, with the *LostError as its cause; FenceFromContext on it gives the
// fencing token.
//
// It returns fn's error, which also matches ErrLockLost (carrying the
// *LostError) if the lock was lost while fn ran. When fn did not run it
// returns Acquire's error (with WithFailOpen, fn runs without a lock when
// Redis cannot be reached), or ErrInvalidArgument for a nil fn. A failed
// release after fn is logged at Warn, not returned: the lock expires.
func (c *Client) RunWithLock(ctx context.Context, name string, fn func(ctx context.Context) error, opts ...Option) error {
	if err := c.usable(); err != nil {
		return err
	}
	if fn == nil {
		return invalidf("nil fn for lock %q", name)
	}
	o, err := c.resolve(opts)
	if err != nil {
		return err
	}
	l, err := c.acquire(ctx, name, o)
	if err != nil {
		if o.failOpen && ctx != nil && ctx.Err() == nil && isUnreachable(err) {
			o.log().Warn("redislock: redis unreachable, running WITHOUT the lock (fail open)",
				"name", name, "error", err)
			if o.observer != nil {
				o.observer.ObserveFailOpen(FailOpenEvent{Name: name, Err: err})
			}
			return fn(withLock(ctx, nil))
		}
		return err
	}
	return l.run(ctx, fn)
}

// isUnreachable tells a Redis that could not be reached or serve (fail open
// may run) from every other error; the rule is internal/lockrules'.
func isUnreachable(err error) bool {
	return lockrules.Unreachable(err, ErrNotAcquired, ErrInvalidArgument, ErrClosed)
}

// run runs fn holding l, and releases it (see RunWithLock).
func (l *Lock) run(ctx context.Context, fn func(ctx context.Context) error) (err error) {
	defer runtime.SetFinalizer(l, nil) // in use, then released (see Release)
	runCtx, cancel := context.WithCancelCause(withLock(ctx, l))
	lockCtx := l.Context()
	stopForwarding := context.AfterFunc(lockCtx, func() { cancel(context.Cause(lockCtx)) })
	defer func() {
		stopForwarding()
		cancel(nil)
		var lost *LostError
		errors.As(context.Cause(lockCtx), &lost)

		releaseCtx, cancelRelease := context.WithTimeout(context.WithoutCancel(ctx), ReleaseTimeout)
		foundLost, releaseErr := l.h.release(releaseCtx, false)
		cancelRelease()
		switch {
		case lost != nil:
		case foundLost != nil:
			lost = foundLost
		case releaseErr != nil:
			l.h.opts.log().Warn("redislock: release after the critical section failed; the lock expires after its TTL",
				"name", l.h.name, "holder", holderID(l.h.token()), "error", releaseErr)
		}
		if lost != nil {
			err = join(lost, err)
		}
	}()
	return fn(runCtx)
}

// RunWithSharedLock is RunWithLock with a shared hold (see AcquireShared).
// When fn did not run it returns AcquireShared's error; WithFailOpen is
// refused.
func (c *Client) RunWithSharedLock(ctx context.Context, name string, fn func(ctx context.Context) error, opts ...Option) error {
	if fn == nil {
		return invalidf("nil fn for shared lock %q", name)
	}
	l, err := c.AcquireShared(ctx, name, opts...)
	if err != nil {
		return err
	}
	return l.run(ctx, fn)
}

// RunWithSemaphore is RunWithLock with a slot of the semaphore called name
// (see AcquireSemaphore), whose error it returns when fn did not run;
// WithFailOpen is refused.
func (c *Client) RunWithSemaphore(ctx context.Context, name string, limit int, fn func(ctx context.Context) error, opts ...Option) error {
	if fn == nil {
		return invalidf("nil fn for semaphore %q", name)
	}
	l, err := c.AcquireSemaphore(ctx, name, limit, opts...)
	if err != nil {
		return err
	}
	return l.run(ctx, fn)
}

// RunWithLockMulti is RunWithLock with all of names (see AcquireMulti):
// LockFromContext(ctx).FenceOf gives each name's fence. When fn did not run
// it returns AcquireMulti's error; WithFailOpen is refused.
func (c *Client) RunWithLockMulti(ctx context.Context, names []string, fn func(ctx context.Context) error, opts ...Option) error {
	if fn == nil {
		return invalidf("nil fn for locks %q", names)
	}
	l, err := c.AcquireMulti(ctx, names, opts...)
	if err != nil {
		return err
	}
	return l.run(ctx, fn)
}
