package redislock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redislock/redislock/internal/lockrules"
)

// AcquireShared takes a shared hold of the lock called name (a reader's,
// in a readers-writer lock), or fails: any number of shared holders hold
// the name at once, and none while an exclusive holder (Acquire) does.
// An exclusive Acquire of the name waits until no shared holder is left,
// and writers are not starved: once an exclusive waiter is queued, later
// shared callers queue behind it.
//
// The Lock has everything a Lock from Acquire has: a random token and a
// lease of its own, kept alive by the watchdog; a context cancelled with a
// *LostError cause when the share is lost; the safe deadline and Valid;
// Extend, TTL and Release; WithMetadata. A shared holder that crashes
// gives its share back when its lease ends: the holders are a set of
// leases on the server, not a count that a crash could leave stuck. With
// WithFencing, every shared holder of one epoch (from the moment the name
// goes from free or exclusive to shared until the last share ends) gets
// the same fence, taken by the epoch's first fenced holder: above every
// fence before it, and below the next exclusive holder's. Fences never go
// backwards.
//
// Waiting follows the retry strategy as Acquire does (default: no wait),
// bounded by ctx (and MaxWaitWithoutDeadline when ctx has no deadline).
// A shared waiter queues on the server in the same line as exclusive
// waiters, in arrival order; a release that hands the lock to it lets in
// the shared waiters right behind it too, and wakes them.
//
// Errors: as Acquire's; ErrInvalidArgument for WithFailOpen and on a
// Client from NewQuorum, which does not support shared holds. A failed
// call leaves no share held and no place in the queue. On success the
// caller must call Lock.Release.
func (c *Client) AcquireShared(ctx context.Context, name string, opts ...Option) (*Lock, error) {
	if err := c.usable(); err != nil {
		return nil, err
	}
	if _, single := c.store.(singleStore); !single {
		return nil, invalidf("shared locks need a Client on one Redis deployment (New); a quorum Client does not support them")
	}
	var perCall options
	applyOptions(&perCall, opts)
	if perCall.failOpen {
		return nil, invalidf("WithFailOpen applies to RunWithLock only: AcquireShared cannot hand out a share it does not hold")
	}
	o, err := c.resolve(opts)
	if err != nil {
		return nil, err
	}
	names, keyLen, err := c.begin(ctx, "acquire shared", o.prefix, name)
	if err != nil {
		return nil, err
	}
	defer c.calls.exit()
	a := sharedAcquisition{roomCall: roomCall{call: call{c: c, ctx: ctx, parent: ctx, o: o, name: name, what: "acquire shared", start: time.Now()}, rooms: &c.shared}}
	a.init(names[:keyLen])
	defer a.close()
	return a.run()
}

// sharedAcquisition is one AcquireShared call.
type sharedAcquisition struct {
	roomCall       // its room: this Client's shared waiters on the name
	held     bool  // an attempt found the name held by someone else
	claimMs  int64 // how long a shared waiter let in with us has to claim its share
}

func (a *sharedAcquisition) init(key string) {
	a.l = &Lock{client: a.c, opts: a.o, name: a.name}
	r := &a.l.ref
	r.key, r.keyArg, r.ttlArg, r.fenced, r.kind = key, key, a.o.ttl.Milliseconds(), a.o.fencing, sharedHold
	r.queueKey, r.expiryKey = lockrules.Queue(key), lockrules.Expiry(key)
	if a.o.fencing {
		r.fenceKey = lockrules.Fence(key)
	}
	// One token for every attempt: it is our place in the queue, and the
	// value a release hands the lock to us with.
	r.token = valueOf(sharedToken(a.c.rooms().sharedTag), a.o.metadata)
	a.claimMs = min(handoffClaim, a.o.ttl).Milliseconds()
	publish, _ := a.c.publish.(string)
	r.releaseArgs = [9]any{"evalsha", sharedReleaseSHA, 4, r.keyArg, &r.queueKey, &r.expiryKey,
		lockrules.Shared(key), &r.token, publish + " " + strconv.FormatInt(a.claimMs, 10)}
	a.patience.strategy = a.o.retry
	a.waits = a.patience.mayWait()
	r.waiting = a.waits
	a.capWait(false)
}

// attempt sends one attempt and records its verdict.
func (a *sharedAcquisition) attempt() (bool, error) {
	if err := a.begin(a); err != nil {
		return false, err
	}
	ref := &a.l.ref
	keys := []string{ref.key, lockrules.Shared(ref.key), ref.queueKey, ref.expiryKey}
	fenced, wait := "0", "0"
	if ref.fenced {
		keys, fenced = append(keys, ref.fenceKey), "1"
	}
	if a.waits {
		wait = strconv.FormatInt(queueHold.Milliseconds(), 10)
	}
	store := a.c.store.(singleStore)
	acquired, err := a.record(runScript(a.ctx, store.rdb, a.o, sharedAcquireScript, keys, ref.token, a.o.ttl.Milliseconds(), fenced, wait, a.c.publish, a.claimMs))
	if err != nil {
		return false, a.failedIn(a, err)
	}
	a.held = a.held || !acquired
	return acquired, nil
}

// nextWake: the queue's refresh also finds an exclusive waiter ahead of
// us gone (see call.wakeAt).
func (a *sharedAcquisition) nextWake() time.Time { return a.wakeTime(true) }

func (a *sharedAcquisition) run() (*Lock, error) { return a.runIn(a) }

// listen: a shared waiter hears the hand-overs to this Client's shared
// waiters (see sharedTag).
func (a *sharedAcquisition) listen() (key, channel string) {
	return a.l.ref.key, handoverChannel(a.l.ref.key, a.c.rooms().sharedTag)
}

func (a *sharedAcquisition) heldError() error {
	return fmt.Errorf("%w: %q is held exclusively or an exclusive waiter is ahead%s, %s",
		ErrNotAcquired, a.name, a.holderLeft(), a.tally())
}

// stopped is the error of a wait that ended without a verdict: ctx ended,
// the cap passed, or the Client closed.
func (a *sharedAcquisition) stopped(why error) error {
	switch {
	case errors.Is(why, errClosing):
		return fmt.Errorf("%w: acquire shared %q: gave up waiting", ErrClosed, a.name)
	case !a.held:
		return fmt.Errorf("redislock: acquire shared %q: the context ended before any attempt had an answer: %w", a.name, why)
	case context.Cause(a.ctx) == errWaitCap:
		return fmt.Errorf("%w: %q still held after waiting %v, the cap for a context without deadline", ErrNotAcquired, a.name, MaxWaitWithoutDeadline)
	}
	return join(fmt.Errorf("%w: %q: gave up waiting after %d attempts", ErrNotAcquired, a.name, a.attempts), why)
}
