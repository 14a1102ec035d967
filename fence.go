package redislock

import "context"

// Fencing tokens. A lock taken with WithFencing also increments a counter,
// in the same script, and hands the holder the new value: above every
// earlier acquisition's of the name. The resource refuses what carries a
// lower fence than the highest it accepted (the patterns, with their SQL:
// docs/guarantees.md). The counter, "<lock key>:fence", has no expiry; a
// counter below the server's clock (TIME, µs) is raised to it, so fences
// never go backwards, even when the counter is lost or restored older.

// lockKey is the context key under which a lock's context and
// RunWithLock's fn context carry the *Lock.
type lockKey struct{}

// withLock records l in ctx. A nil l (a fail-open run) hides any lock
// inherited from an outer one, so that the run never reports someone
// else's lock or fence.
func withLock(ctx context.Context, l *Lock) context.Context {
	return &lockContext{Context: ctx, l: l}
}

// lockContext is ctx with a Lock as the value of lockKey: a type of our
// own, so that a Lock can remember its context weakly (see Lock.Context).
type lockContext struct {
	context.Context
	l *Lock
}

// Done marks that someone may wait on the channel (see dropped); a
// fail-open run's context has no Lock to mark.
func (c *lockContext) Done() <-chan struct{} {
	if c.l != nil {
		c.l.h.doneAsked.Store(true)
	}
	return c.Context.Done()
}

func (c *lockContext) Value(key any) any {
	if key == (lockKey{}) {
		return c.l
	}
	return c.Context.Value(key)
}

// LockFromContext returns the Lock whose work ctx belongs to: the context
// passed to RunWithLock's fn, or Lock.Context() (and contexts derived from
// them), so that fn can call Valid, Extend or TTL. It reports false when
// ctx does not come from a lock, or when fn ran fail-open without one.
func LockFromContext(ctx context.Context) (*Lock, bool) {
	if ctx == nil {
		return nil, false
	}
	l, _ := ctx.Value(lockKey{}).(*Lock)
	return l, l != nil
}

// FenceFromContext returns the fencing token of the lock whose work ctx
// belongs to: the context passed to RunWithLock's fn, or Lock.Context() (and
// contexts derived from them). It reports false when the lock was taken
// without WithFencing, when fn ran fail-open without a lock, or when ctx
// does not come from a lock.
func FenceFromContext(ctx context.Context) (int64, bool) {
	l, ok := LockFromContext(ctx)
	if !ok || l.h.fence <= 0 {
		return 0, false
	}
	return l.h.fence, true
}
