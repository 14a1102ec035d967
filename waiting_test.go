package redislock_test

import (
	"context"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/internal/redistest"
)

func TestReleaseWakesAWaiterOfAnotherClient(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		holderPod := redislock.New(b.rdb, quiet)
		waiterRDB := newRedisClient(t, b.rdb.Options().Addr) // another process's connection pool
		waiterPod := redislock.New(waiterRDB, quiet)

		holder, err := holderPod.Acquire(ctx, "job", redislock.WithTTL(time.Minute))
		require.NoError(t, err)

		got := make(chan error, 1)
		go func() {
			// An hour of backoff under a 20s deadline, against a holder
			// with a minute left: only the release announcement can
			// wake this waiter in time.
			waitCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			l, err := waiterPod.Acquire(waitCtx, "job", redislock.WithRetry(redislock.LinearBackoff(time.Hour)))
			if err == nil {
				err = l.Release(ctx)
			}
			got <- err
		}()
		eventually(t, 10*time.Second, func() bool {
			return b.rdb.PubSubNumSub(ctx, "lock:{job}:released").Val()["lock:{job}:released"] == 1
		}, "the waiter never subscribed to the release channel")
		require.NoError(t, holder.Release(ctx))
		require.NoError(t, <-got)
	})
}

func TestOnePubSubConnectionServesEveryWaiter(t *testing.T) {
	server := redistest.Start(t)
	ctx := context.Background()
	admin := newRedisClient(t, server.Addr())
	holderPod := redislock.New(newRedisClient(t, server.Addr()), quiet)
	// Named, to tell its connections from the holder pod's (whose restart
	// watch is a pub/sub connection too).
	waiterRDB := redis.NewClient(&redis.Options{Addr: server.Addr(), ClientName: "waiters"})
	t.Cleanup(func() { _ = waiterRDB.Close() })
	waiterPod := redislock.New(waiterRDB, quiet)

	const names = 20
	var holders []*redislock.Lock
	for i := range names {
		l, err := holderPod.Acquire(ctx, "job-"+string(rune('a'+i)), redislock.WithTTL(time.Minute))
		require.NoError(t, err)
		holders = append(holders, l)
	}
	errs := make(chan error, names)
	for i := range names {
		go func() {
			waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			l, err := waiterPod.Acquire(waitCtx, "job-"+string(rune('a'+i)), redislock.WithRetry(redislock.LinearBackoff(time.Hour)))
			if err == nil {
				err = l.Release(ctx)
			}
			errs <- err
		}()
	}
	eventually(t, 10*time.Second, func() bool {
		return len(admin.PubSubChannels(ctx, "lock:{*}:released").Val()) == names
	}, "not every waiter is listening")
	require.Equal(t, 1, countPubSubClients(t, admin, "waiters"), "one pub/sub connection for %d waiters", names)
	for _, l := range holders {
		require.NoError(t, l.Release(ctx))
	}
	for range names {
		require.NoError(t, <-errs)
	}
	eventually(t, 10*time.Second, func() bool { return countPubSubClients(t, admin, "waiters") == 0 },
		"the pub/sub connection is closed once nobody waits")
}

// countPubSubClients counts the server's connections in pub/sub mode, of
// the clients called name if it is given.
func countPubSubClients(t *testing.T, admin *redis.Client, name ...string) int {
	t.Helper()
	n := 0
	for _, line := range strings.Split(admin.ClientList(context.Background()).Val(), "\n") {
		if len(name) > 0 && !slices.Contains(strings.Fields(line), "name="+name[0]) {
			continue
		}
		for _, field := range strings.Fields(line) {
			if field == "flags=P" || (strings.HasPrefix(field, "sub=") && field != "sub=0") {
				n++
				break
			}
		}
	}
	return n
}

func TestOneWatchdogGoroutineExtendsManyLocksInBatches(t *testing.T) {
	server := redistest.Start(t)
	ctx := context.Background()
	rdb := newRedisClient(t, server.Addr())
	counter := &commandLog{}
	rdb.AddHook(counter)
	// A second's TTL: lost only if an extension is held up for 660 ms
	// (300 ms was within a loaded machine's stalls).
	c := redislock.New(rdb, quiet, redislock.WithTTL(time.Second))

	before := runtime.NumGoroutine()
	const held = 300
	locks := make([]*redislock.Lock, held)
	for i := range locks {
		l, err := c.Acquire(ctx, "many-"+strings.Repeat("x", i%7)+string(rune('A'+i%50))+string(rune('0'+i/50)))
		require.NoError(t, err)
		locks[i] = l
	}
	during := runtime.NumGoroutine()
	counter.take()
	counter.resetTrips()

	// Hold them for two TTLs: six extensions each.
	end := time.After(2 * time.Second)
	for running := true; running; {
		select {
		case <-end:
			running = false
		case <-time.After(50 * time.Millisecond):
			for _, l := range locks {
				require.NoError(t, l.Context().Err(), "lock %s lost", l.Name())
			}
		}
	}
	trips, extensions := counter.tripsAndExtensions()
	t.Logf("%d locks: %d goroutines before, %d while held; %d extensions in %d round trips", held, before, during, extensions, trips)
	require.LessOrEqual(t, during-before, 3, "a constant number of goroutines, not one per lock")
	require.GreaterOrEqual(t, extensions, int64(held*3), "every lock was extended several times")
	require.GreaterOrEqual(t, extensions, 10*trips, "extensions travel in batches")

	for _, l := range locks {
		require.Equal(t, l.Token(), rdb.Get(ctx, l.Key()).Val())
		require.NoError(t, l.Release(ctx))
	}
}

// extendSHA is what EVALSHA carries for the extend script, the only one
// that calls PEXPIRE.
var extendSHA = func() string {
	src, err := os.ReadFile("lua/extend.lua")
	if err != nil {
		panic(err)
	}
	return redis.NewScript(string(src)).Hash()
}()
