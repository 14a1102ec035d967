package redislock

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Acquire takes the lock called name, or fails.
//
// It sends one command per attempt (two when a plain SET NX finds the lock
// held: the script then says by whom and for how long). When the lock is
// held by someone else, it retries as the retry strategy says (default: not
// at all), never sleeping past the holder's remaining TTL or ctx's
// deadline; a ctx without deadline waits at most MaxWaitWithoutDeadline.
// A waiter queues on the server: the holder's release hands the lock to the
// first waiter in line, which claims it with its next attempt; while queued
// it does not poll at its backoff (each backoff still counts as an attempt
// for the strategy) but comes back every half second and when the holder's
// lease would end. ctx bounds the waiting only: the held lock lives on
// after ctx ends, until Release or loss.
//
// It returns ErrNotAcquired (wrapped with the name) when the lock stayed
// held by someone else; an error matching both ErrNotAcquired and ctx.Err()
// when ctx ended first; ErrInvalidArgument for bad input (nothing is sent);
// otherwise the Redis error, wrapped, which does not match ErrNotAcquired.
// A failed Acquire leaves nothing held and no goroutine running.
//
// On success the caller must call Lock.Release; with the watchdog on
// (the default) the lock is otherwise extended until the process exits.
func (c *Client) Acquire(ctx context.Context, name string, opts ...Option) (*Lock, error) {
	if len(opts) > 0 {
		var perCall options
		applyOptions(&perCall, opts)
		if perCall.failOpen {
			return nil, invalidf("WithFailOpen applies to RunWithLock only: Acquire cannot hand out a lock it does not hold")
		}
	}
	o, err := c.resolve(opts)
	if err != nil {
		return nil, err
	}
	return c.acquire(ctx, name, o)
}

func (c *Client) acquire(ctx context.Context, name string, o *options) (*Lock, error) {
	if ctx == nil {
		return nil, invalidf("nil context")
	}
	names, keyLen, err := lockKeys(o.prefix, name)
	if err != nil {
		return nil, err
	}
	key := names[:keyLen]
	if err := ctx.Err(); err != nil {
		return nil, errors.Join(fmt.Errorf("%w: %q: context already done", ErrNotAcquired, name), err)
	}

	start := time.Now()
	var waitCap time.Time
	if _, ok := ctx.Deadline(); !ok {
		waitCap = start.Add(MaxWaitWithoutDeadline)
	}
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()

	// The Lock is built up front: its commands are prepared once for
	// every attempt, and it is handed out when one succeeds.
	l := &Lock{client: c, opts: o, name: name}
	l.ref.init(names, keyLen, o, c.publish)
	_, waits := o.retry.NextBackoff(1)
	// A waiter on a single deployment queues on the server, under one
	// token for all its attempts: a release hands the lock to the first
	// waiter in line, which claims it with its next attempt (see
	// lua/release.lua), and the other waiters are not woken. Elsewhere
	// each attempt has a token of its own: a late answer to an earlier
	// attempt (a quorum node that missed its timeout) then cannot be
	// mistaken for this one, nor its clean-up delete this one's key.
	queued := waits && c.store.queues()
	l.ref.waiting = queued
	if queued {
		l.ref.token = rand.Text() // 26 base32 characters, 130 bits from crypto/rand
	}

	// A caller that will wait queues behind the other waiters of this
	// Client for the same lock (see waitRooms) and keeps its place until
	// it gives up, or until the lock it got is released or lost. A
	// releaser of this Client that hands it the turn may send its first
	// attempt in the same round trip as the release (see Lock.release):
	// not with WithReplicaAck, whose WAIT must follow the attempt.
	var room *waitRoom
	var early *earlyAttempt
	if waits {
		var err error
		var earlyRef *lockRef
		if queued && o.replicas == 0 {
			earlyRef = &l.ref
		}
		if room, early, err = c.rooms().enter(ctx, key, waitCap, earlyRef); err != nil {
			if room != nil {
				// The turn came as we gave up, maybe with an attempt
				// made for us: undo it (our place in the queue, or the
				// lock itself), then pass the turn on. Also when the
				// attempt failed: it may have run all the same (a reply
				// lost with the connection).
				if early != nil {
					c.leaveQueue(ctx, &l.ref)
				}
				c.rooms().leave(room)
			}
			err = c.gaveUp(name, 0, err)
			c.observeAcquire(o, name, start, 0, 0, err)
			return nil, err
		}
	}
	keepRoom := false
	defer func() {
		if room != nil && !keepRoom {
			c.rooms().leave(room)
		}
	}()
	if queued && early == nil {
		// Announcements of a hand-over to us wake the room from now on,
		// before our first attempt can queue us. (A releaser that made
		// our first attempt set it before sending.)
		room.expect(handoffTicket(l.ref.token))
	}
	// A room that kept its subscription from earlier waiters already
	// hears every release: no need to try again once subscribed.
	listened := room != nil && c.rooms().hearing(room)
	inQueue := false // we may have a place in the server's queue
	defer func() {
		if inQueue {
			c.leaveQueue(ctx, &l.ref)
		}
	}()
	giveUp := func(attempt int, err error) (*Lock, error) {
		c.observeAcquire(o, name, start, attempt, 0, err)
		return nil, err
	}

	for attempt := 1; ; attempt++ {
		if !queued {
			l.ref.token = rand.Text()
		}
		var (
			sent      time.Time
			acquired  bool
			fence     int64
			holderTTL time.Duration
			err       error
		)
		if early != nil && early.reply.Err() == nil {
			// The releaser that handed us the turn made our first
			// attempt. (If it failed, we make our own.)
			sent = early.sent
			acquired, fence, holderTTL, err = parseAcquire(early.reply, l.opts.fencing)
		} else {
			// A first attempt that did not wait in line did nothing
			// but build the Lock since start: its lease may be
			// counted from then (a little early: the safe side).
			sent = start
			if attempt > 1 || room != nil {
				sent = time.Now()
			}
			acquired, fence, holderTTL, err = c.store.acquire(ctx, l.opts, &l.ref)
		}
		early = nil
		// A store may explain a refusal (a quorum's counts): that is
		// still "held by someone else", and the explanation goes with
		// the error if we give up.
		var refusal error
		if errors.Is(err, ErrNotAcquired) {
			refusal, err = err, nil
		}
		if err != nil {
			err = fmt.Errorf("redislock: acquire %q: %w", name, err)
			if ctx.Err() == nil {
				// Redis failed: our place in the queue, if any, lapses
				// by itself, with no further call to a Redis that just
				// failed.
				inQueue = false
			}
			if ctxErr := ctx.Err(); ctxErr != nil {
				// The context ended during the attempt: that is giving up
				// waiting, whatever go-redis made of it.
				err = errors.Join(fmt.Errorf("%w: %q: the context ended during attempt %d", ErrNotAcquired, name, attempt), ctxErr, err)
			}
			return giveUp(attempt, err)
		}
		if acquired {
			inQueue = false // the script took us out of the queue
			keepRoom = true
			l.start(ctx, fence, sent, room)
			c.observeAcquire(o, name, start, attempt, l.fence, nil)
			if logger := o.log(); logger.Enabled(ctx, slog.LevelDebug) { // no boxing when off
				logger.Debug("redislock: acquired", "name", name, "fence", l.fence,
					"attempts", attempt, "wait", time.Since(start), "token", l.ref.token)
			}
			return l, nil
		}
		if queued {
			inQueue = true
		}

		delay, again := o.retry.NextBackoff(attempt)
		if !again || room == nil { // room nil: the strategy said "no retry" up front
			return giveUp(attempt, errors.Join(fmt.Errorf("%w: %q is held by another holder (for %v more)", ErrNotAcquired, name, holderTTL), refusal))
		}
		delay = max(delay, 0)
		// When to ask Redis again, unless a release is announced first:
		// at the backoff, or when the holder's lease would end if that is
		// sooner. A waiter queued on the server does not poll at its
		// backoff (the release hands it the lock and says so): it comes
		// back every queueRefresh, which keeps its place and catches an
		// announcement that was lost, and its backoff only paces its
		// patience, each one counting as an attempt for the strategy.
		askIn := delay
		if queued {
			askIn = queueRefresh
		}
		if holderTTL > 0 && holderTTL < askIn {
			// The holder's lease ends sooner: try then.
			askIn = holderTTL
		}
		if !listened {
			// Hear the holder's release from now on. Until the
			// subscription is confirmed a release could pass unheard,
			// so try again at once after confirming.
			if !waitCap.IsZero() && time.Now().Add(min(delay, askIn)).After(waitCap) {
				return giveUp(attempt, errors.Join(c.gaveUp(name, attempt, errWaitCap), refusal))
			}
			listened = true
			c.rooms().listen(ctx, room, askIn)
			if err := ctx.Err(); err != nil {
				return giveUp(attempt, errors.Join(c.gaveUp(name, attempt, err), refusal))
			}
			continue
		}
		askAt := time.Now().Add(askIn)
	wait:
		for {
			d := time.Until(askAt)
			if queued {
				d = min(max(delay, time.Millisecond), d)
			}
			if !waitCap.IsZero() && time.Now().Add(d).After(waitCap) {
				return giveUp(attempt, errors.Join(c.gaveUp(name, attempt, errWaitCap), refusal))
			}
			if timer == nil {
				timer = time.NewTimer(d)
			} else {
				timer.Reset(d)
			}
			select {
			case <-room.released:
				break wait
			case <-ctx.Done():
				return giveUp(attempt, errors.Join(c.gaveUp(name, attempt, ctx.Err()), refusal))
			case <-timer.C:
				if !time.Now().Before(askAt) {
					break wait
				}
				// A backoff while queued: an attempt for the strategy,
				// without a command.
				attempt++
				if delay, again = o.retry.NextBackoff(attempt); !again {
					return giveUp(attempt, errors.Join(fmt.Errorf("%w: %q is held by another holder", ErrNotAcquired, name), refusal))
				}
				delay = max(delay, 0)
			}
		}
	}
}

// leaveQueue takes a waiter that gives up out of the lock's queue on the
// server. The release script does it (told that it is a waiter leaving),
// and if a release handed the lock to us meanwhile, it hands it on (or
// frees it) as well. Best effort, on a
// context detached from the caller's (which has often just ended) and
// bounded by handoffClaim: a place that stays lapses after queueHold, and a
// lock handed to us after handoffClaim.
func (c *Client) leaveQueue(ctx context.Context, ref *lockRef) {
	leaveCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), handoffClaim)
	defer cancel()
	c.store.leaveQueue(leaveCtx, ref)
}

// gaveUp is the error of a wait that ended by the context (matching both
// ErrNotAcquired and ctx.Err()) or by the cap for a context without
// deadline.
func (c *Client) gaveUp(name string, attempts int, why error) error {
	if why == errWaitCap {
		return fmt.Errorf("%w: %q still held after waiting %v, the cap for a context without deadline", ErrNotAcquired, name, MaxWaitWithoutDeadline)
	}
	return errors.Join(fmt.Errorf("%w: %q: gave up waiting after %d attempts", ErrNotAcquired, name, attempts), why)
}
