package redislock_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/redislock/redislock/internal/redistest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	// The Cluster and Sentinel set the tests share live until here.
	redistest.StopShared()
	if code == 0 {
		// go-redis's redial probe of a pool whose dials failed sleeps a
		// second between dials and returns at its first look after its
		// pool was closed: up to a second after the test that closed it
		// (the last test to run a dead node leaves one behind, briefly).
		if err := goleak.Find(goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial")); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: errors on successful test run: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// backend is one Redis the behavioural tests run against: miniredis, or a
// real redis-server.
type backend struct {
	rdb    *redis.Client
	mini   *miniredis.Miniredis // nil on a real server
	server *redistest.Server    // nil on miniredis

	infoCalls int64 // INFO commands sent by commandsProcessed
}

// forEachBackend runs test against miniredis and against a real
// redis-server, each fresh.
func forEachBackend(t *testing.T, test func(t *testing.T, b *backend)) {
	t.Helper()
	t.Run("miniredis", func(t *testing.T) {
		mini := miniredis.RunT(t)
		test(t, &backend{rdb: newRedisClient(t, mini.Addr()), mini: mini})
	})
	t.Run("redis-server", func(t *testing.T) {
		server := redistest.Start(t)
		test(t, &backend{rdb: newRedisClient(t, server.Addr()), server: server})
	})
}

func newRedisClient(t testing.TB, addr string) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// expireNow makes key expire as if its TTL had run out.
func (b *backend) expireNow(t testing.TB, key string) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, b.rdb.PExpire(ctx, key, time.Millisecond).Err())
	if b.mini != nil {
		b.mini.FastForward(time.Millisecond)
	}
	eventually(t, 5*time.Second, func() bool { return b.rdb.Exists(ctx, key).Val() == 0 }, "key %s did not expire", key)
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t testing.TB, within time.Duration, cond func() bool, format string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf(format, args...)
		}
		time.Sleep(2 * time.Millisecond) // polling interval, not a synchronisation
	}
}

// waitDone waits for ctx to end, failing the test after within.
func waitDone(t testing.TB, ctx context.Context, within time.Duration) time.Time {
	t.Helper()
	select {
	case <-ctx.Done():
		return time.Now()
	case <-time.After(within):
		t.Fatalf("context not cancelled within %v", within)
	}
	return time.Time{}
}
