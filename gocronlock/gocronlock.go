// Package gocronlock plugs redislock into github.com/go-co-op/gocron/v2 as
// its distributed [gocron.Locker], so that a job scheduled on every pod of a
// service runs on one pod per tick.
//
// gocron calls [Locker.Lock] with the job's name before each run and skips
// the run when it fails; after the run it calls Unlock on the returned
// lock. Here Lock acquires a redislock lock called prefix + job name, with
// the watchdog always on (a run of any length keeps its lease; a pod that
// dies frees the job within the TTL), and Unlock releases it.
//
// A plain lock is not enough for "once per tick": gocron gives the locker
// the job's name, not the scheduled time, and the pods fire a few
// milliseconds apart. A fast run on the first pod would release the lock
// before a later pod tries, and that pod would run the same tick again
// (gocron issue 841). So each run also claims the job for a minimum hold
// ([WithMinHold], default [DefaultMinHold]): a marker key, set right after
// the lock is acquired, that outlives the release. A pod that acquires the
// lock while the marker exists releases it and skips. The minimum hold must
// be longer than the spread of the pods' firing times (clock skew, GC,
// load) and shorter than the job's interval minus that spread; about half
// the interval is the safest choice.
//
// gocron does not let a locker cancel the running job: the job's context is
// gocron's, not the lock's. A long job that must stop when its lock is lost
// reads the run's lock context with [Locker.Context] and watches it.
//
// A [Locker] is safe for concurrent use by any number of schedulers.
package gocronlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redislock/redislock"
)

// DefaultMinHold is the minimum hold of a run's claim when WithMinHold is not
// given: it suits jobs every second or slower whose pods fire less than half
// a second apart.
const DefaultMinHold = 500 * time.Millisecond

// markerSuffix is appended to the lock key to make the key of the
// minimum-hold marker; the lock's hash tag keeps both in one cluster slot.
const markerSuffix = ":ran"

// An Option configures a Locker.
type Option interface{ apply(*options) }

type optionFunc func(*options)

func (f optionFunc) apply(o *options) { f(o) }

type options struct {
	namePrefix string
	minHold    time.Duration
	lockOpts   []redislock.Option
	err        error
}

// WithNamePrefix puts p before the job name to make the lock name: the lock
// of job "report" with prefix "billing:" is "billing:report", in the Redis
// key "lock:{billing:report}" with the client's default key prefix. Default
// "": the lock name is the job name. Use it when several services share one
// Redis and could have jobs of the same name.
func WithNamePrefix(p string) Option {
	return optionFunc(func(o *options) { o.namePrefix = p })
}

// WithMinHold sets how long a run claims its job from the moment its lock
// is acquired, even when the run ends sooner: another pod's attempt within
// that time skips, so a tick runs once however fast the job is. Default
// DefaultMinHold (500ms). It must be longer than the spread of the pods'
// firing times and shorter than the job's interval minus that spread;
// choose about half the interval. 0 turns the claim off: the lock then only
// keeps runs from overlapping, and a fast job can run more than once per
// tick. Negative values are an error.
func WithMinHold(d time.Duration) Option {
	return optionFunc(func(o *options) {
		if d < 0 {
			o.err = errors.Join(o.err, fmt.Errorf("%w: negative minimum hold %v", redislock.ErrInvalidArgument, d))
			return
		}
		o.minHold = d
	})
}

// WithLockOptions sets the redislock options of the Locker's locks: WithTTL
// (the lease, and so how long a pod that died mid-run blocks the job;
// default redislock.DefaultTTL, 30s), WithFencing, WithObserver,
// WithLogger, WithKeyPrefix, WithExtendInterval, WithMaxHold. WithWatchdog(false)
// is overridden: the watchdog is always on, since a run's length is not
// known. WithRetry is allowed but rarely wanted: a pod should skip a tick
// another pod runs. WithFailOpen is an error (a locker cannot run a job
// without a lock; gocron skips the run when Lock fails).
func WithLockOptions(opts ...redislock.Option) Option {
	return optionFunc(func(o *options) { o.lockOpts = append(o.lockOpts, opts...) })
}

// Locker is a gocron.Locker on redislock. Create it with New; it is safe for
// concurrent use and may be shared by several schedulers. It must not be
// copied.
type Locker struct {
	rdb      redis.UniversalClient
	client   *redislock.Client
	opts     options
	lockOpts []redislock.Option

	mu   sync.Mutex
	held map[string]*redislock.Lock // by job name: this process's running run
}

var _ gocron.Locker = (*Locker)(nil)

// New returns a Locker that takes its locks on rdb. It checks rdb and the
// options without touching the network, and returns an error wrapping
// redislock.ErrInvalidArgument when rdb is nil or an option is invalid.
func New(rdb redis.UniversalClient, opts ...Option) (*Locker, error) {
	o := options{minHold: DefaultMinHold}
	for _, opt := range opts {
		if opt == nil {
			o.err = errors.Join(o.err, fmt.Errorf("%w: gocronlock: nil Option", redislock.ErrInvalidArgument))
			continue
		}
		opt.apply(&o)
	}
	if o.err != nil {
		return nil, fmt.Errorf("gocronlock: %w", o.err)
	}
	lockOpts := append(append([]redislock.Option(nil), o.lockOpts...), redislock.WithWatchdog(true))
	client := redislock.New(rdb)
	// Acquire checks the Redis client and the options before anything else
	// and sends nothing on a context that is already done: a dry run.
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := client.Acquire(done, o.namePrefix+"probe", lockOpts...); errors.Is(err, redislock.ErrInvalidArgument) {
		return nil, fmt.Errorf("gocronlock: %w", err)
	}
	return &Locker{rdb: rdb, client: client, opts: o, lockOpts: lockOpts, held: map[string]*redislock.Lock{}}, nil
}

// Lock acquires the lock of the job called key, for one run. gocron calls
// it before each run with the job's name, and skips the run when it returns
// an error.
//
// It makes one attempt (unless WithLockOptions set a retry). When the lock
// is held by another run, or a run acquired it less than the minimum hold
// ago, it returns an error matching redislock.ErrNotAcquired; a Redis error
// (wrapped) when Redis could not be reached; redislock.ErrInvalidArgument
// for a nil ctx or an unusable lock name. A failed Lock leaves nothing held.
//
// ctx bounds the acquisition only; the lock is held until Unlock, or until
// it is lost (see Context).
func (l *Locker) Lock(ctx context.Context, key string) (gocron.Lock, error) {
	if ctx == nil {
		return nil, fmt.Errorf("%w: gocronlock: nil context", redislock.ErrInvalidArgument)
	}
	name := l.opts.namePrefix + key
	lock, err := l.client.Acquire(ctx, name, l.lockOpts...)
	if err != nil {
		return nil, err
	}
	if l.opts.minHold > 0 {
		claimed, err := l.rdb.SetNX(ctx, lock.Key()+markerSuffix, "1", l.opts.minHold).Result()
		if err != nil || !claimed {
			// Release on a context of its own: ctx may be what failed.
			releaseCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), redislock.ReleaseTimeout)
			_ = lock.Release(releaseCtx)
			cancel()
			if err != nil {
				return nil, fmt.Errorf("gocronlock: claiming %q for the minimum hold: %w", name, err)
			}
			return nil, fmt.Errorf("%w: %q already ran less than %v ago (minimum hold): this tick is done",
				redislock.ErrNotAcquired, name, l.opts.minHold)
		}
	}
	l.mu.Lock()
	l.held[key] = lock
	l.mu.Unlock()
	return &runLock{locker: l, key: key, lock: lock}, nil
}

// Context returns the lock context of the run of job key that holds its
// lock in this process, and true; or nil and false when no run of key holds
// it here. The context is cancelled when the run's lock is lost, with a
// *redislock.LostError as its cause, and after Unlock with
// redislock.ErrReleased. It carries the values of the context gocron gave
// Lock (the job's context), and redislock.FenceFromContext works on it when
// the locks are fenced.
//
// gocron gives a job its own context, which a locker cannot cancel. A job
// that must stop when its lock is lost calls Context with its own name at
// its start and stops when either context is done.
func (l *Locker) Context(key string) (context.Context, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	lock, ok := l.held[key]
	if !ok {
		return nil, false
	}
	return lock.Context(), true
}

// runLock is the lock of one run, handed to gocron.
type runLock struct {
	locker *Locker
	key    string
	lock   *redislock.Lock
}

// Unlock releases the run's lock. The minimum-hold marker is left to expire
// on its own. It returns nil when released, an error matching
// redislock.ErrNotHeld when the lock was already lost (or released), or the
// Redis error; gocron ignores it. The release is bounded by ctx (gocron
// passes the job's context) and by redislock.ReleaseTimeout; it still runs
// when ctx was cancelled, so that a scheduler shutting down frees its locks
// at once rather than after the TTL.
func (r *runLock) Unlock(ctx context.Context) error {
	r.locker.mu.Lock()
	if r.locker.held[r.key] == r.lock {
		delete(r.locker.held, r.key)
	}
	r.locker.mu.Unlock()
	if ctx == nil {
		ctx = context.Background()
	}
	releaseCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), redislock.ReleaseTimeout)
	defer cancel()
	return r.lock.Release(releaseCtx)
}
