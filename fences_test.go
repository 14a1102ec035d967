package redislock_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/internal/faultproxy"
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

// When one lock's key is found gone (a restart without persistence,
// eviction, FLUSHALL), the watchdog checks every other lock of the Client
// at once: they are told before their own next extension was due.
func TestAKeyFoundGoneHasEveryOtherLockCheckedAtOnce(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		c := redislock.New(b.rdb, quiet)
		// A is extended every 50 ms; B and C every 3 s.
		a, err := c.Acquire(ctx, "a", redislock.WithTTL(10*time.Second), redislock.WithExtendInterval(50*time.Millisecond))
		require.NoError(t, err)
		var others []*redislock.Lock
		var firstDue time.Time
		for _, name := range []string{"b", "c"} {
			acquired := time.Now()
			l, err := c.Acquire(ctx, name, redislock.WithTTL(10*time.Second), redislock.WithExtendInterval(3*time.Second))
			require.NoError(t, err)
			if firstDue.IsZero() {
				firstDue = acquired.Add(3 * time.Second)
			}
			others = append(others, l)
		}
		require.NoError(t, b.rdb.FlushAll(ctx).Err()) // the server lost its data
		waitDone(t, a.Context(), 5*time.Second)
		for _, l := range others {
			waitDone(t, l.Context(), 5*time.Second)
			require.ErrorIs(t, context.Cause(l.Context()), redislock.ErrLockLost)
		}
		require.True(t, time.Now().Before(firstDue.Add(-3*time.Second/4)), "B and C were told before their own extensions were due (less the batching slack)")
	})
}

// extendTimes records when each lock's watchdog extensions were confirmed.
type extendTimes struct {
	nopObserver
	mu     sync.Mutex
	seen   map[string][]time.Time
	failed int
}

func (o *extendTimes) ObserveExtend(e redislock.ExtendEvent) {
	if !e.Watchdog {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if e.Err != nil {
		o.failed++
		return
	}
	o.seen[e.Name] = append(o.seen[e.Name], time.Now())
}

func (o *extendTimes) failures() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.failed
}

func (o *extendTimes) first(name string) (time.Time, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.seen[name]) == 0 {
		return time.Time{}, false
	}
	return o.seen[name][0], true
}

// When Redis answers again after the watchdog could not reach it (a
// restart, a failover), every held lock is checked at once, not at its
// own next extension.
func TestRedisAnsweringAgainHasEveryLockCheckedAtOnce(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		proxy := newProxy(t, b.rdb.Options().Addr)
		rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
		t.Cleanup(func() { _ = rdb.Close() })
		obs := &extendTimes{seen: map[string][]time.Time{}}
		c := redislock.New(rdb, quiet, redislock.WithObserver(obs), redislock.WithTTL(10*time.Second))
		a, err := c.Acquire(ctx, "a", redislock.WithExtendInterval(50*time.Millisecond))
		require.NoError(t, err)
		acquired := time.Now()
		bl, err := c.Acquire(ctx, "b", redislock.WithExtendInterval(3*time.Second))
		require.NoError(t, err)

		before := a.Context()
		proxy.SetMode(faultproxy.Refuse)
		proxy.ResetAll()
		// A's extensions fail while Redis is out of reach...
		eventually(t, 5*time.Second, func() bool { return obs.failures() > 0 }, "A kept being extended through a refusing proxy")
		proxy.SetMode(faultproxy.Pass)
		// ...and the first one that reaches it again has B checked too.
		eventually(t, 5*time.Second, func() bool { _, ok := obs.first("b"); return ok }, "B was not extended")
		at, _ := obs.first("b")
		// B's own first extension comes no earlier than its interval less
		// the batching slack (a quarter of it): 2.25 s after acquiring.
		ownSchedule := acquired.Add(3*time.Second - 3*time.Second/4)
		require.True(t, at.Before(ownSchedule), "B was checked when Redis answered again (%v after acquiring), not at its own schedule", at.Sub(acquired))
		require.NoError(t, before.Err(), "nothing was lost")
		require.NoError(t, a.Release(ctx))
		require.NoError(t, bl.Release(ctx))
	})
}
