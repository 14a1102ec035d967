package redislock

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// A campaign waits for leadership until its ctx ends: Acquire's cap on a
// wait without deadline (MaxWaitWithoutDeadline) does not apply, and its
// waits never run out. (A test that waited out the minute would prove the
// same, slowly.)
func TestACampaignHasNoWaitingCap(t *testing.T) {
	mini := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mini.Addr()})
	defer rdb.Close()
	c := New(rdb, WithRetry(LimitRetry(LinearBackoff(time.Millisecond), 1)))

	o, err := c.campaignOptions(nil)
	require.NoError(t, err)
	names, shared, keyLen, err := lockKeysShared(o.prefix, "leader")
	require.NoError(t, err)
	a := acquisition{c: c, ctx: context.Background(), parent: context.Background(), o: o, name: "leader", kind: exclusiveLock, start: time.Now()}
	a.init(names, shared, keyLen, nil)
	defer a.close()
	_, hasDeadline := a.ctx.Deadline()
	require.False(t, hasDeadline, "a campaign's wait is capped")
	require.True(t, a.waits && a.queued, "a campaign waits in the server's queue")
	for range 1000 {
		require.True(t, a.patience.begin(time.Now()), "a campaign's waits ran out")
	}

	// An Acquire with the same defaults keeps its cap.
	plain := acquisition{c: c, ctx: context.Background(), parent: context.Background(), o: &c.opts, name: "leader", kind: exclusiveLock, start: time.Now()}
	plain.init(names, shared, keyLen, nil)
	defer plain.close()
	_, hasDeadline = plain.ctx.Deadline()
	require.True(t, hasDeadline)
}
