package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	bsm "github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"

	"github.com/redislock/redislock"
)

// pollInterval is the retry interval given to every library that waits
// by polling, and to the raw baseline: short enough that a waiter finds a
// released lock within about a millisecond, long enough that seven
// waiters do not flood a two-core machine. It is the one tuning knob that
// each polling library documents.
const pollInterval = time.Millisecond

// mutex is one library, opened on one Redis server, as a waiting lock:
// lock blocks until the lock is held or ctx ends.
type mutex interface {
	lock(ctx context.Context, name string) (unlock func(context.Context) error, err error)
	close() error
}

// contender names a library and its settings, and opens it. The counter
// receives every command the library's client sends.
type contender struct {
	name string
	open func(addr string, counter *callCounter) (mutex, error)
}

// contenders returns the libraries compared under contention, by name.
func contenders() []contender {
	return []contender{
		{"raw", openRaw},
		{"ours", openOurs(redislock.WithRetry(redislock.LinearBackoff(pollInterval)))},
		{"ours-readme", openOurs(redislock.WithRetry(redislock.ExponentialBackoff(5*time.Millisecond, 200*time.Millisecond)))},
		{"ours-semaphore", openOursSemaphore(redislock.WithRetry(redislock.LinearBackoff(pollInterval)))},
		{"bsm", openBSM(pollInterval)},
		{"bsm-10ms", openBSM(10 * time.Millisecond)},
		{"redsync", openRedsync()},
		{"redsync-1ms", openRedsync(redsync.WithRetryDelay(pollInterval), redsync.WithTries(1<<30))},
		{"rueidislock", openRueidis(rueidislock.LockerOption{})},
	}
}

// contenderNamed returns the contender called name.
func contenderNamed(name string) (contender, error) {
	for _, c := range contenders() {
		if c.name == name {
			return c, nil
		}
	}
	return contender{}, fmt.Errorf("no contender called %q", name)
}

// newGoRedis returns a go-redis client with its defaults and a counting
// hook.
func newGoRedis(addr string, counter *callCounter) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	if counter != nil {
		rdb.AddHook(goRedisHook{counter})
	}
	return rdb
}

type rawMutex struct{ rdb *redis.Client }

func openRaw(addr string, counter *callCounter) (mutex, error) {
	rdb := newGoRedis(addr, counter)
	if err := loadRawScripts(context.Background(), rdb); err != nil {
		rdb.Close()
		return nil, err
	}
	return rawMutex{rdb}, nil
}

// lock polls SET NX every pollInterval.
func (m rawMutex) lock(ctx context.Context, name string) (func(context.Context) error, error) {
	for {
		token, err := rawAcquire(ctx, m.rdb, name, 30*time.Second)
		if err == nil {
			return func(ctx context.Context) error {
				ok, err := rawReleaseKey(ctx, m.rdb, name, token)
				if err == nil && !ok {
					err = errors.New("raw baseline: released a lock that was not ours")
				}
				return err
			}, nil
		}
		if !errors.Is(err, errRawHeld) {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(pollInterval):
		}
	}
}

func (m rawMutex) close() error { return m.rdb.Close() }

type oursMutex struct {
	rdb    *redis.Client
	locker *redislock.Client
}

func openOurs(opts ...redislock.Option) func(string, *callCounter) (mutex, error) {
	return func(addr string, counter *callCounter) (mutex, error) {
		rdb := newGoRedis(addr, counter)
		return oursMutex{rdb, redislock.New(rdb, opts...)}, nil
	}
}

func (m oursMutex) lock(ctx context.Context, name string) (func(context.Context) error, error) {
	l, err := m.locker.Acquire(ctx, name)
	if err != nil {
		return nil, err
	}
	return l.Release, nil
}

func (m oursMutex) close() error { return m.rdb.Close() }

// oursSemaphore is a semaphore of 1 (AcquireSemaphore): one holder at a
// time, so every acquisition under contention is a hand-over of its slot.
type oursSemaphore struct{ oursMutex }

func openOursSemaphore(opts ...redislock.Option) func(string, *callCounter) (mutex, error) {
	return func(addr string, counter *callCounter) (mutex, error) {
		rdb := newGoRedis(addr, counter)
		return oursSemaphore{oursMutex{rdb, redislock.New(rdb, opts...)}}, nil
	}
}

func (m oursSemaphore) lock(ctx context.Context, name string) (func(context.Context) error, error) {
	l, err := m.locker.AcquireSemaphore(ctx, name, 1)
	if err != nil {
		return nil, err
	}
	return l.Release, nil
}

type bsmMutex struct {
	rdb    *redis.Client
	locker *bsm.Client
	retry  time.Duration
}

func openBSM(retry time.Duration) func(string, *callCounter) (mutex, error) {
	return func(addr string, counter *callCounter) (mutex, error) {
		rdb := newGoRedis(addr, counter)
		return bsmMutex{rdb, bsm.New(rdb), retry}, nil
	}
}

func (m bsmMutex) lock(ctx context.Context, name string) (func(context.Context) error, error) {
	l, err := m.locker.Obtain(ctx, name, 30*time.Second, &bsm.Options{RetryStrategy: bsm.LinearBackoff(m.retry)})
	if err != nil {
		return nil, err
	}
	return l.Release, nil
}

func (m bsmMutex) close() error { return m.rdb.Close() }

type redsyncMutex struct {
	rdb  *redis.Client
	rs   *redsync.Redsync
	opts []redsync.Option
}

func openRedsync(opts ...redsync.Option) func(string, *callCounter) (mutex, error) {
	return func(addr string, counter *callCounter) (mutex, error) {
		rdb := newGoRedis(addr, counter)
		return redsyncMutex{rdb, redsync.New(goredis.NewPool(rdb)), opts}, nil
	}
}

func (m redsyncMutex) lock(ctx context.Context, name string) (func(context.Context) error, error) {
	mu := m.rs.NewMutex(name, m.opts...)
	if err := mu.LockContext(ctx); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		ok, err := mu.UnlockContext(ctx)
		if err == nil && !ok {
			err = errors.New("redsync: unlock reported false")
		}
		return err
	}, nil
}

func (m redsyncMutex) close() error { return m.rdb.Close() }

type rueidisMutex struct{ locker rueidislock.Locker }

// openRueidis opens rueidislock with option (its defaults where option's
// fields are zero), on a counted client.
func openRueidis(option rueidislock.LockerOption) func(string, *callCounter) (mutex, error) {
	return func(addr string, counter *callCounter) (mutex, error) {
		locker, err := newRueidisLocker(addr, counter, option)
		if err != nil {
			return nil, err
		}
		return rueidisMutex{locker}, nil
	}
}

func newRueidisLocker(addr string, counter *callCounter, option rueidislock.LockerOption) (rueidislock.Locker, error) {
	option.ClientOption.InitAddress = []string{addr}
	option.ClientBuilder = func(o rueidis.ClientOption) (rueidis.Client, error) {
		client, err := rueidis.NewClient(o)
		if err != nil || counter == nil {
			return client, err
		}
		return countingRueidis{client, counter}, nil
	}
	return rueidislock.NewLocker(option)
}

func (m rueidisMutex) lock(ctx context.Context, name string) (func(context.Context) error, error) {
	_, cancel, err := m.locker.WithContext(ctx, name)
	if err != nil {
		return nil, err
	}
	return func(context.Context) error { cancel(); return nil }, nil
}

func (m rueidisMutex) close() error { m.locker.Close(); return nil }
