package redislock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/internal/faultproxy"
)

// An attempt that gives up on a timeout may still reach Redis later and
// take the key under a token nobody has. The Client gives such a token
// back in the background: once the stalled command landed, the key is
// gone within a few round trips, not after its TTL.
func TestAnAttemptThatTimedOutIsGivenBackWhenItLandsLate(t *testing.T) {
	t.Parallel()
	acquire := func(ctx context.Context, c *redislock.Client) (*redislock.Lock, error) {
		return c.Acquire(ctx, "late")
	}
	requireALateAttemptIsGivenBack(t, acquire, acquire, "lock:{late}")
}

// requireALateAttemptIsGivenBack warms acquire up on a Client whose
// connection then stalls for longer than its read timeout, so that the
// next acquire gives up while its command is on the way; once the command
// lands (taking keys under a token nobody has), keys must be gone within a
// few round trips, and free (a fresh Client's acquire) must succeed.
func requireALateAttemptIsGivenBack(t *testing.T, acquire, free func(context.Context, *redislock.Client) (*redislock.Lock, error), keys ...string) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		proxy := newProxy(t, b.rdb.Options().Addr)
		rdb := redis.NewClient(&redis.Options{
			Addr: proxy.Addr(), ReadTimeout: 100 * time.Millisecond, MaxRetries: -1,
		})
		t.Cleanup(func() { _ = rdb.Close() })
		c := redislock.New(rdb, quiet)
		t.Cleanup(func() { _ = c.Close(context.Background()) }) // before rdb's
		// Warm up: the scripts are loaded, so the attempt is one command.
		// (A starved machine can miss the 100 ms read timeout: try again;
		// what such a try left behind is given back by the janitor.)
		eventually(t, 10*time.Second, func() bool {
			warm, err := acquire(ctx, c)
			if err != nil {
				return false
			}
			require.NoError(t, warm.Release(ctx))
			return true
		}, "the warm-up never succeeded")

		const stall = 400 * time.Millisecond
		proxy.SetDelay(stall)
		proxy.SetMode(faultproxy.Delay)
		sent := time.Now()
		l, err := acquire(ctx, c)
		require.Error(t, err)
		require.Nil(t, l)
		require.False(t, errors.Is(err, redislock.ErrNotAcquired), "a timeout is no verdict: %v", err)
		proxy.SetMode(faultproxy.Pass)

		// The stalled command lands once the proxy forwards it (an event:
		// a loaded machine can forward it well after sent+stall, and Redis
		// run it after a command of another connection); the janitor gives
		// back what it took within its next rounds (250 ms apart at most):
		// free for anyone within seconds, not after its TTL (30 s).
		eventually(t, 10*time.Second, func() bool { return proxy.Held() == 0 }, "the stalled command was not forwarded")
		landed, freed := time.Now(), false
		for !freed {
			fc := redislock.New(b.rdb, quiet)
			other, err := free(ctx, fc)
			if freed = err == nil; freed {
				require.NoError(t, other.Release(ctx))
			}
			require.NoError(t, fc.Close(ctx))
			if !freed {
				require.Less(t, time.Since(landed), 10*time.Second, "the late attempt's keys are still held %v after the stall: %v", time.Since(sent), err)
				time.Sleep(2 * time.Millisecond) // polling interval
			}
		}
		t.Logf("free %v after the stalled command was forwarded, %v after it was sent", time.Since(landed), time.Since(sent))
	})
}

// A reply that arrives after the lease's safe deadline gives the key back
// and reports the acquisition as failed: never a lock already past its
// deadline.
func TestAReplyAfterTheSafeDeadlineGivesTheKeyBack(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		proxy := newProxy(t, b.rdb.Options().Addr)
		rdb := newRedisClient(t, proxy.Addr())
		c := redislock.New(rdb, quiet, redislock.WithTTL(50*time.Millisecond))
		t.Cleanup(func() { _ = c.Close(context.Background()) })
		warm, err := c.Acquire(ctx, "slow", redislock.WithTTL(time.Minute)) // loads the script; a 50 ms lease could end before its release, under load
		require.NoError(t, err)
		require.NoError(t, warm.Release(ctx))

		proxy.SetDelay(60 * time.Millisecond) // each way: the reply comes 120 ms after sending
		proxy.SetMode(faultproxy.Delay)
		l, err := c.Acquire(ctx, "slow")
		proxy.SetMode(faultproxy.Pass)
		require.Nil(t, l)
		require.ErrorIs(t, err, redislock.ErrNotAcquired)
		require.Contains(t, err.Error(), "lease ran out before the reply arrived")
	})
}

// TTLs too short to be safe, and extend intervals that would flood Redis,
// are invalid arguments.
func TestTinyTTLsAndIntervalsAreInvalid(t *testing.T) {
	c := redislock.New(newMini(t), quiet)
	ctx := context.Background()
	for _, ttl := range []time.Duration{time.Millisecond, 3 * time.Millisecond, 9 * time.Millisecond} {
		_, err := c.Acquire(ctx, "tiny", redislock.WithTTL(ttl))
		require.ErrorIs(t, err, redislock.ErrInvalidArgument, "TTL %v", ttl)
		require.Contains(t, err.Error(), "10ms minimum")
	}
	_, err := c.Acquire(ctx, "tiny", redislock.WithExtendInterval(time.Nanosecond))
	require.ErrorIs(t, err, redislock.ErrInvalidArgument)
	require.Contains(t, err.Error(), "1ms minimum")

	// 10ms is valid; on a loaded machine its reply may come too late to
	// be safe, which is then said as such.
	l, err := c.Acquire(ctx, "tiny", redislock.WithTTL(10*time.Millisecond), redislock.WithWatchdog(false))
	if err != nil {
		require.ErrorIs(t, err, redislock.ErrNotAcquired)
		require.Contains(t, err.Error(), "lease ran out before the reply arrived")
	} else {
		_ = l.Release(ctx)
	}
	// Another name: a 10ms lease whose reply came too late is given back
	// only while it could still run, and miniredis's keys do not expire
	// by themselves.
	l, err = c.Acquire(ctx, "tiny-extend")
	require.NoError(t, err)
	require.ErrorIs(t, l.Extend(ctx, 5*time.Millisecond), redislock.ErrInvalidArgument)
	require.NoError(t, l.Release(ctx))
}
