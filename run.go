package redislock

import (
	"context"
	"errors"
	"runtime"

	"github.com/redislock/redislock/internal/lockrules"
)

// RunWithLock acquires the lock called name, runs fn while holding it, and
// releases it.
//
// fn's context is derived from ctx and is also cancelled when the lock is
// lost, with the *LostError as its cause; FenceFromContext on it returns the
// fencing token. The release always happens, also when fn panics (the panic
// then continues) and when ctx was cancelled: it runs on a context detached
// from ctx's cancellation, bounded by ReleaseTimeout.
//
// RunWithLock returns fn's error. If the lock was lost while fn ran (or
// Release found it no longer ours), the error also matches ErrLockLost and
// carries the *LostError. When fn did not run it returns Acquire's error:
// ErrNotAcquired when someone else holds the lock, a wrapped Redis error when
// Redis could not be reached (unless WithFailOpen is set, in which case fn
// runs without a lock), ErrInvalidArgument for bad input, including a nil fn.
// A failed release after fn is logged at Warn, not returned: fn did run,
// and the lock expires after its TTL.
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

// isUnreachable tells a Redis that could not be reached or could not serve
// (fail open may run without it) from every other error: the lock being
// held, bad input, a closed Client, and replies such as WRONGTYPE, NOPERM
// or TRYAGAIN, which say Redis answered. The rule lives in
// internal/lockrules, shared with the redislock command.
func isUnreachable(err error) bool {
	return lockrules.Unreachable(err, ErrNotAcquired, ErrInvalidArgument, ErrClosed)
}

// run runs fn holding l, and releases it (see RunWithLock).
func (l *Lock) run(ctx context.Context, fn func(ctx context.Context) error) (err error) {
	defer runtime.KeepAlive(l) // a Lock in use is no dropped one (see dropped)
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
				"name", l.h.name, "error", releaseErr)
		}
		if lost != nil {
			err = join(lost, err)
		}
	}()
	return fn(runCtx)
}

// RunWithSharedLock is RunWithLock for a reader: it takes a shared hold of
// the lock called name (see AcquireShared), runs fn while holding it, and
// gives the share back. Other shared holders may run at the same time; an
// exclusive holder (Acquire, RunWithLock) may not. fn's context, the
// release and the errors are RunWithLock's, with AcquireShared's errors
// when fn did not run; WithFailOpen is refused (ErrInvalidArgument).
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

// RunWithSemaphore is RunWithLock for a semaphore: it takes one of the
// limit slots of the semaphore called name (see AcquireSemaphore), runs fn
// while holding it, and gives the slot back. fn's context, the release and
// the errors are RunWithLock's, with AcquireSemaphore's errors when fn did
// not run (ErrNotAcquired when every slot is held, ErrLimitMismatch when
// the holders use another limit); WithFailOpen is refused
// (ErrInvalidArgument).
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

// RunWithLockMulti is RunWithLock for several names at once: it takes all
// of names (see AcquireMulti), runs fn while holding them, and releases
// them. fn's context is cancelled when any name is lost;
// LockFromContext(ctx).FenceOf gives each name's fence, FenceFromContext
// the first name's. The release and the errors are RunWithLock's, with
// AcquireMulti's errors when fn did not run; WithFailOpen is refused
// (ErrInvalidArgument).
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
