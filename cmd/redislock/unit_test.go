//go:build unix

package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redislock/redislock"
)

func TestLockKey(t *testing.T) {
	t.Run("the key follows the library's format", func(t *testing.T) {
		for _, tc := range []struct{ prefix, name, want string }{
			{"lock:", "job", "lock:{job}"},
			{"", "job", "{job}"},
			{"cron:", "a:b}c", "cron:{a:b}c}"},
		} {
			key, err := lockKey(tc.prefix, tc.name)
			require.NoError(t, err)
			require.Equal(t, tc.want, key)
		}
	})
	t.Run("names that the library rejects are rejected", func(t *testing.T) {
		for _, tc := range []struct{ prefix, name string }{{"lock:", ""}, {"lock:", "}x"}, {"a{}", "job"}} {
			_, err := lockKey(tc.prefix, tc.name)
			require.Error(t, err, "%q %q", tc.prefix, tc.name)
		}
	})
}

func TestIsUnreachable(t *testing.T) {
	t.Run("network errors and a server that cannot serve count as unreachable", func(t *testing.T) {
		for _, err := range []error{
			&net.OpError{Op: "dial", Err: errors.New("connection refused")},
			fmt.Errorf("redislock: acquire %q: %w", "job", redis.ErrClosed),
			fmt.Errorf("wrapped: %w", proto("LOADING Redis is loading the dataset in memory")),
			proto("MASTERDOWN Link with MASTER is down"),
			proto("CLUSTERDOWN The cluster is down"),
		} {
			require.True(t, isUnreachable(err), "%v", err)
		}
	})
	t.Run("a held lock, bad input and refusals are not", func(t *testing.T) {
		for _, err := range []error{
			fmt.Errorf("%w: held", redislock.ErrNotAcquired),
			fmt.Errorf("%w: bad", redislock.ErrInvalidArgument),
			proto("WRONGTYPE Operation against a key holding the wrong kind of value"),
			proto("NOPERM this user has no permissions"),
			proto("WRONGPASS invalid username-password pair"),
		} {
			require.False(t, isUnreachable(err), "%v", err)
		}
	})
}

// The command's fail-open rule is the library's: for every kind of
// failure, the command runs without the lock exactly when RunWithLock
// with WithFailOpen does (TRYAGAIN, a slot migration, is not unreachable:
// both refuse), and the keys it reads are the keys the library writes.
func TestFailOpenAndKeysAgreeWithTheLibrary(t *testing.T) {
	ctx := context.Background()
	for _, reply := range []string{
		"LOADING Redis is loading the dataset in memory",
		"MASTERDOWN Link with MASTER is down",
		"CLUSTERDOWN The cluster is down",
		"BUSY Redis is busy running a script",
		"TRYAGAIN Multiple keys request during rehashing of slot",
		"NOPERM this user has no permissions",
		"WRONGTYPE Operation against a key holding the wrong kind of value",
		"", // a server that is gone
	} {
		mini := miniredis.RunT(t)
		rdb := redis.NewClient(&redis.Options{Addr: mini.Addr(), MaxRetries: -1})
		if reply == "" {
			mini.Close()
		} else {
			mini.SetError(reply)
		}
		quiet := redislock.WithLogger(slog.New(slog.DiscardHandler))
		_, acquireErr := redislock.New(rdb, quiet).Acquire(ctx, "job")
		ranWithoutLock := false
		_ = redislock.New(rdb, quiet, redislock.WithFailOpen()).RunWithLock(ctx, "job", func(context.Context) error {
			ranWithoutLock = true
			return nil
		})
		require.Equal(t, ranWithoutLock, isUnreachable(acquireErr), "reply %q: %v", reply, acquireErr)
		_ = rdb.Close()
	}

	rdb := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	defer rdb.Close()
	for _, name := range []string{"job", "a:b}c", "{x}", "ünï"} {
		l, err := redislock.New(rdb).Acquire(ctx, name, redislock.WithKeyPrefix("p:"))
		require.NoError(t, err)
		key, err := lockKey("p:", name)
		require.NoError(t, err)
		require.Equal(t, l.Key(), key, name)
		require.NoError(t, l.Release(ctx))
	}
}

// proto is a Redis error reply, as go-redis returns it.
type proto string

func (e proto) Error() string { return string(e) }
func (e proto) RedisError()   {}

func TestRedisFlags(t *testing.T) {
	t.Run("each mode builds its go-redis client from the URL", func(t *testing.T) {
		for _, tc := range []struct{ mode, url, want string }{
			{"standalone", "redis://127.0.0.1:6390/2", "*redis.Client"},
			{"standalone", "rediss://user:pw@127.0.0.1:6390", "*redis.Client"},
			{"standalone", "unix:///tmp/redis.sock?db=1", "*redis.Client"},
			{"cluster", "redis://127.0.0.1:7000?addr=127.0.0.1:7001", "*redis.ClusterClient"},
			{"sentinel", "redis://127.0.0.1:26379?master_name=mymaster", "*redis.Client"},
		} {
			f := redisFlags{url: tc.url, mode: tc.mode}
			rdb, err := f.client()
			require.NoError(t, err, tc.url)
			require.Equal(t, tc.want, fmt.Sprintf("%T", rdb), tc.url)
			require.NoError(t, rdb.Close())
		}
	})
	t.Run("--redis wins over $REDIS_URL, which wins over the default", func(t *testing.T) {
		t.Setenv("REDIS_URL", "")
		require.Equal(t, defaultRedisURL, (&redisFlags{}).resolvedURL())
		t.Setenv("REDIS_URL", "redis://10.0.0.1:6379")
		require.Equal(t, "redis://10.0.0.1:6379", (&redisFlags{}).resolvedURL())
		require.Equal(t, "redis://127.0.0.2:6379", (&redisFlags{url: "redis://127.0.0.2:6379"}).resolvedURL())
	})
}

func TestChildEnv(t *testing.T) {
	t.Run("inherited REDISLOCK variables are replaced; without a lock the token is empty", func(t *testing.T) {
		env := childEnv([]string{"PATH=/bin", "REDISLOCK_FENCE=9", "REDISLOCK_TOKEN=outer", "REDISLOCK_NAMESPACE=kept"}, "job", nil)
		require.Equal(t, []string{"PATH=/bin", "REDISLOCK_NAMESPACE=kept", "REDISLOCK_NAME=job", "REDISLOCK_TOKEN="}, env)
	})
}
