package redislock

import (
	"context"
	"runtime"
	"testing"
	"time"
	"weak"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// A Client with nothing held and nobody waiting holds no timer: once
// dropped, its watchdog, alarms and janitor are freed at the next GC, not
// when the old deadlines of its released locks would have passed.
func TestADroppedClientIsFreedAtOnce(t *testing.T) {
	mini := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mini.Addr()})
	defer rdb.Close()
	ctx := context.Background()

	var parts []weak.Pointer[scheduler]
	var deadlines []weak.Pointer[alarms]
	for range 10 {
		c := New(rdb, WithTTL(time.Hour)) // deadlines an hour away
		l, err := c.Acquire(ctx, "dropped")
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))
		parts = append(parts, weak.Make(c.watchdog()))
		deadlines = append(deadlines, weak.Make(c.alarms()))
	}
	live := func() int {
		n := 0
		for i := range parts {
			if parts[i].Value() != nil || deadlines[i].Value() != nil {
				n++
			}
		}
		return n
	}
	deadline := time.Now().Add(5 * time.Second)
	for live() > 0 && time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(time.Millisecond) // between GC cycles, not a synchronisation
	}
	require.Zero(t, live(), "dropped Clients still reachable (a timer armed for a released lock holds them)")
}

// After Close no timer of the Client is set, and none can be set again.
func TestCloseLeavesNoTimer(t *testing.T) {
	mini := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mini.Addr()})
	defer rdb.Close()
	ctx := context.Background()
	c := New(rdb, WithLogger(discard()))
	held, err := c.Acquire(ctx, "held", WithMaxHold(time.Hour))
	require.NoError(t, err)
	require.NoError(t, c.Close(ctx))
	for name, timer := range map[string]*lazyTimer{
		"watchdog": &c.scheduler.timer, "alarms": &c.deadlines.timer, "janitor": &c.cleaner.timer,
	} {
		require.True(t, timer.closed, name)
		require.True(t, timer.armed.IsZero(), name)
	}
	require.Equal(t, -1, held.h.maxHoldAlarm.index, "the max-hold alarm was cancelled")
	c.cleaner.addUncertain(&held.h.ref, time.Hour, nil)
	require.True(t, c.cleaner.timer.armed.IsZero(), "a closed janitor takes nothing")
}
