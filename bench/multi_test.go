package bench

import (
	"context"
	"crypto/rand"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/internal/redistest"
)

// Several names at once (issue 16 part 1): AcquireMulti beside a
// hand-written go-redis multi lock, the raw baseline: one EVALSHA that
// sets every key (SET PX) if none is held, one token-checked EVALSHA that
// deletes them, and polling every 1 ms to wait. The raw one has no
// watchdog, no fences, no release announcements: the floor, not a peer.

// rawMultiAcquire: KEYS the lock keys; ARGV token, ttl ms.
var rawMultiAcquire = redis.NewScript(`
for i = 1, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 1 then
    return 0
  end
end
for i = 1, #KEYS do
  redis.call('SET', KEYS[i], ARGV[1], 'PX', ARGV[2])
end
return 1`)

// rawMultiRelease: KEYS the lock keys; ARGV token.
var rawMultiRelease = redis.NewScript(`
for i = 1, #KEYS do
  if redis.call('GET', KEYS[i]) == ARGV[1] then
    redis.call('DEL', KEYS[i])
  end
end
return 1`)

// multiNames is how many names each benchmark's lock holds.
const multiNames = 3

// multiLib is one multi-lock implementation: acquire waits (polling or
// woken) within ctx and returns the release.
type multiLib struct {
	name    string
	acquire func(ctx context.Context, names []string) (release func(), err error)
	close   func()
}

func multiLibs(addr string) []multiLib {
	rawRDB := redis.NewClient(&redis.Options{Addr: addr})
	oursRDB := redis.NewClient(&redis.Options{Addr: addr})
	ours := redislock.New(oursRDB, redislock.WithRetry(redislock.LinearBackoff(time.Millisecond)))
	raw := func(ctx context.Context, names []string) (func(), error) {
		token := rand.Text()
		keys := make([]string, len(names))
		for i, name := range names {
			keys[i] = "lock:{" + name + "}" // the keys ours uses: one server, any slots
		}
		for {
			got, err := rawMultiAcquire.Run(ctx, rawRDB, keys, token, 30_000).Int()
			if err != nil {
				return nil, err
			}
			if got == 1 {
				return func() { rawMultiRelease.Run(context.Background(), rawRDB, keys, token) }, nil
			}
			select {
			case <-time.After(time.Millisecond):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
	}
	oursMulti := func(ctx context.Context, names []string) (func(), error) {
		l, err := ours.AcquireMulti(ctx, names)
		if err != nil {
			return nil, err
		}
		return func() { _ = l.Release(context.Background()) }, nil
	}
	return []multiLib{
		{name: "raw-multi", acquire: raw, close: func() { _ = rawRDB.Close() }},
		{name: "ours-multi", acquire: oursMulti, close: func() { _ = ours.Close(context.Background()); _ = oursRDB.Close() }},
	}
}

// lockNames returns multiNames names under prefix.
func lockNames(prefix string) []string {
	names := make([]string, multiNames)
	for i := range names {
		names[i] = prefix + ":" + strconv.Itoa(i)
	}
	return names
}

// BenchmarkMultiUncontended: take 3 names as one lock and give them back,
// one goroutine, fresh names each time.
func BenchmarkMultiUncontended(b *testing.B) {
	srv := redistest.Start(b)
	libs := multiLibs(srv.Addr())
	defer func() {
		for _, l := range libs {
			l.close()
		}
	}()
	for _, lib := range libs {
		b.Run("lib="+lib.name, func(b *testing.B) {
			uncontendedCycles(b, lib.acquire, lockNames("bench:multi:warmup:"+lib.name), func(i int) []string {
				return lockNames("bench:multi:uncontended:" + lib.name + ":" + strconv.Itoa(i))
			})
		})
	}
}

// BenchmarkMultiContended: 8 goroutines of one process on the same 3
// names, a 100µs hold; one op is one acquisition (run with -benchtime
// 2000x). Handoff = from just before a holder releases to just after the
// next holder's AcquireMulti returns (it was waiting when the names were
// freed).
func BenchmarkMultiContended(b *testing.B) {
	srv := redistest.Start(b)
	libs := multiLibs(srv.Addr())
	defer func() {
		for _, l := range libs {
			l.close()
		}
	}()
	for _, lib := range libs {
		b.Run("lib="+lib.name, func(b *testing.B) {
			names := lockNames("bench:multi:contended:" + lib.name + ":" + strconv.Itoa(b.N))
			contendedHandoffs(b, lib.name, func(ctx context.Context) (func(), error) { return lib.acquire(ctx, names) })
		})
	}
}
