package redislock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redislock/redislock/internal/lockrules"
)

// Acquire takes the lock called name, or fails.
//
// An attempt is one command (two when a plain SET NX finds the lock held).
// When the lock is held by someone else, Acquire waits as the retry
// strategy says (default: not at all), one backoff per wait, whatever wakes
// the waiter in between. A waiter queues on the server and is woken by the
// release that hands it the lock, or comes back every half second and when
// the holder's lease would end; it never waits past ctx's deadline, nor
// longer than MaxWaitWithoutDeadline when ctx has none. Callers of one
// Client waiting for one lock queue behind each other. ctx bounds the
// waiting only: the held lock lives on until Release or loss.
//
// A caller that waits rides through Redis errors (network errors, timeouts,
// LOADING, READONLY, CLUSTERDOWN, MASTERDOWN, TRYAGAIN...: see transient)
// as every waiting call of every kind does: a failed attempt begins a wait
// of the strategy (within one, it tries again after 25-50 ms, doubling up
// to 125-250 ms). Other replies (WRONGTYPE, NOPERM) end the call at once, as
// every error does with NoRetry.
//
// Errors, all of them one line:
//   - ErrNotAcquired (wrapped with the name) when the last answer said the
//     lock was held by someone else and the strategy ran out; joined with
//     ctx.Err() when ctx ended while waiting for it; also when a reply came
//     back after the lease's safe deadline (the key is given back).
//   - An error matching ctx.Err(), but not ErrNotAcquired, when ctx was done
//     before any attempt had an answer, also wrapping the last Redis error
//     when Redis was failing (fail closed: never ErrNotAcquired then).
//   - ErrClosed after Client.Close, also to callers that were waiting.
//   - ErrInvalidArgument for bad input (nothing is sent).
//   - Otherwise the Redis error, wrapped (it does not match ErrNotAcquired).
//
// A failed Acquire leaves no lock held: an attempt whose outcome it could
// not learn is given back in the background. On success the caller must
// call Lock.Release; a Lock dropped while held is released only once the
// garbage collector finds it.
func (c *Client) Acquire(ctx context.Context, name string, opts ...Option) (*Lock, error) {
	return c.take(ctx, exclusiveLock, name, opts, nil)
}

// acquire is take with the options resolved (the way in of RunWithLock,
// Elect and AcquireMulti, which read them first), at take's depth for
// acquireKind's callerPC.
func (c *Client) acquire(ctx context.Context, k lockKind, name string, o *options, layout func(o *options, r *lockRef)) (*Lock, error) {
	return c.acquireKind(ctx, k, name, o, layout)
}

// acquisition is one acquire call of any kind: the one acquisition loop,
// and what it keeps until its verdict.
type acquisition struct {
	c      *Client
	ctx    context.Context // the caller's, capped at MaxWaitWithoutDeadline when it waits
	parent context.Context // the caller's: the lock's context gets its values
	o      *options
	name   string
	kind   lockKind
	l      *hold // built up front: its commands are prepared once for every attempt
	start  time.Time

	waits      bool // the strategy allows at least one wait
	patience   patience
	inQueue    bool // we may have a place in the server's queue
	attempts   int
	sent       time.Time // when the last attempt was sent
	holderEnds time.Time // when the holder's lease ends, if known
	fence      int64
	cancelCap  context.CancelFunc
	// queued: waits in the server's queue, one token for all attempts;
	// freshTokens: each attempt has a token of its own (see plan).
	queued, freshTokens bool
	// room: this Client's waiters for our key, whose turn we hold (nil
	// once handed to the lock); early: the attempt a releaser made for us.
	room     *waitRoom
	early    *earlyAttempt
	listened bool // the room hears release announcements
	// seat: where a hand-over to us finds us (its wake-up, see
	// waitRoom.expect); woken: the room's plain announcements.
	seat  <-chan struct{}
	woken <-chan struct{}

	held    bool   // an attempt found the lock held by someone else
	refusal error  // a store's explanation of the last refusal
	blocker string // a multi lock's name that kept the last attempt out
	// failing: the last attempt's Redis error, while no answer came since;
	// failures: such attempts in a row; retryAt: when to try again.
	failing  error
	failures int
	retryAt  time.Time

	// ticket: what a hand-over to us announces; firstSent: our first attempt's send time.
	ticket    string
	firstSent time.Time
}

// init builds the Lock (layout adds its kind's keys) and decides how to wait.
func (a *acquisition) init(names, shared string, keyLen int, layout func(o *options, r *lockRef)) {
	a.l = &hold{client: a.c, opts: a.o, name: a.name, ref: lockRef{kind: a.kind}}
	r := &a.l.ref
	r.init(names, shared, keyLen, a.o)
	if layout != nil {
		layout(a.o, r)
	}
	r.commands(a.o)
	a.patience = patience{strategy: a.o.retry, observed: a.l}
	a.waits = a.patience.mayWait()
	a.plan(a.waits && a.c.store.queues())
	if !a.freshTokens {
		a.setToken()
	}
	// A waiting ctx without deadline is capped at MaxWaitWithoutDeadline,
	// unless a campaign (Elect) waits: it waits until its ctx ends, however long.
	if _, ok := a.ctx.Deadline(); a.waits && !ok && !a.o.campaign {
		a.ctx, a.cancelCap = context.WithDeadlineCause(a.ctx, a.start.Add(MaxWaitWithoutDeadline), errWaitCap)
	}
}

// setToken gives the attempts their token: a shared hold's and a queued
// waiter's is its place in the server's queue, one for all its attempts (but
// after one given back, see giveBack); others take one per attempt.
func (a *acquisition) setToken() {
	r := &a.l.ref
	if a.freshTokens {
		r.freshToken(a.o.metadata)
		return
	}
	// Our place in the queue: its mark tells the scripts our kind.
	r.token = valueOf(waiterToken(a.c.rooms().tag, r.mark()), a.o.metadata)
	if a.queued {
		old := a.ticket
		a.ticket = handoffTicket(r.token)
		r.leftKey = lockrules.Left(r.key, a.ticket)
		if a.room != nil { // a hand-over to the old token is the janitor's to pass on
			a.room.unseat(old) // (also a seat a releaser made for it)
			if a.seat != nil {
				a.seat = a.room.expect(a.ticket)
			}
		}
	}
}

func (a *acquisition) run() (*Lock, error) {
	if a.waits {
		if err := a.watch(); err != nil {
			return a.fail(err)
		}
	}
	for {
		acquired, err := a.attempt()
		if acquired {
			// A reply too late for its lease is a timeout (see tooLate).
			if err = a.tooLate(); err == nil {
				return a.succeed(a.o.ttl, a.sent)
			}
			err = a.again(err, transient(err))
		}
		switch {
		case err != nil:
			return a.fail(err)
		case !a.waits:
			return a.fail(a.heldError())
		}
		if a.failing == nil {
			if err := a.watch(); err != nil {
				return a.fail(err)
			}
		}
		if err := a.sleep(); err != nil {
			return a.fail(err)
		}
		if lease, ok := a.handedOver(); ok {
			a.sent, a.fence = a.firstSent, 0
			a.inQueue = false // the release took our place
			return a.succeed(lease, time.Now())
		}
	}
}

// watch enters the room of the name the call waits for (waitKey), leaving
// the one it was in for another name (a multi lock's, kept out by another).
func (a *acquisition) watch() error {
	key := a.waitKey()
	if key == "" || a.room != nil && a.room.key == key {
		return nil
	}
	if a.room != nil { // (enterRoom replaces room, and listened once in the new one)
		a.c.rooms().leave(a.room, a.kind.rules().takesTurn)
	}
	return a.enterRoom(key)
}

// enterRoom takes the turn among this Client's waiters for key, within ctx
// and the strategy. A releaser handing us the turn may send our first attempt
// behind its release: not with WithReplicaAck (its WAIT must follow), nor multi.
func (a *acquisition) enterRoom(key string) error {
	var earlyRef *lockRef
	if a.queued && a.o.replicas == 0 {
		earlyRef = &a.l.ref
	}
	var err error
	a.room, a.early, err = a.c.rooms().enter(a.ctx, key, a.kind.rules().takesTurn, earlyRef, &a.patience, a.c.closing)
	if err != nil {
		if a.early != nil {
			// The turn came as we gave up, with an attempt made for us:
			// give back what it took (see close) when we know it ran.
			if a.early.reply.Err() != nil {
				a.giveBack(true, nil)
			} else {
				a.inQueue = true
			}
			a.early = nil
		}
		// Behind another caller: seen held if that caller saw it held or holds it.
		a.held = a.held || a.room != nil && a.room.seenHeld.Load() || errors.Is(err, errSeenHeld)
		if errors.Is(err, errPatience) {
			a.held = true
			return a.heldError()
		}
		return a.stopped(err)
	}
	if a.queued {
		// A hand-over to us wakes us from now on (a releaser seats us before sending).
		a.seat = a.room.expect(a.ticket)
	}
	a.held = a.held || a.room.seenHeld.Load() // the caller ahead of us saw it held
	// A room kept subscribed by earlier waiters hears every release already.
	a.listened = a.c.rooms().hearing(a.room)
	return nil
}

func (a *acquisition) attempt() (acquired bool, err error) {
	if err := a.ctx.Err(); err != nil {
		return false, a.stopped(err) // no attempt that could only fail
	}
	a.attempts++
	r := &a.l.ref
	if a.room != nil {
		a.woken = a.room.wakeup() // an announcement after the attempt wakes us
	}
	if a.freshTokens {
		a.setToken()
	}
	var holderTTL time.Duration
	if early := a.early; early != nil && early.reply.Err() == nil {
		a.sent = early.sent
		acquired, a.fence, holderTTL, err = parseAcquire(early.reply, a.o.fencing)
	} else {
		// Not waited in line: the lease may count from start (early: the safe side).
		a.sent = a.start
		if a.attempts > 1 || a.room != nil {
			a.sent = time.Now()
		}
		acquired, a.fence, holderTTL, err = a.c.store.acquire(a.ctx, a.o, r)
	}
	// Our first attempt's date: one sent for us with a release whose reply
	// was lost may have queued us, and a hand-over can follow it before our own.
	if a.attempts == 1 {
		a.firstSent = a.sent
		if a.early != nil {
			a.firstSent = a.early.sent
		}
	}
	a.early = nil
	// A store's explanation of a refusal (a quorum's counts) goes with the error.
	a.refusal = nil
	if errors.Is(err, ErrNotAcquired) {
		a.refusal, err = err, nil
	}
	if err != nil {
		return false, a.failed(err)
	}
	a.failing, a.failures = nil, 0
	// Held, by us or by another: the callers in line behind us know.
	if a.room != nil && !a.room.seenHeld.Load() {
		a.room.seenHeld.Store(true)
	}
	if acquired {
		a.inQueue = false // the script took us out of the queue
		return true, nil
	}
	a.held, a.inQueue = true, a.queued
	if r.multi != nil {
		a.blocker = r.multi.names[r.multi.blocker]
	}
	a.holderEnds = time.Time{} // when the holder's lease ends, if known
	if holderTTL > 0 {
		a.holderEnds = time.Now().Add(holderTTL)
	}
	return false, nil
}

// handedOver returns the lease a hand-over announced (until firstSent+lease
// by the server's clock), when we may take it without a claim, whatever the
// kind: not with a fence (the claim takes it), WithReplicaAck (its WAIT),
// without the watchdog (the TTL holds from the start), nor with under half
// that lease left.
func (a *acquisition) handedOver() (time.Duration, bool) {
	if !a.queued {
		return 0, false
	}
	lease, ok := a.room.takeHandover(a.ticket)
	if !ok || a.o.fencing || a.o.replicas > 0 || !a.o.watchdog {
		return 0, false
	}
	lease = min(lease, a.o.ttl)
	if time.Until(a.firstSent.Add(lease-drift(lease))) < lease/2 {
		return 0, false
	}
	return lease, true
}

// giveBack has the janitor give back what the last attempt took, or may
// take when uncertain (no answer; way: still on its way), under its token:
// a lease and a queue place (queueHold). The call goes on at once under a
// new token (setToken), in a ref of its own: a hand-over to the old token is
// the janitor's to pass on, never the waiter's to take (it would hold a
// Lock whose key the give-back frees), and the old ref is left as it is to
// a command still on its way, which reads its token and keys through
// pointers into it (see lockRef). An uncertain give-back marks the token
// gone: the attempt may still arrive, after it (see lockRef.giveBackArgs).
func (a *acquisition) giveBack(uncertain bool, way *onItsWay) {
	old := a.l
	a.l = &hold{client: old.client, opts: old.opts, name: old.name, caller: old.caller, ref: old.ref}
	r := &a.l.ref
	r.acquireArgs = nil
	if r.multi != nil {
		r.multi = r.multi.fresh()
	}
	r.commands(a.o)
	if uncertain {
		old.ref.markLeft = true
		a.c.cleaner.addUncertain(&old.ref, max(a.o.ttl, queueHold), way)
	} else {
		// What it took, known: given back at once, as a waiter that gives
		// up leaves (on a healthy link, before the caller goes on).
		a.c.leave(&old.ref, a.sent.Add(a.o.ttl))
	}
	a.setToken()
}

// failed turns an attempt's error into the call's, or nil when the caller
// rides through it (see transient). An attempt without an answer may still
// take the key under its token: the janitor gives it back; one of which
// nothing reached Redis (nothingSent) took nothing, however long an outage
// lasts: no give-back, and the same token.
func (a *acquisition) failed(err error) error {
	var reply redis.Error
	switch {
	case a.c.store.queues() && errors.Is(err, ErrReplicaAck):
		// The attempt took the lock (its reply was read), too few replicas
		// have it: given back, as nothing is on its way, unmarked. (A
		// quorum's nodes give back themselves.)
		a.giveBack(false, nil)
		a.inQueue = false
	case nothingSent(err):
		// A queued waiter keeps its place: go-redis's own retries may have
		// sent an earlier try of this attempt before the last could not
		// connect, whose place (or key) its next attempt finds as its own,
		// and close gives back if it gives up.
		a.inQueue = a.inQueue || a.queued
	case !errors.As(err, &reply) || a.ctx.Err() != nil:
		if a.c.store.queues() {
			var way *onItsWay
			errors.As(err, &way)
			a.giveBack(true, way)
		}
		// No call to a Redis that just failed; an error reply took nothing,
		// and close gives back the place we had. (A reply not read within
		// the link's usual round trip: the janitor's first round, at once,
		// gives the place back in the background, marked.)
		a.inQueue = false
	}
	raw := err
	switch {
	case errors.Is(err, errClosing):
		// Client.Close stopped us waiting for an attempt under way.
		return a.stopped(err)
	case redis.HasErrorPrefix(err, "SEMLIMIT"): // (only a semaphore's scripts say it)
		holders := strings.TrimSpace(strings.TrimPrefix(err.Error(), "SEMLIMIT"))
		return fmt.Errorf("%w: %s: asked with limit %d, its holders use %s",
			ErrLimitMismatch, a.subject(), a.l.ref.arg, holders)
	case redis.HasErrorPrefix(err, "WRONGTYPE"):
		err = notALockError{err.Error(), err}
	}
	err = fmt.Errorf("redislock: %s %s: %w", a.kind.rules().what, a.subjectName(), err)
	if ended := a.ctx.Err(); ended != nil {
		if !errors.Is(raw, ended) { // (not our ctx cutting the attempt short)
			a.failing = err
		}
		return a.stopped(ended)
	}
	return a.again(err, transient(raw))
}

// again returns nil when a caller tries again after an attempt failed with
// err (it waits, its ctx lasts and err is transient), else err. It keeps err
// as the last Redis error (reported when the wait ends) and sets the next try.
func (a *acquisition) again(err error, transient bool) error {
	a.failing = err
	if !a.waits || !transient || a.ctx.Err() != nil {
		return err
	}
	a.failures++
	a.retryAt = time.Now().Add(retryPause(a.failures))
	if a.failures == 1 {
		a.o.log().Warn("redislock: redis failing while waiting, trying again", "name", a.name, "error", err)
	}
	return nil
}

// notNow are the replies of a Redis that is there but will take the command
// later, or elsewhere: a slot migrating (TRYAGAIN), a primary demoted by a
// failover (READONLY), a slot moved (after go-redis's redirects ran out),
// too few replicas for a write (NOREPLICAS: min-replicas-to-write), no free
// connection on the server.
var notNow = []string{"TRYAGAIN", "READONLY", "MOVED", "ASK", "NOREPLICAS", "max number of clients"}

// transient is the one rule, for every kind (Elect too), of the errors a
// waiting caller rides through: Redis could not be reached or serve now
// (isUnreachable: network errors, timeouts, no quorum, LOADING, MASTERDOWN,
// CLUSTERDOWN, BUSY), too few replicas acknowledged (ErrReplicaAck, whatever
// WAIT answered: a replica catching up after a failover; a shortfall that
// lasts has a waiter try until its ctx or strategy ends), answered too
// late for the lease (errTooLate: a timeout) or said notNow. The rest are
// verdicts, the call ends: another reply (WRONGTYPE, NOPERM, SEMLIMIT, a
// script's own error), a reply the library cannot read, a go-redis client
// closed by its owner.
func transient(err error) bool {
	if errors.Is(err, errBadReply) || errors.Is(err, redis.ErrClosed) {
		return false
	}
	return isUnreachable(err) || errors.Is(err, errTooLate) || errors.Is(err, ErrReplicaAck) ||
		slices.ContainsFunc(notNow, func(prefix string) bool { return redis.HasErrorPrefix(err, prefix) })
}

// nothingSent tells whether err says that nothing of an attempt reached
// Redis: it never left the batcher's queue (unsentError), go-redis could not
// connect (a dial error: refused, no route, timed out) or found no free
// connection in its pool (redis.ErrPoolTimeout).
func nothingSent(err error) bool {
	var unsent unsentError
	var op *net.OpError
	return errors.As(err, &unsent) || errors.As(err, &op) && op.Op == "dial" || errors.Is(err, redis.ErrPoolTimeout)
}

// errBadReply is wrapped by the error of an acquire reply the library cannot
// read; errTooLate by that of one that came after the lease's safe deadline.
var (
	errBadReply = errors.New("unexpected reply")
	errTooLate  = errors.New("the lease ran out before the reply arrived")
)

// failingError is a wait's error when it ended while Redis was failing: the
// last Redis error, and why it ended (ctx, the cap or the strategy).
type failingError struct{ last, why error }

func (e *failingError) Error() string   { return oneLine(e.last.Error()) + "; " + e.why.Error() }
func (e *failingError) Unwrap() []error { return []error{e.last, e.why} }

// tooLate gives the key back when the reply came after the lease's safe
// deadline: ErrNotAcquired, the error of a caller that does not wait; a
// waiting one tries again, as after a timeout (the next attempt has a token
// of its own: the janitor gives this one back).
func (a *acquisition) tooLate() error {
	if ttl := a.o.ttl; !time.Now().Before(a.sent.Add(ttl - drift(ttl))) {
		a.giveBack(false, nil)
		return fmt.Errorf("%w: %s %s: %w (%v after sending, TTL %v)", ErrNotAcquired, a.kind.rules().what,
			a.subjectName(), errTooLate, time.Since(a.sent).Round(time.Microsecond), ttl)
	}
	return nil
}

// succeed hands out the Lock, leased for lease from a.sent, taken at took. An
// exclusive holder keeps the turn of this Client's waiters; any other passes it.
func (a *acquisition) succeed(lease time.Duration, took time.Time) (*Lock, error) {
	if a.c.closed.Load() {
		// The Client began closing meanwhile: the lock goes back, and the
		// caller gets Close's error.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(a.parent), ReleaseTimeout)
		_, _ = a.c.store.abandon(ctx, []*lockRef{&a.l.ref})
		cancel()
		return a.fail(fmt.Errorf("%w: %s %s", ErrClosed, a.kind.rules().what, a.subjectName()))
	}
	var room *waitRoom
	if a.kind.rules().keepsTurn && a.room != nil {
		room, a.room = a.room, nil // the lock's now: close leaves it alone
		if a.queued {
			room.unseat(a.ticket)
		}
	}
	if m := a.l.ref.multi; m != nil {
		a.fence = m.fences[m.firstAt]
	}
	a.l.observeHold(true) // before an alarm could end it
	a.l.startLeased(a.parent, a.fence, a.sent, took, lease, room)
	a.observe(a.l.fence, nil)
	l := &Lock{h: a.l}
	if logger := a.o.log(); logger.Enabled(a.parent, slog.LevelDebug) { // no boxing when off
		logger.Debug("redislock: acquired", "name", a.name, "fence", a.l.fence,
			"attempts", a.attempts, "wait", time.Since(a.start), "token", l.Token(), "holder", holderID(l.Token()))
	}
	runtime.SetFinalizer(l, (*Lock).dropped)
	return l, nil
}

func (a *acquisition) fail(err error) (*Lock, error) {
	a.observe(0, err)
	return nil, err
}

// close undoes what a failed acquisition leaves: our queue place, the turn, the cap's timer.
func (a *acquisition) close() {
	if a.patience.waits > 0 {
		a.l.observeWait(false)
	}
	if a.inQueue {
		a.c.leave(&a.l.ref, time.Now().Add(queueHold))
	}
	if a.room != nil {
		if a.queued { // also a seat a releaser made for us as we gave up
			a.room.unseat(a.ticket)
		}
		a.c.rooms().leave(a.room, a.kind.rules().takesTurn)
	}
	if a.cancelCap != nil {
		a.cancelCap()
	}
}

// sleep waits until the next attempt is due (see nextWake) or a release is
// announced; it returns the verdict when the strategy allows no more waits.
func (a *acquisition) sleep() error {
	if now := time.Now(); !a.patience.waiting(now) && !a.patience.begin(now) {
		if a.failing != nil {
			return &failingError{a.failing, errors.New("gave up " + a.tally())}
		}
		return a.heldError()
	}
	if !a.listened && a.failing == nil {
		// Hear the holder's release from now on; until the subscription is
		// confirmed one could pass unheard, so try again once confirmed.
		a.listened = true
		wake, _ := a.nextWake()
		a.c.rooms().listen(a.ctx, a.room, time.Until(wake), a.c.closing)
		if err := a.ctx.Err(); err != nil {
			return a.stopped(err)
		}
		if a.c.closed.Load() {
			return a.stopped(errClosing)
		}
		return nil
	}
	for {
		wake, waitEnds := a.nextWake()
		rang, err := a.pause(wake)
		if err != nil || !rang || !waitEnds || !a.l.ref.waiting || a.failing != nil {
			return err
		}
		// A queued (or watching) waiter does not ask at the end of a wait (but
		// while Redis fails): the next begins, or, when none is allowed, one
		// last attempt.
		if !a.patience.begin(time.Now()) {
			return nil
		}
	}
}

// nextWake: the strategy's wait's end (waitEnds), the holder's lease end,
// on the server the refresh of our place, or while Redis fails the next try,
// whichever comes first.
func (a *acquisition) nextWake() (wake time.Time, waitEnds bool) {
	wake, waitEnds = a.patience.end, true
	earlier := func(known bool, at time.Time) {
		if known && at.Before(wake) {
			wake, waitEnds = at, false
		}
	}
	earlier(a.failing != nil, a.retryAt)
	earlier(a.l.ref.waiting, a.sent.Add(queueRefresh))
	earlier(!a.holderEnds.IsZero(), a.holderEnds)
	return wake, waitEnds
}

func (a *acquisition) pause(wake time.Time) (rang bool, err error) {
	d := time.Until(wake)
	if d <= 0 {
		return true, nil
	}
	// A timer of its own, stopped as it returns (see queuedWaiter.wait).
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true, nil
	case <-a.seat:
		return false, nil
	case <-a.woken:
		return false, nil
	case <-a.ctx.Done():
		return false, a.stopped(a.ctx.Err())
	case <-a.c.closing:
		return false, a.stopped(errClosing)
	}
}

func (a *acquisition) heldError() error {
	return join(fmt.Errorf("%w: %s, %s", ErrNotAcquired, a.heldWords(), a.tally()), a.refusal)
}

// holderLeft is " (for 1.2s more)", or "" when the holder's end is unknown.
func (a *acquisition) holderLeft() string {
	if left := time.Until(a.holderEnds); left > 0 {
		return fmt.Sprintf(" (for %v more)", left.Round(time.Millisecond))
	}
	return ""
}

func (a *acquisition) tally() string {
	return "after " + count(a.attempts, "attempt") + " and " + count(a.patience.waits, "wait")
}

// stopped is the error of a wait ended by ctx, the cap or Close; it matches
// ErrNotAcquired only when the last answer said the lock was held.
func (a *acquisition) stopped(why error) error {
	capped := context.Cause(a.ctx) == errWaitCap
	switch {
	case errors.Is(why, errClosing):
		return fmt.Errorf("%w: %s %s: gave up waiting", ErrClosed, a.kind.rules().what, a.subjectName())
	case a.failing != nil && capped:
		return &failingError{a.failing, fmt.Errorf("gave up waiting after %v, the cap for a context without deadline", MaxWaitWithoutDeadline)}
	case a.failing != nil:
		return &failingError{a.failing, fmt.Errorf("gave up waiting after %s: %w", count(a.attempts, "attempt"), why)}
	case capped && a.held:
		return join(fmt.Errorf("%w: %s still held after waiting %v, the cap for a context without deadline", ErrNotAcquired, a.heldSubject(), MaxWaitWithoutDeadline), a.refusal)
	case capped:
		return fmt.Errorf("redislock: %s %s: no answer after waiting %v, the cap for a context without deadline", a.kind.rules().what, a.subjectName(), MaxWaitWithoutDeadline)
	case a.held:
		return join(fmt.Errorf("%w: %s: gave up waiting after %s", ErrNotAcquired, a.heldSubject(), count(a.attempts, "attempt")), why, a.refusal)
	}
	return fmt.Errorf("redislock: %s %s: the context ended before any attempt had an answer: %w", a.kind.rules().what, a.subjectName(), why)
}

// errWaitCap is the cause of a waiting ctx without deadline that reached
// MaxWaitWithoutDeadline; errClosing tells a wait that Close ended.
var (
	errWaitCap = errors.New("waited MaxWaitWithoutDeadline")
	errClosing = errors.New("client closing")
)

// observe tells the observer, if any, how the call ended.
func (a *acquisition) observe(fence int64, err error) {
	if a.o.observer != nil {
		a.o.observer.ObserveAcquire(AcquireEvent{Name: a.name, Acquired: err == nil, Wait: time.Since(a.start),
			Attempts: a.attempts, Fence: fence, Err: err, Campaign: a.o.campaign})
	}
}

// take is the way in of every kind.
func (c *Client) take(ctx context.Context, k lockKind, name string, opts []Option, layout func(o *options, r *lockRef)) (*Lock, error) {
	o, err := c.callOptions(k, opts)
	if err != nil {
		return nil, err
	}
	return c.acquireKind(ctx, k, name, o, layout)
}

// acquireKind runs an acquisition with its options resolved: it checks the
// call, and registers it with Close (which waits for it) until it returns.
func (c *Client) acquireKind(ctx context.Context, k lockKind, name string, o *options, layout func(o *options, r *lockRef)) (*Lock, error) {
	if ctx == nil {
		return nil, invalidf("nil context")
	}
	names, shared, keyLen, err := lockKeysShared(o.prefix, name)
	if err != nil {
		return nil, err
	}
	if !c.calls.enter() {
		return nil, fmt.Errorf("%w: %s %q", ErrClosed, k.rules().what, name)
	}
	defer c.calls.exit()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("redislock: %s %q: context already done: %w", k.rules().what, name, err)
	}
	c.checkServer(ctx, o)
	a := acquisition{c: c, ctx: ctx, parent: ctx, o: o, name: name, kind: k, start: time.Now()}
	a.init(names, shared, keyLen, layout)
	a.l.caller = callerPC(3) // the caller of Acquire, RunWithLock, AcquireShared...
	defer a.close()
	return a.run()
}

// callOptions checks an acquiring call before anything is sent.
func (c *Client) callOptions(k lockKind, opts []Option) (*options, error) {
	if err := c.usable(); err != nil {
		return nil, err
	}
	if len(opts) > 0 {
		var perCall options
		applyOptions(&perCall, opts)
		if perCall.failOpen {
			return nil, invalidf("WithFailOpen applies to RunWithLock only: %s cannot hand out %s it does not hold",
				k.rules().call, k.rules().handsOut)
		}
	}
	o, err := c.resolve(opts)
	if err != nil {
		return nil, err
	}
	return o, c.store.serves(k)
}

// RunWithLock acquires the lock called name, runs fn while holding it, and
// releases it, also when fn panics (the panic then continues) or ctx was
// cancelled: on a context detached from ctx, bounded by ReleaseTimeout.
// fn's context is derived from ctx and is also cancelled when the lock is
// lost, with the *LostError as its cause; FenceFromContext on it gives the
// fencing token.
//
// It returns fn's error, which also matches ErrLockLost (carrying the
// *LostError) if the lock was lost while fn ran. When fn did not run it
// returns Acquire's error (with WithFailOpen, fn runs without a lock when
// Redis cannot be reached), or ErrInvalidArgument for a nil fn. A failed
// release after fn is logged at Warn, not returned: the lock expires.
func (c *Client) RunWithLock(ctx context.Context, name string, fn func(ctx context.Context) error, opts ...Option) error {
	switch err := c.usable(); {
	case err != nil:
		return err
	case fn == nil:
		return invalidf("nil fn for lock %q", name)
	}
	o, err := c.resolve(opts)
	if err != nil {
		return err
	}
	l, err := c.acquire(ctx, exclusiveLock, name, o, nil)
	if err != nil && o.failOpen && ctx != nil && ctx.Err() == nil && isUnreachable(err) {
		o.log().Warn("redislock: redis unreachable, running WITHOUT the lock (fail open)",
			"name", name, "error", err)
		if o.observer != nil {
			o.observer.ObserveFailOpen(FailOpenEvent{Name: name, Err: err})
		}
		return fn(withLock(ctx, nil))
	}
	return l.run(ctx, fn, err)
}
