package redislock

import (
	"cmp"
	"context"
	"errors"
	"runtime"

	"github.com/redislock/redislock/internal/lockrules"
)

// isUnreachable tells a Redis that could not be reached or serve (fail open
// may run) from every other error; the rule is internal/lockrules'.
func isUnreachable(err error) bool {
	return lockrules.Unreachable(err, ErrNotAcquired, ErrInvalidArgument, ErrClosed)
}

// runWith is the RunWith calls of the kinds that cannot fail open
// (RunWithSharedLock, RunWithSemaphore, RunWithLockMulti): a nil fn is
// refused before anything is sent, naming the lock (what, then name), then
// fn runs holding the lock acquire gives (see run).
func runWith(ctx context.Context, fn func(ctx context.Context) error, what string, name any, acquire func() (*Lock, error)) error {
	if fn == nil {
		return invalidf("nil fn for %s %q", what, name)
	}
	l, err := acquire()
	return l.run(ctx, fn, err)
}

// run runs fn holding l, and releases it (see RunWithLock); when the
// acquire that was to give l failed with acquireErr, fn does not run and
// run returns acquireErr.
func (l *Lock) run(ctx context.Context, fn func(ctx context.Context) error, acquireErr error) (err error) {
	if acquireErr != nil {
		return acquireErr
	}
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
		// The loss lockCtx ended with, else one the release found, goes
		// with fn's error; a failed release without a loss is only logged.
		lost = cmp.Or(lost, foundLost)
		switch {
		case lost != nil:
			err = join(lost, err)
		case releaseErr != nil:
			l.h.opts.log().Warn("redislock: release after the critical section failed; the lock expires after its TTL",
				"name", l.h.name, "holder", holderID(l.h.token()), "error", releaseErr)
		}
	}()
	return fn(runCtx)
}
