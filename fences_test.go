package redislock_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/internal/redistest"
)

// Fences never go backwards for a name, whatever happened to the counter:
// lost (a restart without persistence, eviction, DEL), wiped with
// everything else (FLUSHALL), or back at an older value (a restore from an
// older snapshot, a replica that missed writes). The acquire script raises
// the counter to the server's clock in microseconds.
func TestFencesNeverGoBackwards(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		c := redislock.New(b.rdb, quiet, redislock.WithFencing())
		name := "settlement"
		counter := "lock:{" + name + "}:fence"
		take := func() int64 {
			t.Helper()
			l, err := c.Acquire(ctx, name)
			require.NoError(t, err)
			require.NoError(t, l.Release(ctx))
			return l.Fence()
		}
		last := take()
		for _, fault := range []struct {
			name   string
			inject func(last int64)
		}{
			{"the counter deleted (eviction, a restart without persistence)", func(int64) { b.rdb.Del(ctx, counter) }},
			{"FLUSHALL", func(int64) { b.rdb.FlushAll(ctx) }},
			{"the counter back at an older value (an older snapshot, a replica)", func(last int64) {
				b.rdb.Set(ctx, counter, strconv.FormatInt(last-1_000_000, 10), 0)
			}},
			{"the counter back at 1", func(int64) { b.rdb.Set(ctx, counter, "1", 0) }},
			{"nothing", func(int64) {}},
		} {
			fault.inject(last)
			fence := take()
			require.Greater(t, fence, last, "after %s", fault.name)
			require.Equal(t, strconv.FormatInt(fence, 10), b.rdb.Get(ctx, counter).Val(), "the counter keeps the fence handed out")
			last = fence
		}
		// About the server's clock in µs: 1.8e15 in 2026, below 2^53 (exact
		// in a JavaScript number) until the 2250s.
		require.Greater(t, last, int64(1_700_000_000_000_000))
		require.Less(t, last, int64(1)<<53)
	})
}

// The guarantee rests on the server's clock: miniredis's TIME follows its
// own clock, which the test sets. A clock that steps back by more than the
// counter's outage lasted can repeat fences, as documented.
func TestFencesFollowTheServerClock(t *testing.T) {
	mini := newMiniServer(t)
	rdb := newRedisClient(t, mini.Addr())
	c := redislock.New(rdb, quiet, redislock.WithFencing())
	ctx := context.Background()
	take := func() int64 {
		t.Helper()
		l, err := c.Acquire(ctx, "job")
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))
		return l.Fence()
	}
	mini.SetTime(frozenClock)
	require.Equal(t, frozenMicros, take(), "a new counter starts at the server's clock")
	require.Equal(t, frozenMicros+1, take(), "then counts up while the clock stands still")
	mini.SetTime(frozenClock.Add(time.Second))
	require.Equal(t, frozenMicros+1_000_000, take(), "and jumps to the clock when it is ahead")

	// The counter lost and the clock stepped back an hour: the limit of
	// the guarantee.
	mini.FlushAll()
	mini.SetTime(frozenClock.Add(-time.Hour))
	require.Less(t, take(), frozenMicros, "a clock stepped back past the outage repeats fences")
}

// A user who may not read the server's clock gets an error for a fenced
// lock (no fence that could repeat one), and nothing is left held.
func TestAFencedLockNeedsTheServersClock(t *testing.T) {
	server := redistest.Start(t)
	admin := newRedisClient(t, server.Addr())
	rules := []string{"~*"}
	for _, r := range minimalACLCommands {
		if r != "+time" {
			rules = append(rules, r)
		}
	}
	noTime := setACLUser(t, admin, "notime", rules...)
	ctx := context.Background()
	c := redislock.New(noTime, quiet)
	plain, err := c.Acquire(ctx, "job")
	require.NoError(t, err, "a plain lock needs no clock")
	require.NoError(t, plain.Release(ctx))
	_, err = c.Acquire(ctx, "job", redislock.WithFencing())
	require.ErrorContains(t, err, "a fence needs the server clock (TIME)")
	require.NotErrorIs(t, err, redislock.ErrNotAcquired)
	require.Zero(t, admin.Exists(ctx, "lock:{job}").Val(), "nothing left held")
}
