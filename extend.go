package redislock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"time"

	"github.com/redislock/redislock/internal/lockrules"
)

// Extend resets the lock's lease to ttl from now, and makes ttl the lease
// that later watchdog extensions renew (every ttl/3, unless
// WithExtendInterval set a shorter interval). It waits for a watchdog
// extension under way. It returns ErrInvalidArgument for a ttl outside
// MinTTL..MaxTTL, ErrNotHeld when the lock is no longer ours (its context
// is then cancelled with the loss, if it was not already), or the Redis
// error, which leaves the lock as it was.
func (l *Lock) Extend(ctx context.Context, ttl time.Duration) error {
	if err := l.check(ctx); err != nil {
		return err
	}
	defer runtime.KeepAlive(l) // a Lock in use is no dropped one (see dropped)
	if bad := lockrules.TTLOutOfRange(ttl); bad != "" {
		return invalidf("Extend TTL %v %s", ttl, bad)
	}
	ttl = ttl.Truncate(time.Millisecond)
	if err := l.h.endedFor(ctx); err != nil {
		return err
	}
	if err := l.h.waitExtending(ctx); err != nil {
		return err
	}
	defer l.h.doneExtending()
	if err := l.h.endedFor(ctx); err != nil { // released or lost while we waited
		return err
	}
	// One extension, recorded as the watchdog's are (we hold l.h.extending).
	sent := time.Now()
	reply, err := l.h.client.store.extend(ctx, l.h.extendRequest(ttl))
	if err = l.h.recordExtension(sent, time.Since(sent), ttl, reply, err, false); err != nil {
		return err
	}
	interval := l.h.opts.interval(ttl)
	l.h.mu.Lock()
	l.h.ttl, l.h.interval = ttl, interval
	l.h.mu.Unlock()
	if l.h.opts.watchdog {
		// Due an interval from now: a shorter lease would run out first.
		l.h.client.watchdog().schedule(l.h, time.Now().Add(interval), interval)
	}
	return nil
}

func (l *hold) extendRequest(ttl time.Duration) extendRequest {
	return extendRequest{opts: l.opts, key: l.ref.key, token: l.ref.token, ttl: ttl, kind: l.ref.kind, extraKey: l.ref.extraKey, multi: l.ref.multi}
}

// recordExtension: a confirmed extension moves the safe deadline, "not ours"
// loses the lock, an error is kept for the Unreachable loss it may become.
func (l *hold) recordExtension(sent time.Time, latency, ttl time.Duration, reply int64, err error, byWatchdog bool) error {
	var paused time.Duration
	switch {
	case err != nil:
		err = fmt.Errorf("redislock: extend %q: %w", l.name, err)
		l.mu.Lock()
		if !time.Now().Before(l.safeDeadline) {
			// Too late to matter: because this process did not run?
			paused = l.client.pausedAcross(l.safeDeadline, l.ttl)
		}
		// Keep what Redis said over our own deadline cutting a call short.
		if paused == 0 && (l.lastErr == nil || !ownDeadline(err)) {
			l.lastErr = err
		}
		l.mu.Unlock()
	case reply == replyDone:
		l.confirm(sent, ttl)
	default:
		reason := reasonFor(reply)
		l.lose(reason, nil, 0)
		err = fmt.Errorf("%w: %q: %s", ErrNotHeld, l.lostName(), reason)
	}
	if l.opts.observer != nil {
		l.opts.observer.ObserveExtend(ExtendEvent{Name: l.name, Latency: latency, Watchdog: byWatchdog, Err: err, Paused: paused})
	}
	return err
}

// ownDeadline tells whether err is an extension's own deadline (the safe
// deadline) cutting it short, not a failure of Redis: context's
// DeadlineExceeded, not from a connection (a dial's timeout matches it too).
func ownDeadline(err error) bool {
	var op *net.OpError
	return errors.Is(err, context.DeadlineExceeded) && !errors.As(err, &op)
}

// confirm moves the safe deadline after an extension sent at sent was
// confirmed: the server ran it after sent, so the lease lasts at least
// until sent+ttl by its clock, which ours may lag by the drift.
func (l *hold) confirm(sent time.Time, ttl time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended != nil {
		return
	}
	l.safeDeadline = sent.Add(ttl - drift(ttl))
	l.lastErr = nil
	l.client.alarms().set(&l.deadlineAlarm, l.safeDeadline)
}
