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

// startReplicated starts a primary and one replica and waits for the link.
func startReplicated(t *testing.T) (primary *redis.Client, replica *redistest.Server) {
	t.Helper()
	p := redistest.Start(t)
	r := redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(p.Port()))
	replicaClient := r.Client(t)
	eventually(t, 20*time.Second, func() bool {
		info := replicaClient.Info(context.Background(), "replication").Val()
		return strings.Contains(info, "master_link_status:up")
	}, "the replica never linked to the primary")
	return p.Client(t), r
}

func TestReplicaAck(t *testing.T) {
	t.Parallel()
	primary, replica := startReplicated(t)
	ctx := context.Background()

	t.Run("an acknowledged acquisition holds", func(t *testing.T) {
		// WAIT returns as soon as the replica acknowledges; 5 s is for a
		// replica a loaded machine starves (it missed 1 s).
		c := redislock.New(primary, quiet, redislock.WithReplicaAck(1, 5*time.Second), redislock.WithFencing())
		l, err := c.Acquire(ctx, "job")
		require.NoError(t, err)
		eventually(t, 5*time.Second, func() bool {
			return replica.Client(t).Get(ctx, l.Key()).Val() == l.Token()
		}, "the replica has the lock")
		require.NoError(t, l.Extend(ctx, time.Minute))
		require.NoError(t, l.Release(ctx))
	})
	t.Run("too few replicas: ErrReplicaAck and nothing left held", func(t *testing.T) {
		// The one replica acknowledges within the second even on a loaded
		// machine (50 ms it missed), the second never does: it takes the second.
		c := redislock.New(primary, quiet, redislock.WithReplicaAck(2, time.Second))
		_, err := c.Acquire(ctx, "job")
		require.ErrorIs(t, err, redislock.ErrReplicaAck)
		require.NotErrorIs(t, err, redislock.ErrNotAcquired)
		require.ErrorContains(t, err, "1 of 2 replicas")
		require.Zero(t, primary.Exists(ctx, "lock:{job}").Val(), "the unacknowledged lock was given back")
	})
	t.Run("an unacknowledged extension is not a confirmation", func(t *testing.T) {
		// 2 s: acknowledged at once while the replica lives, even on a
		// loaded machine; the WAIT after its death takes them all.
		c := redislock.New(primary, quiet, redislock.WithReplicaAck(1, 2*time.Second), redislock.WithWatchdog(false))
		l, err := c.Acquire(ctx, "job2")
		require.NoError(t, err)
		err = l.Extend(ctx, time.Minute)
		require.NoError(t, err)
		replica.Kill()
		err = l.Extend(ctx, time.Minute)
		require.ErrorIs(t, err, redislock.ErrReplicaAck)
		require.NoError(t, l.Context().Err(), "a shortfall is retried, not a loss by itself")
		require.NoError(t, l.Release(ctx))
	})
}

func TestReplicaAckIsRejectedOnACluster(t *testing.T) {
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{deadAddr(t)}})
	t.Cleanup(func() { _ = cluster.Close() })
	_, err := redislock.New(cluster, redislock.WithReplicaAck(1, time.Second)).Acquire(context.Background(), "job")
	require.ErrorIs(t, err, redislock.ErrInvalidArgument)
	for _, bad := range []redislock.Option{redislock.WithReplicaAck(0, time.Second), redislock.WithReplicaAck(1, 0)} {
		_, err := redislock.New(newMini(t), bad).Acquire(context.Background(), "job")
		require.ErrorIs(t, err, redislock.ErrInvalidArgument)
	}
}
