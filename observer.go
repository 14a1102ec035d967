package redislock

import "time"

// Observer receives events for metrics. Its methods are called
// synchronously from the goroutine doing the work (the caller's, or the
// watchdog's), so they must be quick and must not block; they may be called
// concurrently. Every event carries the lock name.
type Observer interface {
	// ObserveAcquire reports the end of an Acquire: acquired or not.
	ObserveAcquire(AcquireEvent)
	// ObserveExtend reports one extension, by the watchdog or by
	// Lock.Extend, successful or not.
	ObserveExtend(ExtendEvent)
	// ObserveLost reports a held lock that was lost.
	ObserveLost(LostEvent)
	// ObserveRelease reports a Release that reached Redis.
	ObserveRelease(ReleaseEvent)
	// ObserveFailOpen reports a RunWithLock that ran fn without a lock
	// because Redis could not be reached (WithFailOpen).
	ObserveFailOpen(FailOpenEvent)
}

// GaugeObserver is an Observer that also follows what is held, waited for
// and led now. Each hold, wait and term of leadership is reported once as it
// begins and once, later, as it ends, whatever ends it (a hold: Release, a
// loss, the maximum hold, a dropped Lock's finalizer, Client.Close; a wait:
// the lock taken, the strategy spent, ctx, an error, Close), so counts kept
// from the events return to zero when nothing is held or waited for.
// WithObserver checks once whether its Observer implements it; an Observer
// that does not gets Observer's events only. Its methods are called as
// Observer's are: quick, never blocking, maybe concurrently.
type GaugeObserver interface {
	Observer
	// ObserveHold reports a hold that began (before Acquire returns) or
	// ended (before the lock's context is cancelled).
	ObserveHold(HoldEvent)
	// ObserveWait reports a caller that began to wait for a lock (its
	// first wait: its first attempt found the lock held, or it queued
	// behind another caller of its Client), or stopped waiting. A call that
	// takes the lock at once, or may not wait (NoRetry), never waits.
	ObserveWait(WaitEvent)
	// ObserveLeader reports a term of leadership of Elect that began or
	// ended: the term is the hold of the election's lock (both are reported).
	ObserveLeader(LeaderEvent)
}

// HoldEvent is passed to GaugeObserver.ObserveHold.
type HoldEvent struct {
	Name string
	// Kind is the lock's kind as Info.Kind names it: "lock" (Acquire, Elect,
	// and a multi lock, whose Name is its first name), "shared", "semaphore".
	Kind string
	// Began is true when the hold began, false when it ended.
	Began bool
}

// WaitEvent is passed to GaugeObserver.ObserveWait.
type WaitEvent struct {
	Name string
	// Kind is the kind of lock waited for, as HoldEvent.Kind.
	Kind string
	// Began is true when the caller began to wait, false when it stopped.
	Began bool
	// Campaign is set for an Elect campaign: a follower waiting to lead,
	// however long the leader leads, rather than a contended lock's caller.
	Campaign bool
}

// LeaderEvent is passed to GaugeObserver.ObserveLeader.
type LeaderEvent struct {
	// Name is the election's name.
	Name string
	// Leading is true when this Client began to lead, false when it stopped.
	Leading bool
}

// AcquireEvent is passed to Observer.ObserveAcquire.
type AcquireEvent struct {
	Name     string
	Acquired bool
	// Wait is the time from the call to its end (acquired or given up).
	Wait time.Duration
	// Attempts: the attempts the strategy was asked about, commands sent and
	// backoffs a queued waiter let pass without one.
	Attempts int
	// Fence is the fencing token taken, 0 without fencing.
	Fence int64
	// Err is nil when acquired; otherwise it matches ErrNotAcquired when the
	// lock was held by someone else, or is the Redis error.
	Err error
	// Campaign is set for the acquisition of an Elect campaign: Wait is then
	// the time it campaigned as a follower, until it led or gave up, not a
	// contended Acquire's wait. One event per campaign.
	Campaign bool
}

// ExtendEvent is passed to Observer.ObserveExtend.
type ExtendEvent struct {
	Name string
	// Latency is the round trip of the extension command.
	Latency time.Duration
	// Watchdog is true for an automatic extension, false for Lock.Extend.
	Watchdog bool
	// Err is nil when extended; ErrNotHeld when the lock was no longer
	// ours; else the Redis error (the watchdog retries those).
	Err error
	// Paused is set when the extension failed because it came after the
	// lock's safe deadline and this process did not run across it (see
	// LostError.Paused): Err is then no failure of Redis. 0 otherwise.
	Paused time.Duration
}

// LostEvent is passed to Observer.ObserveLost.
type LostEvent struct {
	Name    string
	Reason  LostReason
	HeldFor time.Duration
	// Paused: an Unreachable loss to this process's own pause (see
	// LostError.Paused), not to Redis; 0 otherwise.
	Paused time.Duration
}

// ReleaseEvent is passed to Observer.ObserveRelease.
type ReleaseEvent struct {
	Name    string
	HeldFor time.Duration
	// Err is nil when our key was deleted, matches ErrNotHeld when it was no
	// longer ours, or is the Redis error.
	Err error
}

// FailOpenEvent is passed to Observer.ObserveFailOpen.
type FailOpenEvent struct {
	Name string
	// Err is the error that made Redis count as unreachable.
	Err error
}

// observeHold reports that the hold began or ended to a GaugeObserver,
// and an Elect term with it.
func (l *hold) observeHold(began bool) {
	if g := l.opts.gauges; g != nil {
		g.ObserveHold(HoldEvent{Name: l.name, Kind: l.ref.kind.rules().info, Began: began})
		if l.opts.campaign {
			g.ObserveLeader(LeaderEvent{Name: l.name, Leading: began})
		}
	}
}

// observeWait reports that the caller acquiring l began or stopped waiting
// (see patience.observed). The hold is made before the first attempt, so
// reporting costs no allocation.
func (l *hold) observeWait(began bool) {
	if g := l.opts.gauges; g != nil {
		g.ObserveWait(WaitEvent{Name: l.name, Kind: l.ref.kind.rules().info, Began: began, Campaign: l.opts.campaign})
	}
}
