package redislock

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"time"
)

// Release ends the hold locally first (the watchdog stops, the context is
// cancelled with ErrReleased unless lost before, this Client's next waiter
// gets its turn), then deletes the key if it holds our token. When ctx ends
// first it makes one attempt detached from ctx, bounded by ReleaseTimeout,
// so `defer lock.Release(reqCtx)` after a timed-out request still lets go;
// if that fails too, the Client keeps trying in the background.
//
// It returns nil when our key was deleted; ErrNotHeld when it was gone or
// held by someone else (a loss, logged and observed like any other), on a
// nil *Lock, and on every call after the first (only one sends, also when
// calls race); or the Redis error.
func (l *Lock) Release(ctx context.Context) error {
	if err := l.check(ctx); err != nil {
		return err
	}
	defer runtime.SetFinalizer(l, nil) // in use, not dropped; released, no finalizer to run (see dropped)
	_, err := l.h.release(ctx, true)
	return err
}

// release is Release that also returns the loss it found. detach makes a
// detached attempt when ctx ends first; without it ctx is the only bound.
func (l *hold) release(ctx context.Context, detach bool) (*LostError, error) {
	l.mu.Lock()
	if l.releasing != releaseNone {
		// Another Release sent (or is sending) it: wait for the lock's context.
		l.mu.Unlock()
		select {
		case <-l.context().Done():
		case <-ctx.Done():
		}
		// Ended (released, lost or closed), else still being released.
		return nil, cmp.Or(l.notHeld(), fmt.Errorf("%w: %q is being released", ErrNotHeld, l.name))
	}
	l.releasing = releaseSending
	l.mu.Unlock()
	// A hold ended by a loss is still released: after an Unreachable loss
	// or the maximum hold the key may be ours yet; deleting it lets the
	// next holder in now.
	room, endedNow := l.end(ErrReleased)
	reply, err := int64(0), ctx.Err()
	if err == nil || !detach {
		reply, err = l.sendRelease(ctx, room)
		room = nil // handed on
	}
	if detach && err != nil && ctx.Err() != nil {
		// ctx ended before or during the attempt: one detached attempt.
		detached, cancel := context.WithTimeout(context.WithoutCancel(ctx), ReleaseTimeout)
		reply, err = l.sendRelease(detached, room)
		cancel()
	}
	var lost *LostError
	state := releaseDone
	switch {
	case err != nil:
		err = fmt.Errorf("redislock: release %q: %w", l.name, err)
		// It may or may not have run: the janitor gives the token back,
		// and Release may be called again.
		l.client.cleaner.add(&l.ref, time.Now().Add(l.currentTTL()))
		state = releaseNone
	case reply != replyDone:
		lost = &LostError{Name: l.lostName(), Reason: reasonFor(reply), HeldFor: time.Since(l.acquiredAt)}
		err = fmt.Errorf("%w: %q: %s", ErrNotHeld, lost.Name, lost.Reason)
		if endedNow {
			// Lost while held and nobody noticed in time (watchdog off,
			// or a pause); a loss found before was announced then.
			l.announceLoss(lost)
		}
	}
	l.mu.Lock()
	l.releasing = state
	l.mu.Unlock()
	if !endedNow {
		// Ended before by a loss, maybe being announced: wait for the context.
		_ = l.endedFor(ctx)
	}
	if logger := l.opts.log(); logger.Enabled(ctx, slog.LevelDebug) {
		logger.Debug("redislock: released", "name", l.name, "held_for", time.Since(l.acquiredAt), "error", err, "token", l.token(), "holder", holderID(l.token()))
	}
	if l.opts.observer != nil {
		l.opts.observer.ObserveRelease(ReleaseEvent{Name: l.name, HeldFor: time.Since(l.acquiredAt), Err: err})
	}
	return lost, err
}

// sendRelease sends the release; room's next in line gets the turn (and its attempt rides behind it).
func (l *hold) sendRelease(ctx context.Context, room *waitRoom) (int64, error) {
	var next *queuedWaiter
	pipe, canPipe := l.client.store.(releaseAttempter)
	if room != nil && canPipe {
		next = l.client.rooms().takeNext(room)
	}
	if next == nil {
		reply, err := l.client.store.release(ctx, &l.ref)
		if room != nil {
			l.client.rooms().leave(room, true)
		}
		return reply, err
	}
	// Announcements of a hand-over to it wake the room from now on.
	room.expect(handoffTicket(next.ref.token))
	early, reply, err := pipe.releaseAndAttempt(ctx, &l.ref, next.ref)
	next.early = early
	close(next.turn)
	return reply, err
}

// Where a Lock's release stands: one Release at a time sends; after an error another may.
const (
	releaseNone = iota
	releaseSending
	releaseDone
)
