package gocronlock

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/go-co-op/gocron/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redislock/redislock"
)

// ErrNotLeader is what Elector.IsLeader returns (wrapped, with the reason)
// while this process does not lead: gocron then skips the run here.
var ErrNotLeader = errors.New("gocronlock: not the leader")

// Elector is a [gocron.Elector] backed by redislock's [redislock.Client.Elect]:
// every pod runs its scheduler with gocron.WithDistributedElector(elector)
// and the same election name, and only the leader's scheduler runs the
// jobs. A leader that stops (Stop, or a Client.Close) hands leadership over
// within a round trip or two; one that dies, freezes or loses Redis is
// replaced once its lease runs out (the TTL, default
// redislock.DefaultTTL; set it with redislock.WithTTL). Unlike a [Locker],
// an Elector decides who runs the jobs, not who runs one tick: a job runs
// on the leader at every tick, however short.
//
// Create it with NewElector, then Start it; Stop it on shutdown. It is safe
// for concurrent use and must not be copied.
type Elector struct {
	client *redislock.Client
	name   string
	opts   []redislock.Option

	mu      sync.Mutex
	term    *redislock.Lock // leadership held now; nil when not leading
	stop    context.CancelFunc
	stopped chan struct{} // closed when the campaign has ended
	ended   error         // why the campaign ended, once it has
}

var _ gocron.Elector = (*Elector)(nil)

// NewElector returns an Elector for the election called name on rdb, with
// opts for its lock (WithTTL, WithKeyPrefix, WithLogger, WithObserver,
// WithFencing…; WithRetry, WithFailOpen and WithWatchdog(false) do not
// apply to an election). It checks its arguments without touching the
// network and returns an error wrapping redislock.ErrInvalidArgument for a
// nil rdb, a bad name or an invalid option.
func NewElector(rdb redis.UniversalClient, name string, opts ...redislock.Option) (*Elector, error) {
	client := redislock.New(rdb)
	// Elect checks everything before it sends anything, and sends nothing
	// on a context that is already done: a dry run.
	done, cancel := context.WithCancel(context.Background())
	cancel()
	noop := func(context.Context) error { return nil }
	if err := client.Elect(done, name, noop, opts...); errors.Is(err, redislock.ErrInvalidArgument) {
		return nil, fmt.Errorf("gocronlock: %w", err)
	}
	return &Elector{client: client, name: name, opts: opts}, nil
}

// Start begins campaigning, on a goroutine of its own, until ctx ends or
// Stop is called; the leader's terms get ctx's values. It returns at once,
// with an error if the Elector was started before (an Elector campaigns
// once: make a new one to campaign again) or ctx is nil.
func (e *Elector) Start(ctx context.Context) error {
	if ctx == nil {
		return fmt.Errorf("%w: gocronlock: nil context", redislock.ErrInvalidArgument)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopped != nil {
		return fmt.Errorf("gocronlock: elector %q started twice", e.name)
	}
	ctx, e.stop = context.WithCancel(ctx)
	e.stopped = make(chan struct{})
	go e.campaign(ctx)
	return nil
}

func (e *Elector) campaign(ctx context.Context) {
	err := e.client.Elect(ctx, e.name, e.lead, e.opts...)
	e.mu.Lock()
	e.ended = err
	e.mu.Unlock()
	close(e.stopped)
}

// lead holds the term until it ends: IsLeader reads it meanwhile.
func (e *Elector) lead(ctx context.Context) error {
	term, _ := redislock.LockFromContext(ctx)
	e.mu.Lock()
	e.term = term
	e.mu.Unlock()
	<-ctx.Done()
	e.mu.Lock()
	e.term = nil
	e.mu.Unlock()
	return ctx.Err()
}

// IsLeader returns nil while this process leads, and otherwise an error
// matching ErrNotLeader. gocron calls it before each run and skips the run
// on an error. It sends nothing: it reads the term's safe deadline from the
// clock at the call (see redislock.Lock.Valid), so a leader just back from
// a pause past its lease is not leader, even before its term's context
// ends.
func (e *Elector) IsLeader(context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case e.term != nil && e.term.Valid():
		return nil
	case e.stopped == nil:
		return fmt.Errorf("%w: elector %q not started", ErrNotLeader, e.name)
	}
	select {
	case <-e.stopped:
		return fmt.Errorf("%w: elector %q stopped: %w", ErrNotLeader, e.name, e.ended)
	default:
		return fmt.Errorf("%w: %q is led by another process", ErrNotLeader, e.name)
	}
}

// Stop ends the campaign and waits for it: a leader gives leadership up
// (one release, bounded by redislock.ReleaseTimeout), so that another
// process leads at once. It returns nil when the campaign ended by Stop
// (or by Start's ctx), and otherwise the error that had ended it before
// (a Redis answer such as WRONGTYPE on the lock key). Stopping an Elector
// never started does nothing; stopping twice returns the same.
func (e *Elector) Stop() error {
	e.mu.Lock()
	stop, stopped := e.stop, e.stopped
	e.mu.Unlock()
	if stop == nil {
		return nil
	}
	stop()
	<-stopped
	e.mu.Lock()
	defer e.mu.Unlock()
	if errors.Is(e.ended, context.Canceled) || errors.Is(e.ended, context.DeadlineExceeded) {
		return nil
	}
	return e.ended
}
