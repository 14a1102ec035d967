package redislock

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
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

// hold is a held lock's state, what the Client's watchdog, alarms and
// janitor reach. It points at its Lock only through what hangs on the Lock's
// context (see Lock.Context), so a dropped Lock becomes unreachable.
type hold struct {
	// Lock order: l.extending (the extension slot) before l.mu, and l.mu
	// before the Client's scheduler, alarms and janitor mutexes;
	// pauses.mu (taken under a timed queue's mutex, l.mu held or not) and
	// slotMap.mu are leaves: nothing is taken while either is held;
	// waitRooms.mu and the notifier's mutex are never held with l.mu. The
	// fields above extending are written before the Lock is handed out
	// and never again.

	client     *Client
	opts       *options // never written: may be the Client's defaults
	name       string
	ref        lockRef // key, token and prepared commands
	fence      int64
	acquiredAt time.Time

	// extending serialises extensions, so that the last confirmed is the
	// last Redis ran. Extend waits on extendFreed (guarded by mu), made only when it must.
	extending   atomic.Bool
	extendFreed chan struct{}

	mu            sync.Mutex
	ttl           time.Duration // current lease; Extend may change it
	interval      time.Duration // current watchdog interval
	safeDeadline  time.Time     // monotonic; the lease cannot have ended before it
	deadlineAlarm alarm         // rings at safeDeadline (Client.alarms)
	maxHoldAlarm  alarm         // rings at the maximum hold, if any
	lastErr       error         // the last extension error, for an Unreachable loss
	// ended is what ended the hold (ErrReleased, a *LostError, or an
	// error matching ErrClosed); nil while held. Set once, by end.
	ended     error
	releasing int // releaseNone, releaseSending or releaseDone (see hold.release)
	// The lock's context, made on first use; doneCause, once set, is the
	// cause it is (or will be) cancelled with. It carries no Lock.
	parent      context.Context
	ctx         context.Context
	cancel      context.CancelCauseFunc
	doneCause   error
	doneAsked   atomic.Bool        // the Lock's context was asked for its Done channel
	done        weak.Pointer[byte] // the Done channel of a dropped Lock's context (see dropped)
	doneCleanup runtime.Cleanup    // ends the hold when done is unreachable
	caller      uintptr            // where the lock was acquired, for the log of a dropped Lock

	watch watchState // guarded by client.watchdog.mu
	room  *waitRoom  // this Client's waiters for the lock; handed on when the hold ends
}

// startLeased makes l the held lock, taken at took by a command sent at
// sent, leased for at least lease (at most the TTL) from sent: a hand-over's
// is dated from an earlier attempt; a shorter one is extended at once.
func (l *hold) startLeased(ctx context.Context, fence int64, sent, took time.Time, lease time.Duration, room *waitRoom) {
	o := l.opts
	l.fence, l.room, l.parent = fence, room, ctx
	l.acquiredAt, l.watch = took, watchState{index: -1}
	l.ttl, l.interval, l.safeDeadline = o.ttl, o.interval(), sent.Add(lease-drift(lease))
	l.mu.Lock()
	defer l.mu.Unlock()
	l.deadlineAlarm = alarm{rings: (*safeDeadlineRing)(l), index: -1}
	l.client.alarms().set(&l.deadlineAlarm, l.safeDeadline)
	if o.maxHold > 0 {
		l.maxHoldAlarm = alarm{rings: (*maxHoldRing)(l), index: -1}
		l.client.alarms().set(&l.maxHoldAlarm, took.Add(o.maxHold))
	}
	if o.watchdog {
		due := sent.Add(l.interval)
		if lease < o.ttl {
			due = time.Now()
		}
		l.client.watchdog().schedule(l, due, l.interval)
	} else {
		l.watch.unwatched = true
	}
}

// drift allows for clock drift over a lease: 1% of the TTL plus 2ms (Redlock's figure).
func drift(ttl time.Duration) time.Duration { return ttl/100 + 2*time.Millisecond }

func (l *hold) currentTTL() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ttl
}

// Name returns the name given to Acquire (for a Lock from AcquireMulti,
// its first name; "" on a nil Lock).
func (l *Lock) Name() string {
	if l == nil || l.h == nil {
		return ""
	}
	return l.h.name
}

// Key returns the Redis key that holds the token (for a Lock from
// AcquireMulti, its first name's; "" on a nil Lock).
func (l *Lock) Key() string {
	if l == nil || l.h == nil {
		return ""
	}
	return l.h.ref.key
}

// Token returns this acquisition's random token, without metadata ("" on a
// nil Lock): a secret, whoever knows it can release the lock.
func (l *Lock) Token() string {
	if l == nil || l.h == nil {
		return ""
	}
	return l.h.token()
}

func (l *hold) token() string {
	token, _, _ := strings.Cut(l.ref.token, metadataSeparator)
	return token
}

// Fence returns the fencing token taken with the lock, 0 without WithFencing
// (and on a nil Lock); a multi lock's first name's (see FenceOf).
func (l *Lock) Fence() int64 {
	if l == nil || l.h == nil {
		return 0
	}
	return l.h.fence
}

func (l *hold) pastSafeDeadline() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return !time.Now().Before(l.safeDeadline)
}

// Valid reports whether the lock can be trusted now: its hold has not ended
// and its safe deadline (monotonic clock) has not passed. Unlike
// Context().Err() it waits for no timer: right the instant a paused process
// resumes. Call it before an irreversible write; it sends nothing.
func (l *Lock) Valid() bool {
	if l == nil || l.h == nil {
		return false
	}
	defer runtime.KeepAlive(l) // a Lock in use is no dropped one (see dropped)
	l.h.mu.Lock()
	defer l.h.mu.Unlock()
	return l.h.ended == nil && time.Now().Before(l.h.safeDeadline)
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

// context returns the hold's context, made on first use: it keeps the
// acquire ctx's values but not its cancellation (a short wait timeout must
// not end the hold), and ends with the hold.
func (l *hold) context() context.Context {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ctx == nil {
		l.ctx, l.cancel = context.WithCancelCause(context.WithoutCancel(l.parent))
		if l.doneCause != nil {
			l.cancel(l.doneCause)
		}
	}
	return l.ctx
}

// TTL returns the lock's lease left on the server (a multi lock's shortest);
// ErrNotHeld when no longer ours or on a nil Lock; or the Redis error.
func (l *Lock) TTL(ctx context.Context) (time.Duration, error) {
	if l == nil || l.h == nil {
		return 0, errNilLock
	}
	if ctx == nil {
		return 0, invalidf("nil context")
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
	case reply < 0 || reply > int64(math.MaxInt64/time.Millisecond):
		return 0, fmt.Errorf("redislock: TTL of %q: unexpected reply %d from the pttl script", l.h.name, reply)
	}
	return time.Duration(reply) * time.Millisecond, nil
}

// endedFor is notHeld for a caller: when the hold ended, it also waits
// (within ctx) for the lock's context, cancelled after a loss is announced.
func (l *hold) endedFor(ctx context.Context) error {
	err := l.notHeld()
	if err != nil {
		select {
		case <-l.context().Done():
		case <-ctx.Done():
		}
	}
	return err
}

// notHeld returns ErrNotHeld, wrapped with why, once the hold has ended.
func (l *hold) notHeld() error {
	l.mu.Lock()
	cause := l.ended
	l.mu.Unlock()
	if cause == nil {
		return nil
	}
	if errors.Is(cause, ErrReleased) {
		return fmt.Errorf("%w: %q was released", ErrNotHeld, l.name)
	}
	return join(fmt.Errorf("%w: %q", ErrNotHeld, l.name), cause)
}

func (l *hold) tryExtending() bool { return l.extending.CompareAndSwap(false, true) }

func (l *hold) waitExtending(ctx context.Context) error {
	for !l.tryExtending() {
		l.mu.Lock()
		if l.extendFreed == nil {
			l.extendFreed = make(chan struct{})
		}
		freed := l.extendFreed
		l.mu.Unlock()
		if l.tryExtending() { // freed before we could wait for it
			return nil
		}
		select {
		case <-freed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (l *hold) doneExtending() {
	l.extending.Store(false)
	l.mu.Lock()
	if l.extendFreed != nil {
		close(l.extendFreed)
		l.extendFreed = nil
	}
	l.mu.Unlock()
}
