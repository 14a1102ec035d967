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
