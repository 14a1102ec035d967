package redislock_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redislock/redislock"
)

func TestWithMetadataRejectsWhatCannotPrintOnOneLine(t *testing.T) {
	ctx := context.Background()
	rdb := newMini(t)
	bad := map[string]string{
		"over 4 KiB":         strings.Repeat("x", redislock.MaxMetadata+1),
		"invalid UTF-8":      "host=\xff",
		"a newline":          "host=a\npid=1",
		"a tab":              "host=a\tpid=1",
		"the unit separator": "host=a\x1fpid=1",
		"a C1 control":       "host=a\u0085",
		"a line separator":   "host=a\u2028pid=1",
		"a bidi override":    "host=\u202egnp.a",
	}
	for what, metadata := range bad {
		t.Run(what, func(t *testing.T) {
			_, err := redislock.New(rdb, quiet).Acquire(ctx, "job", redislock.WithMetadata(metadata))
			require.ErrorIs(t, err, redislock.ErrInvalidArgument)
			_, err = redislock.New(rdb, quiet, redislock.WithMetadata(metadata)).Acquire(ctx, "job")
			require.ErrorIs(t, err, redislock.ErrInvalidArgument, "as a Client default")
			require.Zero(t, rdb.Exists(ctx, "lock:{job}").Val(), "nothing was sent")
		})
	}
	t.Run("4 KiB of printable UTF-8 is fine", func(t *testing.T) {
		metadata := strings.Repeat("ü", redislock.MaxMetadata/2)
		l, err := redislock.New(rdb, quiet).Acquire(ctx, "job", redislock.WithMetadata(metadata))
		require.NoError(t, err)
		require.Equal(t, metadata, l.Metadata())
		require.NoError(t, l.Release(ctx))
	})
}

func TestMetadata(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()

		t.Run("stored in the same commands as a lock without it", func(t *testing.T) {
			for _, fenced := range []bool{false, true} {
				cycle := func(opts ...redislock.Option) []string {
					log := &commandLog{}
					rdb := newRedisClient(t, b.rdb.Options().Addr)
					rdb.AddHook(log)
					c := redislock.New(rdb, quiet)
					if fenced {
						opts = append(opts, redislock.WithFencing())
					}
					for range 2 { // the second cycle runs with the scripts loaded
						log.take()
						l, err := c.Acquire(ctx, "same", opts...)
						require.NoError(t, err)
						require.NoError(t, l.Release(ctx))
					}
					return log.take()
				}
				require.Equal(t, cycle(), cycle(redislock.WithMetadata("host=a pid=1")), "fenced=%v", fenced)
			}
		})

		t.Run("readable by anyone, with the lease, and gone with the lock", func(t *testing.T) {
			c := redislock.New(b.rdb, quiet, redislock.WithMetadata("host=default"))
			l, err := c.Acquire(ctx, "m", redislock.WithMetadata("host=web-1 pid=7"), redislock.WithTTL(time.Second))
			require.NoError(t, err)
			require.Equal(t, "host=web-1 pid=7", l.Metadata(), "the per-call option wins over the default")
			require.Len(t, l.Token(), 26, "the token alone")
			require.NotContains(t, l.Token(), "host")

			reader := redislock.New(b.rdb, quiet)
			info, err := reader.Inspect(ctx, "m")
			require.NoError(t, err)
			require.Equal(t, "host=web-1 pid=7", info.Metadata)

			require.NoError(t, l.Extend(ctx, time.Minute))
			info, err = reader.Inspect(ctx, "m")
			require.NoError(t, err)
			require.Greater(t, info.TTL, 50*time.Second, "the metadata's lease is the lock's")
			require.Equal(t, "host=web-1 pid=7", info.Metadata)

			b.expireNow(t, l.Key())
			info, err = reader.Inspect(ctx, "m")
			require.NoError(t, err)
			require.False(t, info.Held)
			require.Empty(t, info.Metadata, "expired with the lock")
			require.ErrorIs(t, l.Release(ctx), redislock.ErrNotHeld)

			l, err = c.Acquire(ctx, "m")
			require.NoError(t, err)
			require.Equal(t, "host=default", l.Metadata())
			require.NoError(t, l.Release(ctx))
		})

		t.Run("knowing the metadata gives no power over the lock", func(t *testing.T) {
			holder, err := redislock.New(b.rdb, quiet).Acquire(ctx, "secret", redislock.WithMetadata("host=a"))
			require.NoError(t, err)
			// The value a reader could build from what Inspect shows.
			require.NoError(t, b.rdb.Set(ctx, "lock:{forged}", "host=a", time.Minute).Err())
			_, err = redislock.New(b.rdb, quiet).Acquire(ctx, "secret", redislock.WithMetadata("host=a"))
			require.ErrorIs(t, err, redislock.ErrNotAcquired)
			require.NoError(t, holder.Extend(ctx, time.Minute), "still the holder's")
			require.NoError(t, holder.Release(ctx))
		})

		t.Run("a release hands the lock on with the waiter's metadata", func(t *testing.T) {
			c := redislock.New(b.rdb, quiet)
			holder, err := c.Acquire(ctx, "line", redislock.WithMetadata("host=first"))
			require.NoError(t, err)
			waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			done := waitFor(t, waitCtx, b.rdb, "line", 1, redislock.WithMetadata("host=second"))
			eventually(t, 5*time.Second, func() bool {
				info, err := c.Inspect(ctx, "line")
				return err == nil && info.Waiters == 1
			}, "the waiter queued")
			require.NoError(t, holder.Release(ctx))
			// The release script set the key to the waiter's value.
			info, err := c.Inspect(ctx, "line")
			require.NoError(t, err)
			require.True(t, info.Held)
			require.Equal(t, "host=second", info.Metadata)
			next := done()[0]
			require.NotNil(t, next)
			require.Equal(t, "host=second", next.Metadata())
			require.NoError(t, next.Release(ctx))
		})

		t.Run("logs show the token, never joined to the metadata", func(t *testing.T) {
			rec := &logRecorder{}
			l, err := redislock.New(b.rdb, redislock.WithLogger(slog.New(rec))).Acquire(ctx, "logged", redislock.WithMetadata("host=a"))
			require.NoError(t, err)
			require.NoError(t, l.Release(ctx))
			for _, line := range rec.lines() {
				require.NotContains(t, line, "\x1f", line)
			}
			line, ok := rec.find(slog.LevelDebug, "redislock: acquired")
			require.True(t, ok)
			require.Contains(t, line, "token="+l.Token())
		})
	})
}
