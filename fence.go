package redislock

import "context"

// Fencing tokens. A lock taken with WithFencing also increments a counter,
// in the same script and round trip, and hands the new value to the
// holder: every acquisition of a name gets a number above every earlier
// one; a failed attempt takes none. The protected resource remembers the
// highest fence it accepted and refuses writes that carry a lower one:
//
//	UPDATE settlement SET status = 'done', fence = :fence
//	WHERE  settle_date = :date AND fence < :fence;
//
// so that a holder that lost its lock without knowing (a long GC pause, a
// frozen VM) is harmless. The counter lives at "<lock key>:fence", in the
// lock's hash slot, without expiry (it must outlive every holder; this
// package never deletes it). Fences never go backwards, even when the
// counter is lost (a restart without persistence, eviction, FLUSHALL),
// restored from an older snapshot, or promoted from a replica that missed
// writes: the script raises a counter below the server's clock (TIME, in
// microseconds) to it. So fences are about 1.8e15 (JavaScript-safe until
// the 2250s), and the guarantee holds as long as the servers' clocks do
// not step back by more than the outage lasted.

// lockKey is the context key under which a lock's context and
// RunWithLock's fn context carry the *Lock.
type lockKey struct{}

// withLock records l in ctx. A nil l (a fail-open run) hides any lock
// inherited from an outer one, so that the run never reports someone
// else's lock or fence.
func withLock(ctx context.Context, l *Lock) context.Context {
	return &lockContext{ctx, l}
}

// lockContext is ctx with a Lock as the value of lockKey: a type of our
// own, so that a Lock can remember its context weakly (see Lock.Context).
type lockContext struct {
	context.Context
	l *Lock
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
