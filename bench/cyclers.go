package bench

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

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
		return rawReleaseOwn(ctx, rdb, name, token)
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
		return rawReleaseOwn(ctx, rdb, name, token)
	}, rdb.Close, nil
}

// openRawMultiFencedCycle is the raw fenced cycle with the acquire sent
// as MULTI, SET key token NX PX ttl, INCR counter, EXEC: atomic without a
// script, still one round trip. A SET that fails still takes a fence
// number, which fencing tolerates (numbers only have to rise).
func openRawMultiFencedCycle(addr string) (func(context.Context, string) error, func() error, error) {
	return openSetIncrPipeline(addr, true)
}

// openSetIncrCycle pipelines SET key token NX PX ttl and INCR counter
// without MULTI, then releases as the raw cycle does. It is not a lock
// (it takes a fence whether or not SET won, and another client's command
// may fall between the two), only the least work a server can be asked
// for a lock and a fence in one round trip: BenchmarkFencingFloor's floor.
func openSetIncrCycle(addr string) (func(context.Context, string) error, func() error, error) {
	return openSetIncrPipeline(addr, false)
}

// openSetIncrPipeline is the cycle of openRawMultiFencedCycle (tx) or of
// openSetIncrCycle.
func openSetIncrPipeline(addr string, tx bool) (func(context.Context, string) error, func() error, error) {
	rdb := newGoRedis(addr, nil)
	if err := loadRawScripts(context.Background(), rdb); err != nil {
		rdb.Close()
		return nil, nil, err
	}
	pipelined := rdb.Pipelined
	if tx {
		pipelined = rdb.TxPipelined
	}
	return func(ctx context.Context, name string) error {
		token := rand.Text()
		var set *redis.BoolCmd
		if _, err := pipelined(ctx, func(pipe redis.Pipeliner) error {
			set = pipe.SetNX(ctx, name, token, uncontendedTTL)
			pipe.Incr(ctx, name+":fence")
			return nil
		}); err != nil {
			return err
		}
		if !set.Val() {
			return errRawHeld
		}
		return rawReleaseOwn(ctx, rdb, name, token)
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

// openOurCommandsCycle sends by hand, with go-redis alone, the two commands
// our uncontended cycle sends: SET key token NX PX ttl, then EVALSHA of our
// release script (lua/release.lua, read from the core module beside this
// one) with the lock's queue keys, exactly as the library calls it. Set
// beside raw and ours, it splits our overhead into what our scripts cost
// the server and what our Go code costs the client.
func openOurCommandsCycle(addr string) (func(context.Context, string) error, func() error, error) {
	// The library sends release.lua after prelude.lua and handover.lua
	// (scripts.go), with the layout of lockRef.commands.
	var src []byte
	for _, name := range []string{"prelude", "handover", "release"} {
		part, err := os.ReadFile("../lua/" + name + ".lua")
		if err != nil {
			return nil, nil, fmt.Errorf("reading our release script: %w", err)
		}
		src = append(src, part...)
	}
	release := redis.NewScript(string(src))
	rdb := newGoRedis(addr, nil)
	if err := release.Load(context.Background(), rdb).Err(); err != nil {
		rdb.Close()
		return nil, nil, err
	}
	ttl := uncontendedTTL.Milliseconds()
	claim := min(uncontendedTTL, time.Second).Milliseconds() // the hand-over claim, as lockRef.init
	return func(ctx context.Context, name string) error {
		token := rand.Text()
		key := redislock.DefaultKeyPrefix + "{" + name + "}"
		if err := rdb.Do(ctx, "set", key, token, "nx", "px", ttl).Err(); err != nil {
			return err
		}
		n, err := rdb.Do(ctx, "evalsha", release.Hash(), 4, key, key+":q", key+":qx", key+":s", token, fmt.Sprint("PUBLISH ", claim)).Int64()
		if err == nil && n != 1 {
			err = errNotOurs
		}
		return err
	}, rdb.Close, nil
}
