package redislock_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/internal/redistest"
)

// serverCalls returns the calls of each command the server ran (INFO
// commandstats; a script's redis.call counts), but INFO.
func serverCalls(t testing.TB, rdb *redis.Client) map[string]int64 {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	require.NoError(t, err)
	calls := map[string]int64{}
	for line := range strings.SplitSeq(info, "\n") {
		name, fields, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") || name == "cmdstat_info" {
			continue
		}
		count, _, _ := strings.Cut(strings.TrimPrefix(fields, "calls="), ",")
		n, err := strconv.ParseInt(count, 10, 64)
		require.NoError(t, err, line)
		calls[strings.TrimPrefix(name, "cmdstat_")] = n
	}
	return calls
}

// The server-side work of a hand-over between two Clients, counted on a
// real redis-server (miniredis has no commandstats): the attempts that
// queue the waiter read the key first, so neither they nor the claim send
// a SET that would fail, nor a TYPE; the release reads the queue's head
// without a ZCARD first, and the waiter's claim leaves the queue alone (the
// release took it out). How many attempts the waiter makes before the
// release depends on timing, so the test counts the commands that must
// not be there, not a total.
func TestAHandOverBetweenClientsCostsTheServerNoSpareCommand(t *testing.T) {
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin := newRedisClient(t, srv.Addr())
	holderPod, waiterPod := newPod(t, srv.Addr()), newPod(t, srv.Addr())

	holder, err := holderPod.c.Acquire(ctx, "job", redislock.WithTTL(time.Minute))
	require.NoError(t, err)
	before := serverCalls(t, admin)
	got := waiterPod.waitFor(ctx, "job")
	polls := int64(0) // each a ZCARD
	eventually(t, 10*time.Second, func() bool { polls++; return queueLen(t, admin, "job") == 1 }, "the waiter did not queue")
	require.NoError(t, holder.Release(ctx))
	g := <-got
	require.NoError(t, g.err)
	after := serverCalls(t, admin)
	spent := func(name string) int64 { return after[name] - before[name] }

	var total int64
	for name := range after {
		total += spent(name)
	}
	t.Logf("%d server commands, %d scripts, %d ZCARD polls of the test", total, spent("evalsha"), polls)
	require.Zero(t, spent("type"), "an attempt that finds the lock held reads its type from GET")
	require.Equal(t, int64(1), spent("set"), "the hand-over's SET only: a waiter reads the key before it tries to set it")
	require.Equal(t, polls, spent("zcard"), "the release reads the queue's head, not its length")
	require.Equal(t, int64(2), spent("zrem"), "the release takes the waiter out of the queue and its expiries; the claim does not again")
	require.NoError(t, g.l.Release(ctx))
}
