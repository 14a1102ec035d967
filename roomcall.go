package redislock

import (
	"time"

	"github.com/redis/go-redis/v9"
)

// roomCall is a call that waits in one of its Client's semRooms, woken by
// the announcements of one key: AcquireSemaphore, AcquireShared and
// AcquireMulti. Their attempts differ; how they wait does not.
type roomCall struct {
	call
	rooms *semRooms // the Client's rooms this kind of call waits in
	room  *semRoom  // the one it waits in; nil until the first wait
}

// roomAttempts is what a kind of roomCall does its own way.
type roomAttempts interface {
	// attempt sends one attempt and records its verdict.
	attempt() (bool, error)
	// succeed hands out the Lock the last attempt took.
	succeed() (*Lock, error)
	// heldError is the error of a call that found it held to the end.
	heldError() error
	// stopped is the error of a wait that ended without a verdict.
	stopped(why error) error
	// nextWake is when to look again if nothing is heard.
	nextWake() time.Time
	// listen returns the key whose announcements the next wait is for,
	// and the channel they come on.
	listen() (key, channel string)
}

// runIn makes attempts of kind until one succeeds, the lock is found held
// and the strategy will not wait (any more), or the call stops. Between
// attempts it waits in the room of the key kind listens to, entered (or
// changed) before the wait: then it looks again at once, since an
// announcement may have passed before the subscription was confirmed.
func (a *roomCall) runIn(kind roomAttempts) (*Lock, error) {
	for {
		var woken <-chan struct{}
		if a.room != nil {
			woken = a.room.wakeup() // before the attempt: an announcement after it wakes us
		}
		acquired, err := kind.attempt()
		switch {
		case err != nil:
			return a.fail(err)
		case acquired:
			return kind.succeed()
		case !a.waits:
			return a.fail(kind.heldError())
		}
		if now := time.Now(); !a.patience.waiting(now) && !a.patience.begin(now) {
			return a.fail(kind.heldError())
		}
		if key, channel := kind.listen(); a.room == nil || a.room.key != key {
			if a.room != nil {
				a.rooms.leave(a.room)
			}
			a.room = a.rooms.enter(a.c, key, channel)
			a.room.ready(a.ctx, kind.nextWake())
			continue
		}
		if _, why := a.waitUntil(kind.nextWake(), woken); why != nil {
			return a.fail(kind.stopped(why))
		}
	}
}

// begin counts an attempt about to be sent and dates it: the lease is
// counted from its sending (the first one's from the call's start: the
// safe side). An ended ctx stops the call instead.
func (a *roomCall) begin(kind roomAttempts) error {
	if err := a.ctx.Err(); err != nil {
		return kind.stopped(err)
	}
	a.attempts++
	a.sent = time.Now()
	if a.attempts == 1 {
		a.sent = a.start
	}
	return nil
}

// record reads the reply of a one-key attempt (a semaphore's or a shared
// hold's script): taken, held by others (then when their lease ends), or
// an error, which the caller words. A taken attempt that WithReplicaAck
// could not confirm is an error, and the janitor gives it back.
func (a *roomCall) record(cmd *redis.Cmd, ackErr error) (acquired bool, err error) {
	acquired, fence, holder, err := parseAcquire(cmd, a.o.fencing)
	if err == nil && acquired && ackErr != nil {
		a.c.janitor().add(&a.l.ref, a.sent.Add(a.o.ttl))
		acquired, err = false, ackErr
	}
	switch {
	case err != nil:
		return false, err
	case acquired:
		a.inQueue, a.fence = false, fence
		return true, nil
	}
	a.inQueue = a.waits
	a.heldFor(holder)
	return false, nil
}

// succeed hands out the Lock with the fence the last attempt took, unless
// the reply came after the lease's safe deadline (then the hold is given
// back).
func (a *roomCall) succeed() (*Lock, error) {
	if err := a.handOut(); err != nil {
		return a.fail(err)
	}
	a.l.start(a.parent, a.fence, a.sent, nil)
	a.c.observeAcquire(a.o, a.name, a.start, a.attempts, a.l.fence, nil)
	return a.l, nil
}

// close leaves the room, and undoes what the call leaves (see call.close).
func (a *roomCall) close() {
	if a.room != nil {
		a.rooms.leave(a.room)
	}
	a.call.close()
}
