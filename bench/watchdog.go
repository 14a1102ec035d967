package bench

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	bsm "github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis/rueidislock"

	"github.com/redislock/redislock"
)

// renewer is one library holding many locks and renewing them itself.
type renewer interface {
	// hold acquires name without waiting and keeps it renewed.
	hold(ctx context.Context, name string) (heldLock, error)
	// extensions returns the successful lease extensions so far, or -1
	// when the library does not say.
	extensions() int64
	close() error
}

// heldLock is one lock held by a renewer.
type heldLock struct {
	release func(context.Context) error
	lost    func() bool // whether the library has given the lock up
}

// watchdogLib names a renewing library.
type watchdogLib struct {
	name string
	open func(addr string, ttl time.Duration, counter *callCounter) (renewer, error)
}

// watchdogLibs returns the libraries compared holding many locks.
func watchdogLibs() []watchdogLib {
	return []watchdogLib{
		{"ours", openOursRenewer},
		{"rueidislock", openRueidisRenewer},
		{"bsm-by-hand", openBSMRenewer},
	}
}

// extendCounter is a redislock.Observer that counts confirmed extensions.
type extendCounter struct{ n atomic.Int64 }

func (c *extendCounter) ObserveAcquire(redislock.AcquireEvent) {}
func (c *extendCounter) ObserveExtend(e redislock.ExtendEvent) {
	if e.Err == nil {
		c.n.Add(1)
	}
}
func (c *extendCounter) ObserveLost(redislock.LostEvent)         {}
func (c *extendCounter) ObserveRelease(redislock.ReleaseEvent)   {}
func (c *extendCounter) ObserveFailOpen(redislock.FailOpenEvent) {}

type oursRenewer struct {
	rdb      *redis.Client
	locker   *redislock.Client
	observer *extendCounter
}

func openOursRenewer(addr string, ttl time.Duration, counter *callCounter) (renewer, error) {
	rdb := newGoRedis(addr, counter)
	observer := &extendCounter{}
	return &oursRenewer{rdb, redislock.New(rdb, redislock.WithTTL(ttl), redislock.WithObserver(observer)), observer}, nil
}

func (r *oursRenewer) hold(ctx context.Context, name string) (heldLock, error) {
	l, err := r.locker.Acquire(ctx, name)
	if err != nil {
		return heldLock{}, err
	}
	return heldLock{l.Release, func() bool { return l.Context().Err() != nil }}, nil
}

func (r *oursRenewer) extensions() int64 { return r.observer.n.Load() }
func (r *oursRenewer) close() error      { return r.rdb.Close() }

type rueidisRenewer struct{ locker rueidislock.Locker }

// openRueidisRenewer uses rueidislock's defaults but for the validity,
// which is the TTL (its ExtendInterval defaults to half of it).
func openRueidisRenewer(addr string, ttl time.Duration, counter *callCounter) (renewer, error) {
	locker, err := newRueidisLocker(addr, counter, rueidislock.LockerOption{KeyValidity: ttl})
	if err != nil {
		return nil, err
	}
	return rueidisRenewer{locker}, nil
}

func (r rueidisRenewer) hold(ctx context.Context, name string) (heldLock, error) {
	// The lock's context must outlive ctx, which bounds the acquisition only.
	lockCtx, cancel, err := r.locker.TryWithContext(context.WithoutCancel(ctx), name)
	if err != nil {
		return heldLock{}, err
	}
	return heldLock{
		release: func(context.Context) error { cancel(); return nil },
		lost:    func() bool { return lockCtx.Err() != nil },
	}, nil
}

func (r rueidisRenewer) extensions() int64 { return -1 }

func (r rueidisRenewer) close() error { r.locker.Close(); return nil }

// bsmRenewer is the renewal users write by hand around bsm/redislock: one
// goroutine per lock that refreshes it every TTL/3.
type bsmRenewer struct {
	rdb      *redis.Client
	locker   *bsm.Client
	ttl      time.Duration
	extended atomic.Int64
}

func openBSMRenewer(addr string, ttl time.Duration, counter *callCounter) (renewer, error) {
	rdb := newGoRedis(addr, counter)
	return &bsmRenewer{rdb: rdb, locker: bsm.New(rdb), ttl: ttl}, nil
}

func (r *bsmRenewer) hold(ctx context.Context, name string) (heldLock, error) {
	l, err := r.locker.Obtain(ctx, name, r.ttl, nil)
	if err != nil {
		return heldLock{}, err
	}
	var lost atomic.Bool
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		ticker := time.NewTicker(r.ttl / 3)
		defer ticker.Stop()
		for {
			select {
			case <-stop:
				return
			case <-ticker.C:
				switch err := l.Refresh(context.Background(), r.ttl, nil); {
				case err == nil:
					r.extended.Add(1)
				case errors.Is(err, bsm.ErrNotObtained):
					lost.Store(true) // the key is gone or someone else's
					return
				}
			}
		}
	})
	release := func(ctx context.Context) error {
		close(stop)
		wg.Wait()
		return l.Release(ctx)
	}
	return heldLock{release, lost.Load}, nil
}

func (r *bsmRenewer) extensions() int64 { return r.extended.Load() }
func (r *bsmRenewer) close() error      { return r.rdb.Close() }
