package redislock_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redislock/redislock"
)

// queueOf returns the metadata of name's Info.Queue, first in line first.
func queueOf(t *testing.T, c *redislock.Client, name string) []string {
	t.Helper()
	info, err := c.Inspect(context.Background(), name)
	require.NoError(t, err)
	out := []string{}
	for _, w := range info.Queue {
		out = append(out, w.Metadata)
	}
	return out
}

// serverNow reads the server's clock (TIME), the one the queue's arrivals use.
func serverNow(t *testing.T, rdb redis.UniversalClient) time.Time {
	t.Helper()
	now, err := rdb.Time(context.Background()).Result()
	require.NoError(t, err)
	return now
}

// Info.Queue lists the waiters of every kind that queues, each with the
// metadata it gave and how long it has been in line, first in line first;
// a multi waiter's watcher is no waiter; those that leave drop out; and
// nothing is left behind once the queue empties.
func TestInspectListsTheWaitersInLine(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		operator := redislock.New(b.rdb, quiet)
		waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		// start runs acquire on a Client of its own that waits, its lock (or error)
		// on the returned channel, and waits until Inspect counts one more
		// waiter, so the order in line is the order of the calls.
		start := func(name string, acquire func(c *redislock.Client) (*redislock.Lock, error)) chan *redislock.Lock {
			before, err := operator.Inspect(ctx, name)
			require.NoError(t, err)
			got := make(chan *redislock.Lock, 1)
			go func() {
				l, _ := acquire(redislock.New(b.rdb, quiet, redislock.WithRetry(redislock.LinearBackoff(20*time.Millisecond))))
				got <- l
			}()
			eventually(t, 10*time.Second, func() bool {
				info, err := operator.Inspect(ctx, name)
				return err == nil && info.Waiters == before.Waiters+1
			}, "the waiter to queue on %s after %d", name, before.Waiters)
			return got
		}

		held, err := operator.Acquire(ctx, "job")
		require.NoError(t, err)
		sinceStart := serverNow(t, b.rdb)
		leaving, leave := context.WithCancel(waitCtx)
		first := start("job", func(c *redislock.Client) (*redislock.Lock, error) {
			return c.Acquire(leaving, "job", redislock.WithMetadata("w=lock"))
		})
		multi := start("job", func(c *redislock.Client) (*redislock.Lock, error) {
			return c.AcquireMulti(waitCtx, []string{"job", "other"}, redislock.WithMetadata("w=multi"))
		})
		shared := start("job", func(c *redislock.Client) (*redislock.Lock, error) {
			return c.AcquireShared(waitCtx, "job", redislock.WithMetadata("w=shared"))
		})
		plain := start("job", func(c *redislock.Client) (*redislock.Lock, error) { return c.Acquire(waitCtx, "job") })
		require.Equal(t, []string{"w=lock", "w=shared", ""}, queueOf(t, operator, "job"), "no watcher, and no metadata as \"\"")

		slot, err := operator.AcquireSemaphore(ctx, "pool", 1)
		require.NoError(t, err)
		var slots []chan *redislock.Lock
		for i := range 2 {
			slots = append(slots, start("pool", func(c *redislock.Client) (*redislock.Lock, error) {
				return c.AcquireSemaphore(waitCtx, "pool", 1, redislock.WithMetadata(fmt.Sprintf("w=slot-%d", i)))
			}))
		}
		require.Equal(t, []string{"w=slot-0", "w=slot-1"}, queueOf(t, operator, "pool"))

		t.Run("Waited: from the arrival to now, on the server's clock", func(t *testing.T) {
			info, err := operator.Inspect(ctx, "job")
			require.NoError(t, err)
			upTo := serverNow(t, b.rdb).Sub(sinceStart)
			require.Len(t, info.Queue, 3)
			for i, w := range info.Queue {
				require.Positive(t, w.Waited, i)
				require.LessOrEqual(t, w.Waited, upTo, "no longer than since before it came")
				if i > 0 {
					require.Less(t, w.Waited, info.Queue[i-1].Waited, "it came after the one before it")
				}
			}
			// It grows with the server's clock: wait until that clock has
			// moved 5 ms past a reading taken after the first Inspect (the
			// clock moves whatever the load; 5 s only bounds a hang).
			after := serverNow(t, b.rdb)
			eventually(t, 5*time.Second, func() bool { return serverNow(t, b.rdb).Sub(after) >= 5*time.Millisecond }, "the server's clock to move")
			again, err := operator.Inspect(ctx, "job")
			require.NoError(t, err)
			require.Len(t, again.Queue, 3)
			require.GreaterOrEqual(t, again.Queue[0].Waited, info.Queue[0].Waited+5*time.Millisecond)
		})

		t.Run("a waiter that leaves drops out of the queue", func(t *testing.T) {
			// It gives its place back as it returns (in the background on
			// a stalled link): 10 s bounds a hang, polling ends at once.
			leave()
			require.Nil(t, <-first)
			eventually(t, 10*time.Second, func() bool {
				return strings.Join(queueOf(t, operator, "job"), ",") == "w=shared,"
			}, "the waiter that left to drop out")
		})

		t.Run("released, each in turn; nothing is left behind", func(t *testing.T) {
			require.NoError(t, held.Release(ctx))
			reader := <-shared
			require.NotNil(t, reader)
			require.Equal(t, []string{""}, queueOf(t, operator, "job"))
			require.NoError(t, reader.Release(ctx))
			last := <-plain
			require.NotNil(t, last)
			require.NoError(t, last.Release(ctx))
			both := <-multi
			require.NotNil(t, both)
			require.NoError(t, both.Release(ctx))
			require.NoError(t, slot.Release(ctx))
			for _, got := range slots {
				l := <-got
				require.NotNil(t, l)
				require.NoError(t, l.Release(ctx))
			}
			// Only the marks of waiters that left may stay, for their
			// own short TTL (a command of theirs may still arrive), and
			// the semaphore's limit, until its last lease would have ended.
			keys, err := b.rdb.Keys(ctx, "*").Result()
			require.NoError(t, err)
			for _, k := range keys {
				if k != "lock:{pool}:limit" {
					require.Contains(t, k, ":left:", "left behind: %s", k)
				}
			}
		})
	})
}

// Info.Queue lists at most 100 waiters, the first in line, while Waiters
// counts them all; places that lapsed and watchers are left out; a waiter
// of a version that scored its arrival in ms reads as one in µs.
func TestInspectListsAtMost100Waiters(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		now := serverNow(t, b.rdb)
		micros, millis := float64(now.UnixMicro()), float64(now.UnixMilli())
		queue, expiries := "lock:{busy}:q", "lock:{busy}:qx"
		place := func(member string, arrival, lapses float64) {
			require.NoError(t, b.rdb.ZAdd(ctx, queue, redis.Z{Score: arrival, Member: member}).Err())
			require.NoError(t, b.rdb.ZAdd(ctx, expiries, redis.Z{Score: lapses, Member: member}).Err())
		}
		require.NoError(t, b.rdb.Set(ctx, "lock:{busy}", "HOLDER", time.Minute).Err())
		place("OLDVERSIONTOKEN\x1fw=old", millis-5000, millis+60000) // arrival in ms, 5 s ago
		place("~watcher", micros-4e6, millis+60000)
		place("TAG.nLAPSED\x1fw=lapsed", micros-3e6, millis-1)
		for i := range 150 {
			place(fmt.Sprintf("TAG.%04d\x1fw=%d", i, i), micros-float64(150-i)*1000, millis+60000)
		}
		info, err := redislock.New(b.rdb, quiet).Inspect(ctx, "busy")
		require.NoError(t, err)
		require.Equal(t, 152, info.Waiters, "every live place (watchers too)")
		require.Len(t, info.Queue, 100)
		require.Equal(t, "w=old", info.Queue[0].Metadata)
		require.GreaterOrEqual(t, info.Queue[0].Waited, 5*time.Second)
		require.Less(t, info.Queue[0].Waited, time.Hour, "read as ms, not µs")
		for i, w := range info.Queue[1:] {
			require.Equal(t, fmt.Sprintf("w=%d", i), w.Metadata)
			require.GreaterOrEqual(t, w.Waited, time.Duration(150-i)*time.Millisecond)
		}
	})
}
