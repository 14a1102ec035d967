package redislock

import (
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
	o.ttlArg = o.ttl.Milliseconds()
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
	done := make(chan struct{})
	go func() {
		b.wg.Wait()
		close(done)
	}()
	return done
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

// resolve returns the defaults overridden by a call's options (shared without).
func (c *Client) resolve(opts []Option) (*options, error) {
	if len(opts) == 0 {
		return &c.opts, c.defaultsErr
	}
	o := new(options)
	*o = c.opts
	applyOptions(o, opts)
	if err := o.validate(); err != nil {
		return o, err
	}
	if o.ttl != c.opts.ttl {
		o.ttlArg = o.ttl.Milliseconds()
	}
	return o, c.store.check(o)
}
