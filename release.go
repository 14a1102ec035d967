package redislock

import (
	"context"
	"fmt"
	"log/slog"
	"time"
)

// Release takes the lock out of the Client's watchdog, waits for an
// extension of it under way (at most until ctx ends), cancels the lock's
// context with cause ErrReleased (unless it was lost before), deletes the
// key if it still holds our token, and wakes waiters.
//
// It returns nil when our key was deleted; ErrNotHeld when the key was gone
// or held by someone else, and on every call after one that reached Redis
// (those send nothing); or the Redis error, after which Release may be
// called again. The network call is bounded by ctx only as far as the
// go-redis client honours contexts (see its ContextTimeoutEnabled option);
// otherwise by its read and write timeouts.
func (l *Lock) Release(ctx context.Context) error {
	if ctx == nil {
		return invalidf("nil context")
	}
	_, err := l.release(ctx)
	return err
}

// release is Release that also returns the loss it found, when the script
// said the key was no longer ours: the lease ran out (or was taken) while
// held and nobody noticed in time (watchdog off, or a pause). That loss is
// logged and observed like any other.
func (l *Lock) release(ctx context.Context) (*LostError, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("redislock: release %q: %w", l.name, err)
	}
	l.mu.Lock()
	if l.released {
		l.mu.Unlock()
		return nil, fmt.Errorf("%w: %q was already released", ErrNotHeld, l.name)
	}
	l.mu.Unlock()
	// Stop the watchdog for this lock, wait for an extension under way,
	// and end the hold before letting go of the extension slot: an
	// extension (the watchdog's or Extend's) that gets the slot after us
	// sees the hold ended and sends nothing, so none can find the key
	// that our DEL removed and cry "lost".
	l.client.watchdog().unwatch(l)
	select {
	case l.extending <- struct{}{}: // the common case: no extension under way
	default:
		select {
		case l.extending <- struct{}{}:
		case <-ctx.Done():
			// An extension is stuck on the network. The holder is
			// done with the lock all the same: end the hold here;
			// the key expires after its TTL, or a later Release
			// deletes it.
			l.mu.Lock()
			l.stopTimersLocked()
			if l.ended == nil {
				l.ended = ErrReleased
			}
			l.cancelLocked(l.ended)
			l.mu.Unlock()
			l.endHold()
			return nil, fmt.Errorf("redislock: release %q: waiting for an extension under way: %w", l.name, ctx.Err())
		}
	}
	l.mu.Lock()
	if l.released {
		l.mu.Unlock()
		<-l.extending
		return nil, fmt.Errorf("%w: %q was already released", ErrNotHeld, l.name)
	}
	l.stopTimersLocked()
	if l.ended == nil {
		l.ended = ErrReleased
	}
	l.cancelLocked(l.ended) // a loss found first stays the cause
	l.mu.Unlock()
	<-l.extending

	// This hold is over for the local waiters whatever the outcome (the
	// key is gone, someone else's, or left to expire): the next in line
	// gets the turn, and, on a store that can, its first attempt goes in
	// the same round trip as our release, right behind it.
	room := l.takeRoom()
	var next *queuedWaiter
	pipe, canPipe := l.client.store.(releaseAttempter)
	if room != nil && canPipe {
		next = l.client.rooms().takeNext(room)
	}
	var reply int64
	var err error
	if next != nil {
		// Announcements of a hand-over to it wake the room from now on.
		room.expect(handoffTicket(next.ref.token))
		next.early, reply, err = pipe.releaseAndAttempt(ctx, &l.ref, next.ref)
		close(next.turn)
	} else {
		reply, err = l.client.store.release(ctx, &l.ref)
		if room != nil {
			l.client.rooms().leave(room)
		}
	}
	var reason LostReason
	switch {
	case err != nil:
		err = fmt.Errorf("redislock: release %q: %w", l.name, err)
	case reply == replyDone:
	default:
		reason = reasonFor(reply)
		err = fmt.Errorf("%w: %q: %s", ErrNotHeld, l.name, reason)
	}
	if err == nil || reason != 0 {
		l.mu.Lock()
		l.released = true
		l.mu.Unlock()
	}
	if logger := l.opts.log(); logger.Enabled(ctx, slog.LevelDebug) {
		logger.Debug("redislock: released", "name", l.name, "held_for", time.Since(l.acquiredAt), "error", err, "token", l.ref.token)
	}
	if l.opts.observer != nil {
		l.opts.observer.ObserveRelease(ReleaseEvent{Name: l.name, HeldFor: time.Since(l.acquiredAt), Err: err})
	}
	var lost *LostError
	if reason != 0 {
		lost = l.reportLoss(reason, nil)
	}
	return lost, err
}
