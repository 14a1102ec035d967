package redislock

import "time"

// endHold hands the turn to this Client's next waiter, once: on release or
// on loss, whichever comes first.
func (l *Lock) endHold() {
	if room := l.takeRoom(); room != nil {
		l.client.rooms().leave(room)
	}
}

// takeRoom takes this Client's waiters for the lock (nil, once taken): the
// caller hands the turn on.
func (l *Lock) takeRoom() *waitRoom {
	l.mu.Lock()
	defer l.mu.Unlock()
	room := l.room
	l.room = nil
	return room
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
	lost := l.loseLocked(reason, lastErr)
	l.mu.Unlock()
	l.finishLoss(lost)
}

// onMaxHold ends the hold at its maximum, unless it ended first (a Release
// racing the timer is a release, not a loss).
func (l *Lock) onMaxHold() {
	l.mu.Lock()
	if l.ended != nil {
		l.mu.Unlock()
		return
	}
	lost := l.loseLocked(MaxHoldReached, nil)
	l.mu.Unlock()
	l.finishLoss(lost)
}

// reportLoss ends the hold with reason unless it has already ended, and
// returns the loss that ended it. A loss found by the release itself (the
// hold was ended by Release) is announced but changes nothing else.
func (l *Lock) reportLoss(reason LostReason, cause error) *LostError {
	l.mu.Lock()
	if l.ended != nil {
		earlier, _ := l.ended.(*LostError)
		l.mu.Unlock()
		if earlier == nil {
			lost := &LostError{Name: l.name, Reason: reason, HeldFor: time.Since(l.acquiredAt), Err: cause}
			l.announceLoss(lost)
			return lost
		}
		return earlier
	}
	lost := l.loseLocked(reason, cause)
	l.mu.Unlock()
	l.finishLoss(lost)
	return lost
}

// loseLocked marks the hold as lost; finishLoss, called without l.mu,
// then announces it and cancels the context.
func (l *Lock) loseLocked(reason LostReason, cause error) *LostError {
	lost := &LostError{Name: l.name, Reason: reason, HeldFor: time.Since(l.acquiredAt), Err: cause}
	l.ended = lost
	l.stopTimersLocked()
	return lost
}

func (l *Lock) finishLoss(lost *LostError) {
	l.client.watchdog().unwatch(l)
	l.announceLoss(lost)
	l.endHold()
	l.mu.Lock()
	l.cancelLocked(lost)
	l.mu.Unlock()
}

// announceLoss logs the loss at Error and reports it to the Observer.
func (l *Lock) announceLoss(lost *LostError) {
	attrs := []any{"name", l.name, "reason", lost.Reason.String(), "held_for", lost.HeldFor}
	if lost.Err != nil {
		attrs = append(attrs, "error", lost.Err)
	}
	l.opts.log().Error("redislock: lock lost", attrs...)
	if l.opts.observer != nil {
		l.opts.observer.ObserveLost(LostEvent{Name: l.name, Reason: lost.Reason, HeldFor: lost.HeldFor})
	}
}

func (l *Lock) stopTimersLocked() {
	l.client.alarms().cancel(&l.deadlineAlarm)
	if l.maxHoldTimer != nil {
		l.maxHoldTimer.Stop()
	}
}
