package redislock

import (
	"context"
	"time"
)

// watch is the watchdog of one held lock: it extends the lease every
// interval, and retries a failed extension every interval/3 until the safe
// deadline. It never signals the loss by timing alone (onSafeDeadline does,
// on its own timer); it reports the loss when Redis says the key is no
// longer ours. It exits when ctx ends: on Release, or on loss.
func (l *Lock) watch(ctx context.Context) {
	defer close(l.watchdogFinished)
	l.mu.Lock()
	next := time.Until(l.acquiredAt.Add(l.interval))
	l.mu.Unlock()
	timer := time.NewTimer(next)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		timer.Reset(l.extendByWatchdog(ctx))
	}
}

// extendByWatchdog sends one extension and returns the wait until the next.
func (l *Lock) extendByWatchdog(ctx context.Context) time.Duration {
	select {
	case l.extending <- struct{}{}:
	case <-ctx.Done():
		return 0
	}
	defer func() { <-l.extending }()

	l.mu.Lock()
	ttl, interval, deadline := l.ttl, l.interval, l.safeDeadline
	l.mu.Unlock()
	// Bound the call by the time the lease has left: an answer after the
	// safe deadline comes too late to matter. (go-redis honours this only
	// with ContextTimeoutEnabled; the loss is signalled on time regardless.)
	callCtx, cancel := context.WithDeadline(ctx, deadline)
	sent := time.Now()
	err := l.extendOnce(callCtx, ttl, true)
	cancel()
	if err == nil {
		return time.Until(sent.Add(interval))
	}
	if ctx.Err() == nil {
		l.opts.log().Warn("redislock: extension failed, retrying until the safe deadline",
			"name", l.name, "error", err, "safe_deadline_in", time.Until(deadline))
	}
	return max(interval/3, time.Millisecond)
}
