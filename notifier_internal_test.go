package redislock

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redislock/redislock/internal/redistest"
	"github.com/stretchr/testify/require"
)

// Two rooms of one Client may listen to the same channel: an Acquire
// waiter's and an AcquireMulti waiter's rooms for one name both hear
// "<key>:released". Every announcement wakes both, and a room that leaves
// does not take the channel from the one that stays.
func TestTwoRoomsOnOneChannelAreBothWoken(t *testing.T) {
	t.Parallel()
	test := func(t *testing.T, rdb redis.UniversalClient, publish func(channel string) error) {
		n := newNotifier(rdb)
		channel := "lock:{job}:released"
		first := &waitRoom{key: "lock:{job}"}
		second := &waitRoom{key: "lock:{job}"}
		firstSub := n.subscribe(first, channel, "lock:{job}:released:TAG")
		secondSub := n.subscribe(second, channel)
		for _, sub := range []*subscription{firstSub, secondSub} {
			select {
			case <-sub.ready:
			case <-time.After(10 * time.Second):
				t.Fatal("a subscription was not confirmed")
			}
		}
		woken := func(wakeup <-chan struct{}, name string) {
			t.Helper()
			select {
			case <-wakeup:
			case <-time.After(10 * time.Second):
				t.Fatalf("the %s room was not woken", name)
			}
		}
		firstWakeup, secondWakeup := first.wakeup(), second.wakeup()
		require.NoError(t, publish(channel))
		woken(firstWakeup, "first")
		woken(secondWakeup, "second")

		// The first room leaves; the second still hears the channel.
		n.unsubscribe(firstSub)
		secondWakeup = second.wakeup()
		require.NoError(t, publish(channel))
		woken(secondWakeup, "second")
		n.unsubscribe(secondSub)
		n.mu.Lock()
		defer n.mu.Unlock()
		require.Empty(t, n.subs)
	}
	forEachServer(t, func(t *testing.T, addr string) {
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { _ = rdb.Close() })
		test(t, rdb, func(channel string) error { return rdb.Publish(context.Background(), channel, "1").Err() })
	})
	t.Run("cluster", func(t *testing.T) {
		cluster := redistest.SharedCluster(t)
		rdb := cluster.Client(t)
		test(t, rdb, func(channel string) error { return rdb.SPublish(context.Background(), channel, "1").Err() })
	})
}
