package redislock

import (
	"context"
	"log/slog"
	"time"
)

// How a hold ends. Whatever ends it (Release, a loss found by an
// extension or by the safe-deadline alarm, the maximum hold, Client.Close)
// goes through end, once: the first cause wins, and every later one finds
// the hold ended and does nothing.

// end ends the hold with cause: ErrReleased (Release), a *LostError (a
// loss, including the maximum hold), or an error matching ErrClosed
// (Client.Close). It returns false if the hold had ended before. Otherwise,
// in this order: the hold is marked ended (so extensions send nothing more
// and accessors report ErrNotHeld), its timers are stopped, it leaves the
// watchdog, a loss is logged and observed, and the lock's context is
// cancelled with cause, so that whoever sees the context done also finds
// the log line and the metric. It returns this Client's waiters for the
// lock (nil if none): the caller hands them the turn.
func (l *Lock) end(cause error) (room *waitRoom, ended bool) {
	l.mu.Lock()
	if l.ended != nil {
		l.mu.Unlock()
		return nil, false
	}
	l.ended = cause
	l.client.alarms().cancel(&l.deadlineAlarm)
	if l.maxHoldTimer != nil {
		l.maxHoldTimer.Stop()
	}
	room, l.room = l.room, nil
	l.mu.Unlock()

	l.client.watchdog().unwatch(l)
	if lost, ok := cause.(*LostError); ok {
		l.announceLoss(lost)
	}
	l.mu.Lock()
	l.cancelLocked(cause)
	l.mu.Unlock()
	return room, true
}

// lose ends the hold by a loss, unless it ended before (a loss found after
// a Release is the release's to report), and hands the turn to this
// Client's next waiter.
func (l *Lock) lose(reason LostReason, cause error) {
	lost := &LostError{Name: l.lostName(), Reason: reason, HeldFor: time.Since(l.acquiredAt), Err: cause}
	if room, ok := l.end(lost); ok && room != nil {
		l.client.rooms().leave(room, true)
	}
}

// cancelLocked cancels the lock's context (now, or when it is made) with
// cause, unless it was cancelled before: the first cause stays.
func (l *Lock) cancelLocked(cause error) {
	if l.doneCause == nil {
		l.doneCause = cause
	}
	if l.cancel != nil {
		l.cancel(l.doneCause)
	}
}

// onSafeDeadline runs when the lock's alarm rings (on a goroutine of its
// own, see alarms), independent of any Redis call under way, so that a
// stalled connection cannot delay the loss signal.
func (l *Lock) onSafeDeadline() {
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
	reason, lastErr := Unreachable, l.lastErr
	if !l.opts.watchdog {
		reason = Expired
	}
	l.mu.Unlock()
	l.lose(reason, lastErr)
}

// onMaxHold ends the hold at its maximum, unless it ended first (a Release
// racing the timer is a release, not a loss).
func (l *Lock) onMaxHold() { l.lose(MaxHoldReached, nil) }

// announceLoss logs the loss and reports it to the Observer. A lease that
// ran out with the watchdog off is what the user chose: Info. Every other
// loss is one the user did not plan: Error.
func (l *Lock) announceLoss(lost *LostError) {
	level := slog.LevelError
	if lost.Reason == Expired && !l.opts.watchdog {
		level = slog.LevelInfo
	}
	attrs := []any{"name", lost.Name, "reason", lost.Reason.String(), "held_for", lost.HeldFor}
	if lost.Err != nil {
		attrs = append(attrs, "error", lost.Err)
	}
	l.opts.log().Log(context.Background(), level, "redislock: lock lost", attrs...)
	if l.opts.observer != nil {
		l.opts.observer.ObserveLost(LostEvent{Name: lost.Name, Reason: lost.Reason, HeldFor: lost.HeldFor})
	}
}
