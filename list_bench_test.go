package redislock_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/internal/redistest"
)

// BenchmarkList lists 100,000 held locks, each with a fence counter (keys
// SCAN sees and List leaves out), on a real redis-server on loopback: one
// op is a whole List to its end. It reports the round trips the client
// sent (a pipeline is one), the commands the server ran per op (INFO
// commandstats: a script's redis.call counts, and so do the SCANs), and
// the locks listed per second.
func BenchmarkList(b *testing.B) {
	const locks = 100_000
	server := redistest.Start(b)
	admin := newRedisClient(b, server.Addr())
	ctx := context.Background()
	for start := 0; start < locks; start += 10_000 {
		pipe := admin.Pipeline()
		for i := start; i < start+10_000; i++ {
			key := fmt.Sprintf("lock:{job-%06d}", i)
			pipe.Set(ctx, key, fmt.Sprintf("TOKEN%06d\x1fhost=web-%d", i, i%7), time.Hour)
			pipe.Set(ctx, key+":fence", i, 0)
		}
		_, err := pipe.Exec(ctx)
		require.NoError(b, err)
	}
	hook := &countingHook{}
	rdb := newRedisClient(b, server.Addr())
	rdb.AddHook(hook)
	c := redislock.New(rdb, quiet)
	_, err := c.Inspect(ctx, "job-000000") // loads the script
	require.NoError(b, err)
	require.NoError(b, admin.ConfigResetStat(ctx).Err())
	_, trips0 := hook.get()

	start := time.Now()
	ops := 0
	for b.Loop() {
		n := 0
		for _, err := range c.List(ctx, "") {
			require.NoError(b, err)
			n++
		}
		require.Equal(b, locks, n)
		ops++
	}
	elapsed := time.Since(start)
	_, trips := hook.get()
	var served int64
	for _, n := range serverCalls(b, admin) {
		served += n
	}
	b.ReportMetric(float64(trips-trips0)/float64(ops), "round-trips/op")
	b.ReportMetric(float64(served)/float64(ops), "server-cmds/op")
	b.ReportMetric(float64(locks*ops)/elapsed.Seconds(), "locks/s")
}
