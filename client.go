package redislock

import (
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

func (c *Client) observeAcquire(o *options, name string, start time.Time, attempts int, fence int64, err error) {
	if o.observer == nil {
		return
	}
	o.observer.ObserveAcquire(AcquireEvent{
		Name: name, Acquired: err == nil, Wait: time.Since(start),
		Attempts: attempts, Fence: fence, Err: err,
	})
}
