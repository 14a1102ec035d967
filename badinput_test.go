package redislock_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redislock/redislock"
)

func TestBadInputIsAClearErrorWithoutARoundTrip(t *testing.T) {
	mini := miniredis.RunT(t)
	rdb := newRedisClient(t, mini.Addr())
	ctx := context.Background()
	noop := func(context.Context) error { return nil }

	cases := []struct {
		name string
		call func() error
		want string
	}{
		{"empty name", func() error { _, err := redislock.New(rdb).Acquire(ctx, ""); return err }, "empty lock name"},
		{"name that empties the hash tag", func() error { _, err := redislock.New(rdb).Acquire(ctx, "}x"); return err }, "empty hash tag"},
		{"TTL below 10ms", func() error {
			_, err := redislock.New(rdb).Acquire(ctx, "a", redislock.WithTTL(time.Microsecond))
			return err
		}, "below the 10ms minimum"},
		{"zero TTL", func() error { _, err := redislock.New(rdb, redislock.WithTTL(0)).Acquire(ctx, "a"); return err }, "below the 10ms minimum"},
		{"negative TTL", func() error {
			_, err := redislock.New(rdb).Acquire(ctx, "a", redislock.WithTTL(-time.Second))
			return err
		}, "below the 10ms minimum"},
		{"TTL of 292 years (math.MaxInt64)", func() error {
			_, err := redislock.New(rdb).Acquire(ctx, "a", redislock.WithTTL(math.MaxInt64))
			return err
		}, "above the 24h maximum"},
		{"TTL just above the maximum", func() error {
			_, err := redislock.New(rdb, redislock.WithTTL(redislock.MaxTTL+time.Millisecond)).Acquire(ctx, "a")
			return err
		}, "TTL 24h0m0.001s is above the 24h maximum"},
		{"TTL above the maximum on RunWithLock", func() error {
			return redislock.New(rdb).RunWithLock(ctx, "a", noop, redislock.WithTTL(1000*time.Hour))
		}, "above the 24h maximum"},
		{"extend interval equal to the TTL", func() error {
			_, err := redislock.New(rdb).Acquire(ctx, "a", redislock.WithTTL(time.Second), redislock.WithExtendInterval(time.Second))
			return err
		}, "must be shorter than the TTL"},
		{"extend interval above the TTL", func() error {
			_, err := redislock.New(rdb, redislock.WithExtendInterval(time.Minute)).Acquire(ctx, "a")
			return err
		}, "must be shorter than the TTL"},
		{"negative extend interval", func() error {
			_, err := redislock.New(rdb).Acquire(ctx, "a", redislock.WithExtendInterval(-1))
			return err
		}, "below the 1ms minimum"},
		{"extend interval of 1ns", func() error {
			_, err := redislock.New(rdb).Acquire(ctx, "a", redislock.WithExtendInterval(time.Nanosecond))
			return err
		}, "below the 1ms minimum"},
		{"negative max hold", func() error { _, err := redislock.New(rdb).Acquire(ctx, "a", redislock.WithMaxHold(-1)); return err }, "negative max hold"},
		{"nil client", func() error { _, err := redislock.New(nil).Acquire(ctx, "a"); return err }, "nil redis client"},
		{"typed nil client", func() error { _, err := redislock.New((*redis.Client)(nil)).Acquire(ctx, "a"); return err }, "nil redis client"},
		{"nil cluster client", func() error {
			return redislock.New((*redis.ClusterClient)(nil)).RunWithLock(ctx, "a", noop)
		}, "nil redis client"},
		{"nil fn", func() error { return redislock.New(rdb).RunWithLock(ctx, "a", nil) }, "nil fn"},
		{"nil context", func() error {
			//lint:ignore SA1012 the point of the test
			_, err := redislock.New(rdb).Acquire(nil, "a") //nolint:staticcheck
			return err
		}, "nil context"},
		{"nil option", func() error { _, err := redislock.New(rdb).Acquire(ctx, "a", nil); return err }, "nil Option"},
		{"nil retry strategy", func() error { _, err := redislock.New(rdb).Acquire(ctx, "a", redislock.WithRetry(nil)); return err }, "nil RetryStrategy"},
		{"nil logger", func() error { _, err := redislock.New(rdb, redislock.WithLogger(nil)).Acquire(ctx, "a"); return err }, "nil logger"},
		{"LimitRetry with negative attempts", func() error {
			_, err := redislock.New(rdb).Acquire(ctx, "a", redislock.WithRetry(redislock.LimitRetry(redislock.NoRetry(), -1)))
			return err
		}, "attempts -1 must not be negative"},
		{"LimitRetry of nil", func() error {
			_, err := redislock.New(rdb).Acquire(ctx, "a", redislock.WithRetry(redislock.LimitRetry(nil, 1)))
			return err
		}, "LimitRetry of a nil strategy"},
		{"LimitRetry of an invalid strategy", func() error {
			_, err := redislock.New(rdb).Acquire(ctx, "a", redislock.WithRetry(redislock.LimitRetry(redislock.LinearBackoff(-1), 1)))
			return err
		}, "LinearBackoff interval"},
		{"zero LinearBackoff", func() error {
			_, err := redislock.New(rdb).Acquire(ctx, "a", redislock.WithRetry(redislock.LinearBackoff(0)))
			return err
		}, "LinearBackoff interval 0s must be positive"},
		{"ExponentialBackoff with max below min", func() error {
			_, err := redislock.New(rdb).Acquire(ctx, "a", redislock.WithRetry(redislock.ExponentialBackoff(time.Second, time.Millisecond)))
			return err
		}, "needs 0 < min <= max"},
		{"ExponentialBackoff with zero min", func() error {
			_, err := redislock.New(rdb).Acquire(ctx, "a", redislock.WithRetry(redislock.ExponentialBackoff(0, time.Second)))
			return err
		}, "needs 0 < min <= max"},
		{"fail open on Acquire", func() error { _, err := redislock.New(rdb).Acquire(ctx, "a", redislock.WithFailOpen()); return err }, "RunWithLock only"},
		{"metadata over 4 KiB", func() error {
			_, err := redislock.New(rdb).Acquire(ctx, "a", redislock.WithMetadata(strings.Repeat("x", 4097)))
			return err
		}, "over the 4096-byte limit"},
		{"metadata with a newline", func() error {
			_, err := redislock.New(rdb, redislock.WithMetadata("a\nb")).Acquire(ctx, "a")
			return err
		}, "control character U+000A"},
		{"Inspect of an empty name", func() error { _, err := redislock.New(rdb).Inspect(ctx, ""); return err }, "empty lock name"},
		{"Break of a name that empties the hash tag", func() error { _, err := redislock.New(rdb).Break(ctx, "}x"); return err }, "empty hash tag"},
		{"Inspect on a nil client", func() error { _, err := redislock.New(nil).Inspect(ctx, "a"); return err }, "nil redis client"},
		{"Break with a nil context", func() error {
			//lint:ignore SA1012 the point of the test
			_, err := redislock.New(rdb).Break(nil, "a") //nolint:staticcheck
			return err
		}, "nil context"},
		{"bad option on RunWithLock", func() error {
			return redislock.New(rdb).RunWithLock(ctx, "a", noop, redislock.WithTTL(0))
		}, "below the 10ms minimum"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := mini.CommandCount()
			err := tc.call()
			require.ErrorIs(t, err, redislock.ErrInvalidArgument)
			require.ErrorContains(t, err, tc.want)
			require.Equal(t, before, mini.CommandCount(), "nothing was sent")
		})
	}

	t.Run("the maximum TTL itself is accepted", func(t *testing.T) {
		l, err := redislock.New(rdb, quiet).Acquire(ctx, "longest", redislock.WithTTL(redislock.MaxTTL), redislock.WithWatchdog(false))
		require.NoError(t, err)
		require.Equal(t, redislock.MaxTTL, mini.TTL("lock:{longest}"))
		require.NoError(t, l.Extend(ctx, redislock.MaxTTL))
		require.NoError(t, l.Release(ctx))
	})

	t.Run("already cancelled context", func(t *testing.T) {
		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		before := mini.CommandCount()
		_, err := redislock.New(rdb).Acquire(cancelled, "a")
		require.ErrorIs(t, err, context.Canceled)
		require.False(t, errors.Is(err, redislock.ErrNotAcquired), "no attempt saw the lock held")
		require.Equal(t, before, mini.CommandCount(), "nothing was sent")
	})

	t.Run("bad arguments on a held lock", func(t *testing.T) {
		l, err := redislock.New(rdb, quiet).Acquire(ctx, "held")
		require.NoError(t, err)
		before := mini.CommandCount()
		require.ErrorIs(t, l.Extend(ctx, 0), redislock.ErrInvalidArgument)
		require.ErrorIs(t, l.Extend(ctx, -time.Second), redislock.ErrInvalidArgument)
		require.ErrorContains(t, l.Extend(ctx, time.Millisecond), "Extend TTL 1ms is below the 10ms minimum")
		require.ErrorIs(t, l.Extend(ctx, math.MaxInt64), redislock.ErrInvalidArgument)
		require.ErrorContains(t, l.Extend(ctx, redislock.MaxTTL+time.Second), "Extend TTL 24h0m1s is above the 24h maximum")
		//lint:ignore SA1012 the point of the test
		require.ErrorIs(t, l.Extend(nil, time.Second), redislock.ErrInvalidArgument) //nolint:staticcheck
		//lint:ignore SA1012 the point of the test
		require.ErrorIs(t, l.Release(nil), redislock.ErrInvalidArgument) //nolint:staticcheck
		//lint:ignore SA1012 the point of the test
		_, err = l.TTL(nil) //nolint:staticcheck
		require.ErrorIs(t, err, redislock.ErrInvalidArgument)
		require.Equal(t, before, mini.CommandCount(), "nothing was sent")
		require.NoError(t, l.Release(ctx))
	})
}
