package redislock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"time"
	"unsafe"
	"weak"
)

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
	if l.maxHoldAlarm.rings != nil {
		l.client.alarms().cancel(&l.maxHoldAlarm)
	}
	room, l.room = l.room, nil
	l.mu.Unlock()

	l.client.watchdog().unwatch(l)
	if lost, ok := cause.(*LostError); ok {
		l.announceLoss(lost)
	}
	l.observeHold(false) // also before the context ends
	l.mu.Lock()
	l.cancelLocked(cause)
	l.mu.Unlock()
	return room, true
}

// lose ends the hold by a loss, unless it ended before (a loss found after
// a Release is the release's to report), and hands the turn on.
func (l *hold) lose(reason LostReason, cause error, paused time.Duration) {
	lost := &LostError{Name: l.lostName(), Reason: reason, HeldFor: time.Since(l.acquiredAt), Err: cause, Paused: paused}
	if room, ok := l.end(lost); ok && room != nil {
		l.client.rooms().leave(room, true)
	}
}

// cancelLocked cancels the lock's context (now, or when made); the first cause stays.
func (l *hold) cancelLocked(cause error) {
	if l.doneCause == nil {
		l.doneCause = cause
	}
	if l.cancel != nil {
		l.cancel(l.doneCause)
	}
	if done := l.done.Value(); done != nil {
		close(*(*chan struct{})(unsafe.Pointer(&done))) // once: end ends once; see chanObject
		l.doneCleanup.Stop()                            // a channel kept after the end keeps no Client
	}
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
// the hold keeps it weakly (see cancelLocked), ends when it is unreachable too.
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
	h.mu.Lock()
	mine := h.releasing == releaseNone && h.ended == nil
	if mine {
		h.releasing = releaseDone
	}
	h.mu.Unlock()
	if !mine {
		return // released or lost before: nothing is held
	}
	room, ended := h.end(errDropped)
	if !ended {
		return
	}
	if room != nil {
		h.client.rooms().leave(room, true)
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
