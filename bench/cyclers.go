package bench

import (
	"context"
	"errors"

	bsm "github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/rueidis/rueidislock"

	"github.com/redislock/redislock"
)

// cycler is one library's uncontended acquire + release, on a key nobody
// else holds. open builds the client once, so that the cycle measures the
// library's own work and allocations only.
type cycler struct {
	name string
	open func(addr string) (cycle func(ctx context.Context, name string) error, close func() error, err error)
}

// uncontendedTTL is the lease given where a library takes one as a
// parameter (the raw baseline, bsm): our default.
const uncontendedTTL = redislock.DefaultTTL

// cyclers returns the libraries compared without contention, each with
// its defaults.
func cyclers() []cycler {
	return []cycler{
		{"raw", openRawCycle},
		{"ours", openOursCycle()},
		{"bsm", openBSMCycle},
		{"redsync", openRedsyncCycle},
		{"rueidislock", openRueidisCycle},
	}
}

// fencedCyclers returns the libraries compared with fencing: ours and the
// raw baseline, whose acquire script INCRs the counter in the same round
// trip.
func fencedCyclers() []cycler {
	return []cycler{
		{"raw", openRawFencedCycle},
		{"ours", openOursCycle(redislock.WithFencing())},
	}
}

var errNotOurs = errors.New("released a lock that was not ours")

func openRawCycle(addr string) (func(context.Context, string) error, func() error, error) {
	rdb := newGoRedis(addr, nil)
	if err := loadRawScripts(context.Background(), rdb); err != nil {
		rdb.Close()
		return nil, nil, err
	}
	return func(ctx context.Context, name string) error {
		token, err := rawAcquire(ctx, rdb, name, uncontendedTTL)
		if err != nil {
			return err
		}
		ok, err := rawReleaseKey(ctx, rdb, name, token)
		if err == nil && !ok {
			err = errNotOurs
		}
		return err
	}, rdb.Close, nil
}

func openRawFencedCycle(addr string) (func(context.Context, string) error, func() error, error) {
	rdb := newGoRedis(addr, nil)
	if err := loadRawScripts(context.Background(), rdb); err != nil {
		rdb.Close()
		return nil, nil, err
	}
	return func(ctx context.Context, name string) error {
		token, _, err := rawFenced(ctx, rdb, name, name+":fence", uncontendedTTL)
		if err != nil {
			return err
		}
		ok, err := rawReleaseKey(ctx, rdb, name, token)
		if err == nil && !ok {
			err = errNotOurs
		}
		return err
	}, rdb.Close, nil
}

func openOursCycle(opts ...redislock.Option) func(string) (func(context.Context, string) error, func() error, error) {
	return func(addr string) (func(context.Context, string) error, func() error, error) {
		rdb := newGoRedis(addr, nil)
		locker := redislock.New(rdb, opts...)
		return func(ctx context.Context, name string) error {
			l, err := locker.Acquire(ctx, name)
			if err != nil {
				return err
			}
			return l.Release(ctx)
		}, rdb.Close, nil
	}
}

func openBSMCycle(addr string) (func(context.Context, string) error, func() error, error) {
	rdb := newGoRedis(addr, nil)
	locker := bsm.New(rdb)
	return func(ctx context.Context, name string) error {
		l, err := locker.Obtain(ctx, name, uncontendedTTL, nil)
		if err != nil {
			return err
		}
		return l.Release(ctx)
	}, rdb.Close, nil
}

func openRedsyncCycle(addr string) (func(context.Context, string) error, func() error, error) {
	rdb := newGoRedis(addr, nil)
	rs := redsync.New(goredis.NewPool(rdb))
	return func(ctx context.Context, name string) error {
		mu := rs.NewMutex(name)
		if err := mu.LockContext(ctx); err != nil {
			return err
		}
		ok, err := mu.UnlockContext(ctx)
		if err == nil && !ok {
			err = errNotOurs
		}
		return err
	}, rdb.Close, nil
}

func openRueidisCycle(addr string) (func(context.Context, string) error, func() error, error) {
	locker, err := newRueidisLocker(addr, nil, rueidislock.LockerOption{})
	if err != nil {
		return nil, nil, err
	}
	return func(ctx context.Context, name string) error {
		_, cancel, err := locker.WithContext(ctx, name)
		if err != nil {
			return err
		}
		cancel() // releases, and waits for the release to be sent
		return nil
	}, func() error { locker.Close(); return nil }, nil
}
