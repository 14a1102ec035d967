package redislock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
	"weak"
)

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
	l.ttl, l.interval, l.safeDeadline = o.ttl, o.interval(o.ttl), sent.Add(lease-drift(lease))
	l.mu.Lock()
	defer l.mu.Unlock()
	l.deadlineAlarm = alarm{rings: (*safeDeadlineRing)(l), index: -1}
	l.maxHoldAlarm = alarm{rings: (*maxHoldRing)(l), index: -1} // (end cancels both)
	l.client.alarms().set(&l.deadlineAlarm, l.safeDeadline)
	if o.maxHold > 0 {
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

func (l *hold) currentTTL() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ttl
}

func (l *hold) token() string {
	token, _, _ := strings.Cut(l.ref.token, metadataSeparator)
	return token
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

// end ends the hold with cause, once (ErrReleased, a *LostError or
// ErrClosed; a later cause finds it ended): marked ended, timers stopped,
// out of the watchdog, a loss logged and observed, then the context
// cancelled, so that who sees it done finds the log line and metric. It
// returns this Client's waiters for the lock, to be handed the turn.
func (l *hold) end(cause error) (room *waitRoom, ended bool) {
	l.mu.Lock()
	if l.ended != nil {
		l.mu.Unlock()
		return nil, false
	}
	l.ended = cause
	l.client.alarms().cancel(&l.deadlineAlarm)
	l.client.alarms().cancel(&l.maxHoldAlarm)
	room, l.room = l.room, nil
	l.mu.Unlock()

	l.client.watchdog().unwatch(l)
	if lost, ok := cause.(*LostError); ok {
		l.announceLoss(lost)
	}
	l.observeHold(false) // also before the context ends
	// Cancel the lock's context now, or have context cancel it when made.
	// doneCause is set here only, and end runs once: the first cause stays.
	l.mu.Lock()
	defer l.mu.Unlock()
	l.doneCause = cause
	if l.cancel != nil {
		l.cancel(cause)
	}
	if done := l.done.Value(); done != nil {
		close(*(*chan struct{})(unsafe.Pointer(&done))) // once: end ends once; see chanObject
		l.doneCleanup.Stop()                            // a channel kept after the end keeps no Client
	}
	return room, true
}

// lose ends the hold by a loss, unless it ended before (a loss found after
// a Release is the release's to report), and hands the turn on.
func (l *hold) lose(reason LostReason, cause error, paused time.Duration) {
	l.endAndPass(&LostError{Name: l.lostName(), Reason: reason, HeldFor: time.Since(l.acquiredAt), Err: cause, Paused: paused})
}

// endAndPass ends the hold with cause (see end) and hands the turn on; false
// when it had ended.
func (l *hold) endAndPass(cause error) bool {
	room, ended := l.end(cause)
	if room != nil {
		l.client.rooms().leave(room, true)
	}
	return ended
}

// giveUp takes l's release from any Release to come (which then sends
// nothing) and ends the hold with cause, handing the turn on. It returns
// false, doing nothing more, when a Release is on it or the hold had ended;
// with unlessEnded, a hold that had ended is not even taken.
func (l *hold) giveUp(cause error, unlessEnded bool) bool {
	l.mu.Lock()
	mine := l.releasing == releaseNone && (l.ended == nil || !unlessEnded)
	if mine {
		l.releasing = releaseDone
	}
	l.mu.Unlock()
	return mine && l.endAndPass(cause)
}

// chanObject returns the object a channel value points to, for a weak
// pointer and a cleanup: a goroutine waiting on the channel keeps it.
func chanObject(c <-chan struct{}) *byte { return *(**byte)(unsafe.Pointer(&c)) }

// onSafeDeadline runs on the alarm's own goroutine, apart from any Redis
// call under way, so that a stalled connection cannot delay the loss.
func (l *hold) onSafeDeadline() {
	l.mu.Lock()
	if l.ended != nil {
		l.mu.Unlock()
		return
	}
	if left := time.Until(l.safeDeadline); left > 0 {
		// An extension was confirmed after the timer fired.
		l.client.alarms().set(&l.deadlineAlarm, l.safeDeadline)
		l.mu.Unlock()
		return
	}
	reason, lastErr, paused := Unreachable, l.lastErr, time.Duration(0)
	if !l.opts.watchdog {
		reason = Expired
	} else if lastErr == nil || ownDeadline(lastErr) {
		// The pause explains the loss only when Redis said nothing else:
		// an extension failed by Redis (refused, timed out, an error reply)
		// puts the blame on Redis, pause or not.
		paused = l.client.pausedAcross(l.safeDeadline, l.ttl)
	}
	l.mu.Unlock()
	l.lose(reason, lastErr, paused)
}

// onMaxHold: a Release racing the timer is a release, not a loss.
func (l *hold) onMaxHold() { l.lose(MaxHoldReached, nil, 0) }

// announceLoss logs and observes a loss: at Info when the lease ran out
// with the watchdog off (the user's choice), else at Error.
func (l *hold) announceLoss(lost *LostError) {
	level := slog.LevelError
	if lost.Reason == Expired && !l.opts.watchdog {
		level = slog.LevelInfo
	}
	attrs := []any{"name", lost.Name, "holder", holderID(l.token()), "reason", lost.why(), "held_for", lost.HeldFor}
	if lost.Err != nil {
		attrs = append(attrs, "error", lost.Err)
	}
	l.opts.log().Log(context.Background(), level, "redislock: lock lost", attrs...)
	if l.opts.observer != nil {
		l.opts.observer.ObserveLost(LostEvent{Name: lost.Name, Reason: lost.Reason, HeldFor: lost.HeldFor, Paused: lost.Paused})
	}
}

// errDropped ends the hold of a Lock dropped without Release.
var errDropped = errors.New("redislock: lock dropped without Release")

// dropped, a Lock's finalizer: as os.File closes a file dropped open, the
// hold ends, logged at Error, and the key is given back in the background.
// If its Done channel was asked for, a goroutine may still wait on it alone:
// the hold keeps it weakly (see end), ends when it is unreachable too.
func (l *Lock) dropped() {
	h := l.h
	h.mu.Lock()
	if h.doneAsked.Load() && h.ended == nil && h.releasing == releaseNone { // asked: h.ctx was made
		done := chanObject(h.ctx.Done())
		h.done, h.ctx, h.cancel = weak.Make(done), nil, nil
		h.doneCleanup = runtime.AddCleanup(done, (*hold).dropped, h)
		h.mu.Unlock()
		return
	}
	h.mu.Unlock()
	h.dropped()
}

func (h *hold) dropped() {
	if !h.giveUp(errDropped, true) {
		return // released or lost before: nothing is held
	}
	h.client.cleaner.add(&h.ref, time.Now().Add(h.currentTTL()))
	heldFor := time.Since(h.acquiredAt)
	frame, _ := runtime.CallersFrames([]uintptr{h.caller}).Next()
	h.opts.log().Error("redislock: lock dropped without Release; releasing it",
		"name", h.name, "holder", holderID(h.token()), "held_for", heldFor, "acquired_at", fmt.Sprintf("%s:%d", frame.File, frame.Line))
	if h.opts.observer != nil {
		h.opts.observer.ObserveRelease(ReleaseEvent{Name: h.name, HeldFor: heldFor, Err: errDropped})
	}
}

// callerPC returns the program counter skip frames above callerPC's caller.
func callerPC(skip int) uintptr {
	var pc [1]uintptr
	runtime.Callers(skip+2, pc[:])
	return pc[0]
}
