package redislock

import (
	"context"
	"fmt"
	"runtime"
	"time"
	"weak"
)

// Lock is a held lock. It is safe for concurrent use, is not tied to the
// goroutine that acquired it, and must not be copied. Release it when
// done: a Lock that becomes unreachable while held is released by the Client
// and logged at Error. Its Context, what hangs on it (a child context whose
// cancel was not called, an AfterFunc not stopped), and a goroutine waiting
// on its Done channel keep it: the context package keeps a child registered
// with its parent until cancelled, so a child whose cancel is never called
// keeps the Lock until the hold ends otherwise (Client.Close), even when
// nothing references the child.
type Lock struct {
	h *hold
	// ctx is the context Context returned last, held weakly: a Lock must
	// not keep alive a context that keeps it alive, or a dropped Lock
	// would never be collected. Guarded by h.mu.
	ctx weak.Pointer[lockContext]
}

// noHold is the hold a nil or zero Lock reads its fields from: all zero.
var noHold = hold{opts: &options{}}

// held returns l's hold, noHold for a nil or zero Lock (for the getters).
func (l *Lock) held() *hold {
	if l == nil || l.h == nil {
		return &noHold
	}
	return l.h
}

// check is the first check of Extend, Release and TTL.
func (l *Lock) check(ctx context.Context) error {
	if l == nil || l.h == nil {
		return errNilLock
	}
	return invalidIf(ctx == nil, "nil context")
}

// drift allows for clock drift over a lease: 1% of the TTL plus 2ms (Redlock's figure).
func drift(ttl time.Duration) time.Duration { return ttl/100 + 2*time.Millisecond }

// Name returns the name given to Acquire (for a Lock from AcquireMulti,
// its first name; "" on a nil Lock).
func (l *Lock) Name() string { return l.held().name }

// Key returns the Redis key that holds the token (for a Lock from
// AcquireMulti, its first name's; "" on a nil Lock).
func (l *Lock) Key() string { return l.held().ref.key }

// Token returns this acquisition's random token, without metadata ("" on a
// nil Lock): a secret, whoever knows it can release the lock.
func (l *Lock) Token() string { return l.held().token() }

// Fence returns the fencing token taken with the lock, 0 without WithFencing
// (and on a nil Lock); a multi lock's first name's (see FenceOf).
func (l *Lock) Fence() int64 { return l.held().fence }

// Valid reports whether the lock can be trusted now: its hold has not ended
// and its safe deadline (monotonic clock) has not passed. Unlike
// Context().Err() it waits for no timer: right the instant a paused process
// resumes. Call it before an irreversible write; it sends nothing.
func (l *Lock) Valid() bool {
	h := l.held()              // a nil Lock's has no safe deadline: never valid
	defer runtime.KeepAlive(l) // a Lock in use is no dropped one (see dropped)
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ended == nil && time.Now().Before(h.safeDeadline)
}

// Context returns a context with the values of Acquire's ctx, cancelled when
// the hold ends: cause a *LostError when lost, ErrReleased when released
// (ErrNotHeld at once on a nil Lock). FenceFromContext and LockFromContext
// work on it.
func (l *Lock) Context() context.Context {
	if l == nil || l.h == nil {
		ctx, cancel := context.WithCancelCause(context.Background())
		cancel(errNilLock)
		return ctx
	}
	// The Lock is a value of its own context: what hangs on that context (a
	// child not cancelled, an AfterFunc not stopped) keeps the Lock.
	parent := l.h.context()
	l.h.mu.Lock()
	defer l.h.mu.Unlock()
	if ctx := l.ctx.Value(); ctx != nil {
		return ctx
	}
	ctx := &lockContext{Context: parent, l: l}
	l.ctx = weak.Make(ctx)
	return ctx
}

// TTL returns the lock's lease left on the server (a multi lock's shortest);
// ErrNotHeld when no longer ours or on a nil Lock; or the Redis error.
func (l *Lock) TTL(ctx context.Context) (time.Duration, error) {
	if err := l.check(ctx); err != nil {
		return 0, err
	}
	defer runtime.KeepAlive(l) // a Lock in use is no dropped one (see dropped)
	if err := l.h.endedFor(ctx); err != nil {
		return 0, err
	}
	reply, err := l.h.client.store.pttl(ctx, &l.h.ref)
	switch {
	case err != nil:
		return 0, fmt.Errorf("redislock: TTL of %q: %w", l.h.name, err)
	case reply == -2:
		return 0, fmt.Errorf("%w: %q: key is gone", ErrNotHeld, l.h.lostName())
	case reply == -3:
		return 0, fmt.Errorf("%w: %q: held by another holder", ErrNotHeld, l.h.lostName())
	case reply == -1:
		return 0, fmt.Errorf("redislock: TTL of %q: the key has no expiry (someone ran PERSIST on it)", l.h.name)
	case reply < 0 || reply > maxLeaseMs:
		return 0, fmt.Errorf("redislock: TTL of %q: unexpected reply %d from the pttl script", l.h.name, reply)
	}
	return time.Duration(reply) * time.Millisecond, nil
}
