// Package redislock provides distributed locks on Redis for Go services
// whose instances must not run the same critical section at once.
//
// A lock is taken with one command, SET key token NX PX ttl, under a random
// token that only its holder knows; it is extended and released by Lua
// scripts that check the token first, so a holder never extends or deletes
// a lock that has passed to someone else. While a lock is held, a watchdog
// extends it every TTL/3, and the lock's context ([Lock.Context]) is
// cancelled, with a [*LostError] as its cause, as soon as the lock can no
// longer be trusted: at once when Redis says the key is gone or holds
// another token, and at the latest at the safe deadline (the send time of
// the last confirmed extension plus the TTL, less an allowance for clock
// drift) even if Redis never answers.
//
// What a lock cannot promise: a process that is paused (a long GC, a frozen
// VM) stops its watchdog and its timers too, so it can wake up after its
// lease expired and act before it notices; and Redis replication is
// asynchronous, so a failover can lose a lock that was just taken. Where a
// second holder would do harm (a double charge, not just work done twice),
// take a fencing token with the lock ([WithFencing]) and have the protected
// resource reject stale ones; see [FenceFromContext].
//
// A [Client] is safe for concurrent use and should be shared. A [Lock] is
// safe for concurrent use, is not tied to the goroutine that acquired it,
// and must not be copied.
package redislock

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Client takes locks on one Redis deployment (New) or on a majority of
// independent servers (NewQuorum). It is safe for concurrent use; create one
// per Redis client and share it. It needs no closing: its watchdog runs a
// goroutine only while a batch of extensions is under way, and its pub/sub
// reader only while one of its goroutines waits for a lock (and 100 ms
// after); both stop by themselves.
type Client struct {
	store store
	opts  options
	// notify is the client that hears release announcements; nil: none.
	notify redis.UniversalClient
	// publish is the command the release script announces with, boxed
	// once for the prepared commands (see lockRef).
	publish any
	// defaultsErr is what resolve reports for a call without options of
	// its own; set by setup.
	defaultsErr error

	init      sync.Once
	scheduler *scheduler
	deadlines *alarms
	waiting   *waitRooms
}

// watchdog returns the Client's scheduler of extensions.
func (c *Client) watchdog() *scheduler {
	c.init.Do(c.setup)
	return c.scheduler
}

// alarms returns the Client's timer of safe deadlines.
func (c *Client) alarms() *alarms {
	c.init.Do(c.setup)
	return c.deadlines
}

// rooms returns the Client's waiting rooms.
func (c *Client) rooms() *waitRooms {
	c.init.Do(c.setup)
	return c.waiting
}

// setup creates the watchdog and waiting rooms on first use, whatever
// constructor made the Client, and checks its default options once, for
// the calls that bring none of their own.
func (c *Client) setup() {
	c.scheduler = newScheduler(c.store)
	c.deadlines = newAlarms()
	c.waiting = newWaitRooms(c.notify)
	if c.opts.ttlArg == nil {
		c.opts.ttlArg = c.opts.ttl.Milliseconds()
	}
	if c.defaultsErr = c.opts.validate(); c.defaultsErr == nil {
		c.defaultsErr = c.store.check(&c.opts)
	}
}

// New returns a Client on rdb; opts set the defaults of every call. New does
// not touch the network and cannot fail: bad arguments (a nil client, an
// invalid option) are reported, with ErrInvalidArgument, by every call made
// on the returned Client.
func New(rdb redis.UniversalClient, opts ...Option) *Client {
	store := singleStore{rdb: rdb, scripted: new(atomic.Bool)}
	c := &Client{store: store, opts: defaultOptions(), publish: "PUBLISH"}
	if !isNilClient(rdb) {
		c.notify = rdb
		c.publish = store.publishCommand()
	}
	if isNilClient(rdb) {
		c.opts.invalid(invalidf("nil redis client"))
	}
	applyOptions(&c.opts, opts)
	if err := c.opts.validate(); err != nil {
		c.opts.invalid(err)
	}
	c.opts.ttlArg = c.opts.ttl.Milliseconds()
	return c
}

func isNilClient(rdb redis.UniversalClient) bool {
	switch r := rdb.(type) {
	case nil:
		return true
	case *redis.Client:
		return r == nil
	case *redis.ClusterClient:
		return r == nil
	case *redis.Ring:
		return r == nil
	}
	return false
}

func applyOptions(o *options, opts []Option) {
	for _, opt := range opts {
		if opt == nil {
			o.invalid(invalidf("nil Option"))
			continue
		}
		opt.apply(o)
	}
}

// resolve returns the client's defaults overridden by one call's options.
//
// Without options of its own a call shares the Client's defaults, which
// nothing writes after setup: the locks it takes point at them.
func (c *Client) resolve(opts []Option) (*options, error) {
	if len(opts) == 0 {
		// The common call: the defaults, checked once.
		c.init.Do(c.setup)
		return &c.opts, c.defaultsErr
	}
	o := new(options)
	*o = c.opts
	applyOptions(o, opts)
	if err := o.validate(); err != nil {
		return o, err
	}
	if o.ttl != c.opts.ttl || o.ttlArg == nil {
		o.ttlArg = o.ttl.Milliseconds()
	}
	return o, c.store.check(o)
}

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

// hashTag returns the part of key that Redis Cluster hashes when it has a
// non-empty {tag}, or "" when it has none.
func hashTag(key string) string {
	for i := 0; i < len(key); i++ {
		if key[i] == '{' {
			for j := i + 1; j < len(key); j++ {
				if key[j] == '}' {
					return key[i+1 : j]
				}
			}
			return ""
		}
	}
	return ""
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

func (c *Client) observeAcquire(o *options, name string, start time.Time, attempts int, fence int64, err error) {
	if o.observer == nil {
		return
	}
	o.observer.ObserveAcquire(AcquireEvent{
		Name: name, Acquired: err == nil, Wait: time.Since(start),
		Attempts: attempts, Fence: fence, Err: err,
	})
}

// RunWithLock acquires the lock called name, runs fn while holding it, and
// releases it.
//
// fn's context is derived from ctx and is also cancelled when the lock is
// lost, with the *LostError as its cause; FenceFromContext on it returns the
// fencing token. The release always happens, also when fn panics (the panic
// then continues) and when ctx was cancelled: it runs on a context detached
// from ctx's cancellation, bounded by ReleaseTimeout.
//
// RunWithLock returns fn's error. If the lock was lost while fn ran (or
// Release found it no longer ours), the error also matches ErrLockLost and
// carries the *LostError. When fn did not run it returns Acquire's error:
// ErrNotAcquired when someone else holds the lock, a wrapped Redis error when
// Redis could not be reached (unless WithFailOpen is set, in which case fn
// runs without a lock), ErrInvalidArgument for bad input, including a nil fn.
// A failed release after fn is logged at Warn, not returned: fn did run,
// and the lock expires after its TTL.
func (c *Client) RunWithLock(ctx context.Context, name string, fn func(ctx context.Context) error, opts ...Option) error {
	if fn == nil {
		return invalidf("nil fn for lock %q", name)
	}
	o, err := c.resolve(opts)
	if err != nil {
		return err
	}
	l, err := c.acquire(ctx, name, o)
	if err != nil {
		if o.failOpen && ctx != nil && ctx.Err() == nil && isUnreachable(err) {
			o.log().Warn("redislock: redis unreachable, running WITHOUT the lock (fail open)",
				"name", name, "error", err)
			if o.observer != nil {
				o.observer.ObserveFailOpen(FailOpenEvent{Name: name, Err: err})
			}
			return fn(withFence(ctx, 0))
		}
		return err
	}
	return l.run(ctx, fn)
}

// isUnreachable tells a Redis that could not be reached or could not serve
// (fail open may run without it) from every other error: the lock being
// held, bad input, and replies such as WRONGTYPE or NOPERM, which say Redis
// answered and refused.
func isUnreachable(err error) bool {
	if errors.Is(err, ErrNotAcquired) || errors.Is(err, ErrInvalidArgument) {
		return false
	}
	var reply redis.Error
	if errors.As(err, &reply) {
		// Not TRYAGAIN: a cluster migrating the lock's slot is there and
		// will answer again; running without the lock then is not what
		// fail open is for.
		for _, prefix := range []string{"LOADING", "MASTERDOWN", "CLUSTERDOWN", "BUSY"} {
			if redis.HasErrorPrefix(err, prefix) {
				return true
			}
		}
		return false
	}
	return true
}

func (l *Lock) run(ctx context.Context, fn func(ctx context.Context) error) (err error) {
	runCtx, cancel := context.WithCancelCause(withFence(ctx, l.fence))
	lockCtx := l.Context()
	stopForwarding := context.AfterFunc(lockCtx, func() { cancel(context.Cause(lockCtx)) })
	defer func() {
		stopForwarding()
		cancel(nil)
		var lost *LostError
		errors.As(context.Cause(lockCtx), &lost)

		releaseCtx, cancelRelease := context.WithTimeout(context.WithoutCancel(ctx), ReleaseTimeout)
		foundLost, releaseErr := l.release(releaseCtx)
		cancelRelease()
		switch {
		case lost != nil:
		case foundLost != nil:
			lost = foundLost
		case releaseErr != nil:
			l.opts.log().Warn("redislock: release after the critical section failed; the lock expires after its TTL",
				"name", l.name, "error", releaseErr)
		}
		if lost != nil {
			err = errors.Join(lost, err)
		}
	}()
	return fn(runCtx)
}

// Lock is a held lock. It is safe for concurrent use, is not tied to the
// goroutine that acquired it, and must not be copied. Release it when done.
type Lock struct {
	client     *Client
	opts       *options // never written: may be the Client's defaults
	name       string
	ref        lockRef // key, token and prepared commands
	fence      int64
	acquiredAt time.Time

	// extending serialises extensions (watchdog and Extend), so that the
	// last confirmed one is also the last one Redis executed.
	extending chan struct{}

	mu            sync.Mutex
	ttl           time.Duration // current lease; Extend may change it
	interval      time.Duration // current watchdog interval
	safeDeadline  time.Time     // monotonic; the lease cannot have ended before it
	deadlineAlarm alarm         // rings at safeDeadline (Client.alarms)
	maxHoldTimer  *time.Timer
	lastErr       error // the last extension error, for an Unreachable loss
	released      bool
	// ended is what ended the hold (a *LostError or ErrReleased), set
	// before the loss is logged and observed and the context cancelled,
	// so that whoever sees the context done also finds the log line and
	// the metric.
	ended error
	// The lock's context is made on first use (most holders never ask
	// for it): parent gives its values; doneCause, once set, is the cause
	// it is (or will be made) cancelled with.
	parent    context.Context
	ctx       context.Context
	cancel    context.CancelCauseFunc
	doneCause error

	watch watchState // guarded by client.watchdog.mu
	room  *waitRoom  // this Client's waiters for the lock; handed on when the hold ends
}

// endHold hands the turn to this Client's next waiter, once: on release or
// on loss, whichever comes first.
func (l *Lock) endHold() {
	if room := l.takeRoom(); room != nil {
		l.client.rooms().leave(room)
	}
}

// takeRoom takes this Client's waiters for the lock (nil, once taken): the
// caller hands the turn on.
func (l *Lock) takeRoom() *waitRoom {
	l.mu.Lock()
	defer l.mu.Unlock()
	room := l.room
	l.room = nil
	return room
}

// start makes l the held lock, acquired with fence by a command sent at
// sent: the safe-deadline and max-hold timers and the watchdog start.
func (l *Lock) start(ctx context.Context, fence int64, sent time.Time, room *waitRoom) {
	o := l.opts
	l.fence, l.room, l.parent = fence, room, ctx
	l.acquiredAt, l.watch = sent, watchState{index: -1}
	l.extending = make(chan struct{}, 1)
	l.ttl, l.interval, l.safeDeadline = o.ttl, o.interval(), sent.Add(o.ttl-drift(o.ttl))
	l.mu.Lock()
	defer l.mu.Unlock()
	l.deadlineAlarm = alarm{lock: l, index: -1}
	l.client.alarms().set(&l.deadlineAlarm, l.safeDeadline)
	if o.maxHold > 0 {
		l.maxHoldTimer = time.AfterFunc(time.Until(sent.Add(o.maxHold)), l.onMaxHold)
	}
	if o.watchdog {
		l.client.watchdog().schedule(l, sent.Add(l.interval), l.interval)
	} else {
		l.watch.unwatched = true
	}
}

// drift is the allowance for clock drift between us and Redis over one
// lease: 1% of the TTL plus 2ms, the figure the Redlock description uses.
func drift(ttl time.Duration) time.Duration { return ttl/100 + 2*time.Millisecond }

// Name returns the name given to Acquire.
func (l *Lock) Name() string { return l.name }

// Key returns the Redis key that holds the token.
func (l *Lock) Key() string { return l.ref.key }

// Token returns the random token that identifies this acquisition. Treat it
// as a secret: whoever knows it can release the lock.
func (l *Lock) Token() string { return l.ref.token }

// Fence returns the fencing token taken with the lock, or 0 when the lock
// was acquired without WithFencing.
func (l *Lock) Fence() int64 { return l.fence }

// Context returns a context that carries the values of the context given to
// Acquire, but not its cancellation, and is cancelled when the hold ends:
// with a *LostError as its cause (see context.Cause) when the lock is lost,
// and with ErrReleased when it is released. FenceFromContext works on it.
func (l *Lock) Context() context.Context {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ctx == nil {
		// The lock's context keeps the acquire context's values but not
		// its cancellation: a short wait timeout must not end the hold.
		l.ctx, l.cancel = context.WithCancelCause(withFence(context.WithoutCancel(l.parent), l.fence))
		if l.doneCause != nil {
			l.cancel(l.doneCause)
		}
	}
	return l.ctx
}

// cancelLocked cancels the lock's context (now, or when it is made) with
// cause, unless it was cancelled before: the first cause stays.
func (l *Lock) cancelLocked(cause error) {
	if l.doneCause == nil {
		l.doneCause = cause
	}
	if l.cancel != nil {
		l.cancel(l.doneCause)
	}
}

// TTL returns the lock's remaining lease on the server. It returns
// ErrNotHeld when the lock is no longer ours (nothing is sent if it was
// released), or the Redis error.
func (l *Lock) TTL(ctx context.Context) (time.Duration, error) {
	if ctx == nil {
		return 0, invalidf("nil context")
	}
	if err := l.endedFor(ctx); err != nil {
		return 0, err
	}
	reply, err := l.client.store.pttl(ctx, l.ref.key, l.ref.token)
	switch {
	case err != nil:
		return 0, fmt.Errorf("redislock: TTL of %q: %w", l.name, err)
	case reply == -2:
		return 0, fmt.Errorf("%w: %q: key is gone", ErrNotHeld, l.name)
	case reply == -3:
		return 0, fmt.Errorf("%w: %q: held by another holder", ErrNotHeld, l.name)
	case reply == -1:
		return 0, fmt.Errorf("redislock: TTL of %q: the key has no expiry (someone ran PERSIST on it)", l.name)
	case reply < 0 || reply > int64(math.MaxInt64/time.Millisecond):
		return 0, fmt.Errorf("redislock: TTL of %q: unexpected reply %d from the pttl script", l.name, reply)
	}
	return time.Duration(reply) * time.Millisecond, nil
}

// notHeld returns ErrNotHeld, wrapped with the reason, once the hold has
// ended (released or lost), and nil before.
// endedFor is notHeld for a caller: once it reports the hold ended, the
// lock's context is done too. (A loss is logged and observed before the
// context is cancelled, so there is a moment when it is not yet; waiting
// for it is bounded by ctx.)
func (l *Lock) endedFor(ctx context.Context) error {
	err := l.notHeld()
	if err != nil {
		select {
		case <-l.Context().Done():
		case <-ctx.Done():
		}
	}
	return err
}

func (l *Lock) notHeld() error {
	l.mu.Lock()
	cause := l.ended
	l.mu.Unlock()
	if cause == nil {
		return nil
	}
	if errors.Is(cause, ErrReleased) {
		return fmt.Errorf("%w: %q was released", ErrNotHeld, l.name)
	}
	return errors.Join(fmt.Errorf("%w: %q", ErrNotHeld, l.name), cause)
}

// Extend resets the lock's lease to ttl (at least 1ms) from now, and makes
// ttl the lease that later watchdog extensions renew (their interval becomes
// ttl/3, unless WithExtendInterval set a shorter one). It waits for an
// extension by the watchdog that is under way.
//
// It returns ErrNotHeld when the lock is no longer ours (then the lock's
// context is cancelled with the loss, if it was not already), or the Redis
// error, which leaves the lock as it was.
func (l *Lock) Extend(ctx context.Context, ttl time.Duration) error {
	if ctx == nil {
		return invalidf("nil context")
	}
	if ttl < minTTL {
		return invalidf("Extend TTL %v is below the 1ms minimum", ttl)
	}
	ttl = ttl.Truncate(time.Millisecond)
	if err := l.endedFor(ctx); err != nil {
		return err
	}
	select {
	case l.extending <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-l.extending }()
	if err := l.endedFor(ctx); err != nil { // released or lost while we waited
		return err
	}
	err := l.extendOnce(ctx, ttl, false)
	if err == nil {
		l.mu.Lock()
		l.ttl = ttl
		if l.opts.extendInterval > 0 && l.opts.extendInterval < ttl {
			l.interval = l.opts.extendInterval
		} else {
			l.interval = ttl / 3
		}
		interval := l.interval
		l.mu.Unlock()
		if l.opts.watchdog {
			// The next extension is due an interval from now, not at
			// the old schedule: a shorter lease would run out first.
			l.client.watchdog().schedule(l, time.Now().Add(interval), interval)
		}
	}
	return err
}

// extendOnce sends one extension and records its outcome. The caller
// holds l.extending.
func (l *Lock) extendOnce(ctx context.Context, ttl time.Duration, byWatchdog bool) error {
	sent := time.Now()
	reply, err := l.client.store.extend(ctx, l.opts, l.ref.key, l.ref.token, ttl)
	return l.recordExtension(sent, time.Since(sent), ttl, reply, err, byWatchdog)
}

// recordExtension records the outcome of an extension sent at sent: a
// confirmed one moves the safe deadline; a "not ours" reply loses the lock;
// an error is kept for the Unreachable loss it may turn into.
func (l *Lock) recordExtension(sent time.Time, latency, ttl time.Duration, reply int64, err error, byWatchdog bool) error {
	switch {
	case err != nil:
		err = fmt.Errorf("redislock: extend %q: %w", l.name, err)
		l.mu.Lock()
		// Keep what Redis said over our own deadline cutting a call short.
		if l.lastErr == nil || !errors.Is(err, context.DeadlineExceeded) {
			l.lastErr = err
		}
		l.mu.Unlock()
	case reply == replyDone:
		l.confirm(sent, ttl)
	default:
		lost := l.reportLoss(reasonFor(reply), nil)
		err = fmt.Errorf("%w: %q: %s", ErrNotHeld, l.name, lost.Reason)
	}
	if l.opts.observer != nil {
		l.opts.observer.ObserveExtend(ExtendEvent{Name: l.name, Latency: latency, Watchdog: byWatchdog, Err: err})
	}
	return err
}

// confirm moves the safe deadline after an extension sent at sent was
// confirmed: the server ran it after sent, so the lease lasts at least
// until sent+ttl by its clock, which ours may lag by the drift.
func (l *Lock) confirm(sent time.Time, ttl time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended != nil {
		return
	}
	l.safeDeadline = sent.Add(ttl - drift(ttl))
	l.lastErr = nil
	l.client.alarms().set(&l.deadlineAlarm, l.safeDeadline)
}

// onSafeDeadline runs when the lock's alarm rings (on a goroutine of its
// own, see alarms), independent of any Redis call under way, so that a
// stalled connection cannot delay the loss signal.
func (l *Lock) onSafeDeadline() {
	l.mu.Lock()
	if l.ended != nil {
		l.mu.Unlock()
		return
	}
	if left := time.Until(l.safeDeadline); left > 0 {
		// An extension was confirmed after the timer fired.
		l.client.alarms().set(&l.deadlineAlarm, l.safeDeadline)
		l.mu.Unlock()
		return
	}
	reason, lastErr := Unreachable, l.lastErr
	if !l.opts.watchdog {
		reason = Expired
	}
	lost := l.loseLocked(reason, lastErr)
	l.mu.Unlock()
	l.finishLoss(lost)
}

// onMaxHold ends the hold at its maximum, unless it ended first (a Release
// racing the timer is a release, not a loss).
func (l *Lock) onMaxHold() {
	l.mu.Lock()
	if l.ended != nil {
		l.mu.Unlock()
		return
	}
	lost := l.loseLocked(MaxHoldReached, nil)
	l.mu.Unlock()
	l.finishLoss(lost)
}

// reportLoss ends the hold with reason unless it has already ended, and
// returns the loss that ended it. A loss found by the release itself (the
// hold was ended by Release) is announced but changes nothing else.
func (l *Lock) reportLoss(reason LostReason, cause error) *LostError {
	l.mu.Lock()
	if l.ended != nil {
		earlier, _ := l.ended.(*LostError)
		l.mu.Unlock()
		if earlier == nil {
			lost := &LostError{Name: l.name, Reason: reason, HeldFor: time.Since(l.acquiredAt), Err: cause}
			l.announceLoss(lost)
			return lost
		}
		return earlier
	}
	lost := l.loseLocked(reason, cause)
	l.mu.Unlock()
	l.finishLoss(lost)
	return lost
}

// loseLocked marks the hold as lost; finishLoss, called without l.mu,
// then announces it and cancels the context.
func (l *Lock) loseLocked(reason LostReason, cause error) *LostError {
	lost := &LostError{Name: l.name, Reason: reason, HeldFor: time.Since(l.acquiredAt), Err: cause}
	l.ended = lost
	l.stopTimersLocked()
	return lost
}

func (l *Lock) finishLoss(lost *LostError) {
	l.client.watchdog().unwatch(l)
	l.announceLoss(lost)
	l.endHold()
	l.mu.Lock()
	l.cancelLocked(lost)
	l.mu.Unlock()
}

// announceLoss logs the loss at Error and reports it to the Observer.
func (l *Lock) announceLoss(lost *LostError) {
	attrs := []any{"name", l.name, "reason", lost.Reason.String(), "held_for", lost.HeldFor}
	if lost.Err != nil {
		attrs = append(attrs, "error", lost.Err)
	}
	l.opts.log().Error("redislock: lock lost", attrs...)
	if l.opts.observer != nil {
		l.opts.observer.ObserveLost(LostEvent{Name: l.name, Reason: lost.Reason, HeldFor: lost.HeldFor})
	}
}

func (l *Lock) stopTimersLocked() {
	l.client.alarms().cancel(&l.deadlineAlarm)
	if l.maxHoldTimer != nil {
		l.maxHoldTimer.Stop()
	}
}

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
