package redislock

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Client takes locks on one Redis deployment (New) or on a majority of
// independent servers (NewQuorum). It is safe for concurrent use; create
// one per Redis client and share it. A zero Client (or a nil *Client) has
// no Redis client, and every method returns an error matching
// ErrInvalidArgument that says so.
//
// A Client needs no closing to be freed: with nothing held and nobody
// waiting it holds no goroutine, timer or connection. Close it on shutdown
// all the same: its locks are then released at once, so that another
// instance takes over without waiting for their TTL.
type Client struct {
	store       store
	opts        options               // the defaults; never written after the constructor
	notify      redis.UniversalClient // hears release announcements; nil: none
	publish     any                   // the release script's announcement command, boxed once
	defaultsErr error                 // what resolve reports for a call without options

	closing chan struct{} // closed by Close: waiting callers give up with ErrClosed
	closed  atomic.Bool
	calls   background // the acquiring calls under way, which Close waits for
	bg      background // the timer callbacks and goroutines of the watchdog, alarms and janitor

	serverChecked sync.Once // the first lock's look at the server (see checkServer)
	init          sync.Once
	scheduler     *scheduler
	deadlines     *alarms
	waiting       *waitRooms
	cleaner       *janitor
}

// newClient is the one constructor behind New and NewQuorum.
func newClient(st store, notify redis.UniversalClient, publish any, o options, closing chan struct{}) *Client {
	o.ttlArg, o.handoverArg = o.ttl.Milliseconds(), handoverArg(publish, o.ttl)
	c := &Client{store: st, opts: o, notify: notify, publish: publish, closing: closing}
	c.cleaner = newJanitor(st, &c.bg) // no timer until it has work
	if c.defaultsErr = c.opts.validate(); c.defaultsErr == nil {
		c.defaultsErr = st.check(&c.opts)
	}
	return c
}

// errNotFromNew is what every method of a zero or nil Client returns.
var errNotFromNew = invalidf("a zero-value Client has no Redis client: make one with redislock.New (or NewQuorum)")

// usable is the first check of every exported method.
func (c *Client) usable() error {
	if c == nil || c.store == nil {
		return errNotFromNew
	}
	return nil
}

func (c *Client) watchdog() *scheduler {
	c.init.Do(c.setup)
	return c.scheduler
}

func (c *Client) alarms() *alarms {
	c.init.Do(c.setup)
	return c.deadlines
}

func (c *Client) rooms() *waitRooms {
	c.init.Do(c.setup)
	return c.waiting
}

// pausedAcross returns how long this process did not run across at, as
// its timers saw it (see pauses), when that is at least pauseFloor and a
// quarter of the lease ttl: a lease lost at at then ran out while the
// process could not extend it, and Redis is not to blame. (A loss to a pause
// needs the watchdog to be late by about 2/3 of the TTL; a busy machine's
// timers are late by milliseconds, one starved for a second did not run.)
func (c *Client) pausedAcross(at time.Time, ttl time.Duration) time.Duration {
	c.watchdog().notePause(time.Now()) // the watchdog may not have fired since
	return c.bg.pauses.across(at, max(pauseFloor, ttl/4))
}

// setup creates the watchdog, alarms and waiting rooms on first use.
func (c *Client) setup() {
	c.scheduler = newScheduler(c.store, &c.bg)
	if watchable(c.notify) {
		c.scheduler.watchRDB, c.scheduler.watchOpts = c.notify, &c.opts
	}
	c.deadlines = newAlarms(&c.bg)
	c.waiting = newWaitRooms(c.notify, c.deadlines)
}

// New returns a Client on rdb; opts set the defaults of every call. New does
// not touch the network and cannot fail: bad arguments (a nil client, an
// invalid option) are reported, with ErrInvalidArgument, by every call made
// on the returned Client.
func New(rdb redis.UniversalClient, opts ...Option) *Client {
	o := defaultOptions()
	if isNilClient(rdb) {
		o.invalid(invalidf("nil redis client"))
		applyOptions(&o, opts)
		return newClient(singleStore{}, nil, "PUBLISH", o, make(chan struct{}))
	}
	applyOptions(&o, opts)
	closing := make(chan struct{})
	store := singleStore{rdb: rdb, scripted: new(atomic.Bool), batch: newBatcher(rdb), closing: closing, slots: newSlotMap(rdb)}
	c := newClient(store, rdb, store.publishCommand(), o, closing)
	store.cleaner = c.cleaner
	c.store = store
	return c
}

// background counts work that Close waits for; once closed, nothing new starts.
type background struct {
	mu     sync.RWMutex // read-locked by enter: Acquire calls do not queue on it
	closed bool
	wg     sync.WaitGroup
	pauses pauses // what the timers run here saw of the process not running
}

func (b *background) enter() bool {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.closed {
		return false
	}
	b.wg.Add(1)
	return true
}

func (b *background) exit() { b.wg.Done() }

func (b *background) close() <-chan struct{} {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	return waited(&b.wg)
}

// waited returns a channel closed once wg's count is zero.
func waited(wg *sync.WaitGroup) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	return done
}

func isNilClient(rdb redis.UniversalClient) bool {
	switch r := rdb.(type) {
	case *redis.Client:
		return r == nil
	case *redis.ClusterClient:
		return r == nil
	case *redis.Ring:
		return r == nil
	}
	return rdb == nil
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

// resolve returns the defaults overridden by a call's options (shared without).
func (c *Client) resolve(opts []Option) (*options, error) {
	if len(opts) == 0 {
		return &c.opts, c.defaultsErr
	}
	o := new(c.opts)
	applyOptions(o, opts)
	if err := o.validate(); err != nil {
		return o, err
	}
	if o.ttl != c.opts.ttl {
		o.ttlArg, o.handoverArg = o.ttl.Milliseconds(), handoverArg(c.publish, o.ttl)
	}
	return o, c.store.check(o)
}

// Close shuts the Client down. From the call on, the acquiring calls return
// an error matching ErrClosed, also to waiting callers. It waits for attempts
// under way, releases every lock the Client holds in one pipeline (one per
// node on a Cluster, at once) bounded by ctx (each lock's context cancelled
// first, cause ErrClosed) so that another instance can take each at once,
// and gives background give-backs one last try. It returns once nothing of the Client runs, or when ctx ends (with
// ctx's error); nil when every lock was released, else an error saying how
// many were not (they expire after their TTL). A second Close returns nil.
// It does not close the go-redis client.
func (c *Client) Close(ctx context.Context) error {
	if err := c.usable(); err != nil {
		return err
	}
	if ctx == nil {
		return invalidf("nil context")
	}
	if !c.closed.CompareAndSwap(false, true) {
		return nil
	}
	close(c.closing)
	// When ctx ends first, an attempt that succeeds from now on gives its
	// lock back (acquisition.succeed).
	err := closeWait(ctx, c.calls.close(), "Acquire calls under way")
	refs, terms := c.endHeld()
	watchDone := c.watchdog().close()
	c.alarms().close()
	c.store.stop()
	// The network part runs on a goroutine of its own: go-redis may not
	// honour ctx's deadline while it reads, and Close returns by that
	// deadline; what is left stops at the go-redis client's timeouts.
	released, swept := make(chan error, 1), make(chan struct{})
	go func() {
		err := c.releaseAll(ctx, refs)
		// Elect's term ends as Close releases it, not when its lead
		// returns (which may be before): announced for ObserveLeader now.
		for _, key := range terms {
			c.announceTerm(ctx, key, ReleaseTimeout)
		}
		released <- err
		// Attempts under way land first: the janitor's last try finds what they took.
		_ = closeWait(ctx, c.store.idle(), "attempts under way")
		c.cleaner.flush(ctx)
		c.rooms().close(ctx)
		close(swept)
	}()
	select {
	case e := <-released:
		err = join(err, e)
	case <-ctx.Done():
		return join(err, fmt.Errorf("redislock: close: %s not confirmed released (they expire after their TTL): %w",
			count(len(refs), "lock"), ctx.Err()))
	}
	if e := closeWait(ctx, swept, "commands under way"); e != nil {
		return join(err, e)
	}
	// Then the timers' goroutines and the restart watch.
	if e := closeWait(ctx, c.bg.close(), "the watchdog"); e != nil {
		return join(err, e)
	}
	return join(err, closeWait(ctx, watchDone, "the restart watch"))
}

// closeWait waits for done (nil: nothing to wait for) within ctx; when ctx
// ends first, it says what Close was waiting for.
func closeWait(ctx context.Context, done <-chan struct{}, what string) error {
	if done == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("redislock: close: waiting for %s: %w", what, ctx.Err())
	}
}

// endHeld ends every hold with ErrClosed now, and returns what is left to
// release: the locks no Release is sending, and the keys of Elect's terms
// among them.
func (c *Client) endHeld() (refs []*lockRef, terms []string) {
	for _, l := range c.alarms().held() {
		// (A hold lost before is claimed too: a Release after Close sends nothing.)
		if l.giveUp(fmt.Errorf("%w: lock %q released by Client.Close", ErrClosed, l.name), false) {
			refs = append(refs, &l.ref)
			if l.opts.campaign {
				terms = append(terms, l.ref.key)
			}
		}
	}
	return refs, terms
}

func (c *Client) releaseAll(ctx context.Context, refs []*lockRef) error {
	if len(refs) == 0 {
		return nil
	}
	start := time.Now()
	_, errs := c.store.abandon(ctx, refs)
	if failed := slices.DeleteFunc(errs, func(err error) bool { return err == nil }); len(failed) > 0 {
		return fmt.Errorf("redislock: close: %d of %d locks not released (they expire after their TTL) after %v: %w",
			len(failed), len(refs), time.Since(start).Round(time.Millisecond), failed[0])
	}
	return nil
}

// checkServer runs the check once per Client, with the first call's logger.
func (c *Client) checkServer(ctx context.Context, o *options) {
	c.serverChecked.Do(func() {
		sc, ok := c.store.(serverChecker)
		if !ok {
			return
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), serverCheckTimeout)
		defer cancel()
		maxmemory, policy, err := sc.evictionPolicy(ctx)
		logger := o.log()
		switch {
		case err != nil:
			logger.Debug("redislock: could not read the server's eviction policy", "error", err)
		case policy == "noeviction" || policy == "":
		case maxmemory == "0":
			logger.Debug("redislock: the server has no memory limit, so its eviction policy does not apply", "maxmemory_policy", policy)
		default:
			logger.Warn("redislock: Redis may evict lock keys under memory pressure: a lock can vanish while held, and a second holder take it while the first still believes it holds"+
				evictsCounters(policy)+"; set maxmemory-policy noeviction on servers that hold locks",
				"maxmemory_policy", policy, "maxmemory", maxmemory)
		}
	})
}

// leaveWait is the least a waiter that gives up waits for Client.leave:
// 0, the link's usual round trip decides (a var for tests).
var leaveWait time.Duration

// leave takes ref's place out of the lock's queue, and gives back a lock
// handed to it meanwhile (or one it took, see acquisition.giveBack), on a
// goroutine of its own (go-redis may not honour a deadline while it reads);
// the janitor retries a failure until until. The
// waiter waits for it as long as the link usually takes (the batcher's
// usualWait, its late rule) from when that goroutine runs (a busy CPU is
// no stalled link): on a healthy link the give-back has landed when the
// waiter returns, so no release can hand it the lock after it left, and
// none of its commands is still on a connection when its caller goes on
// (and, say, closes the go-redis client); on a stalled link it returns at
// once, and leaving is finished in the background. (A constant 250 ms made
// every waiter that gave up on a stalled link return that late.)
func (c *Client) leave(ref *lockRef, until time.Time) {
	if !c.bg.enter() {
		return // Client.Close swept what was left; the place lapses
	}
	running, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer c.bg.exit()
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), ReleaseTimeout)
		defer cancel()
		close(running)
		if _, errs := c.store.abandon(ctx, []*lockRef{ref}); errs[0] != nil {
			c.cleaner.add(ref, until)
		}
	}()
	wait := defaultMaxLate // a client that does not batch: the bound of a late send
	if s, ok := c.store.(singleStore); ok && s.batch != nil {
		wait = s.batch.usualWait(s.batch.lane(context.Background(), ref.key))
	}
	select {
	case <-running:
	case <-c.closing: // Close tells its waiters at once
		return
	}
	t := time.NewTimer(max(wait, leaveWait))
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	case <-c.closing:
	}
}
