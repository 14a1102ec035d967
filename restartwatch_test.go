package redislock_test

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/internal/redistest"
)

// restart stops the server, so that every connection to it drops, and
// starts it again on the same address without the data (a restart without
// persistence).
func (b *backend) restart(t *testing.T) {
	t.Helper()
	if b.server != nil {
		b.server.Restart(t)
		return
	}
	b.mini.Close()
	b.mini.FlushAll()
	require.NoError(t, b.mini.Restart())
}

// watchOpen waits until the restart watch of the go-redis client has
// subscribed (PUBSUB CHANNELS works on both backends).
func watchOpen(t *testing.T, rdb *redis.Client) {
	t.Helper()
	eventually(t, 5*time.Second, func() bool {
		channels, err := rdb.PubSubChannels(context.Background(), "*restart-watch").Result()
		return err == nil && len(channels) == 1
	}, "the restart watch did not subscribe")
}

// A Client that holds a lock keeps a connection open to hear the server
// restart: the lock found gone is lost at once, not at its next extension
// (issue 14, "hearing a restart sooner"). The lock here is next extended
// 20 s after it was taken; the test gives the holder 10 s to be told, which
// only the restart watch can do.
func TestARestartIsHeardBeforeTheNextExtension(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		c := redislock.New(b.rdb, quiet)
		t.Cleanup(func() { _ = c.Close(ctx) })
		l, err := c.Acquire(ctx, "long", redislock.WithTTL(time.Minute))
		require.NoError(t, err)
		watchOpen(t, b.rdb)

		told := lossStamp(l.Context())
		began := time.Now()
		b.restart(t)
		at := told(t, 10*time.Second)
		var lost *redislock.LostError
		require.True(t, errors.As(context.Cause(l.Context()), &lost), "cause: %v", context.Cause(l.Context()))
		require.Equal(t, redislock.Expired, lost.Reason, "the key was gone after the restart")
		t.Logf("told %v after the restart began", at.Sub(began))
	})
}

// connectionsReceived is the server's count of connections accepted.
func connectionsReceived(t *testing.T, admin *redis.Client) int64 {
	t.Helper()
	info, err := admin.InfoMap(context.Background(), "stats").Result()
	require.NoError(t, err)
	n, err := strconv.ParseInt(info["Stats"]["total_connections_received"], 10, 64)
	require.NoError(t, err)
	return n
}

// The watch is one connection per go-redis client, shared by its Clients;
// short locks never open it; it stays open across a stream of locks (not
// one connection per lock) and closes after the last lock.
func TestTheRestartWatchIsOneConnectionOpenWhileLocksAreHeld(t *testing.T) {
	server := redistest.Start(t)
	admin := newRedisClient(t, server.Addr())
	rdb := newRedisClient(t, server.Addr())
	ctx := context.Background()
	a, b := redislock.New(rdb, quiet), redislock.New(rdb, quiet)
	// Short locks (released within watchDelay, 50 ms) open no watch.
	for range 200 {
		l, err := a.Acquire(ctx, "short")
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))
	}
	require.Zero(t, countPubSubClients(t, admin), "short locks opened the watch")

	// Locks held long enough to open it, one after another, from two
	// Clients: one connection for the whole stream, not one per lock.
	before := connectionsReceived(t, admin)
	for i := range 10 {
		c := a
		if i%2 == 1 {
			c = b
		}
		l, err := c.Acquire(ctx, "held")
		require.NoError(t, err)
		watchOpen(t, rdb)
		require.NoError(t, l.Release(ctx))
	}
	require.LessOrEqual(t, connectionsReceived(t, admin)-before, int64(2), "connections opened during 10 locks in a row")

	la, err := a.Acquire(ctx, "a")
	require.NoError(t, err)
	lb, err := b.Acquire(ctx, "b")
	require.NoError(t, err)
	watchOpen(t, rdb)
	require.Equal(t, 1, countPubSubClients(t, admin), "two Clients on one go-redis client share one watch")
	require.NoError(t, la.Release(ctx))
	require.NoError(t, lb.Release(ctx))
	eventually(t, 10*time.Second, func() bool { return countPubSubClients(t, admin) == 0 }, "the watch stayed open after the last lock")
	require.NoError(t, a.Close(ctx))
	require.NoError(t, b.Close(ctx))
}

// A user the server does not let subscribe (the minimal ACL has no channel)
// gets no watch: one Debug line, nothing at Warn or Error, and its locks
// are extended as before.
func TestARestartWatchTheACLRefusesIsQuiet(t *testing.T) {
	server := redistest.Start(t)
	admin := newRedisClient(t, server.Addr())
	rdb := setACLUser(t, admin, "locker", append([]string{"~lock:*", "resetchannels"}, minimalACLCommands...)...)
	ctx := context.Background()
	logs := &logRecorder{}
	clock := &extensionClock{}
	c := redislock.New(rdb, redislock.WithLogger(slog.New(logs)), redislock.WithObserver(clock))
	t.Cleanup(func() { _ = c.Close(ctx) })
	l, err := c.Acquire(ctx, "acl", redislock.WithTTL(time.Second), redislock.WithExtendInterval(20*time.Millisecond))
	require.NoError(t, err)
	eventually(t, 5*time.Second, func() bool { _, ok := logs.find(slog.LevelDebug, "no restart watch"); return ok }, "no Debug line for the refused watch: %v", logs.lines())
	eventually(t, 5*time.Second, func() bool { _, n := clock.last(); return n >= 5 }, "the lock was not extended")
	require.NoError(t, l.Release(ctx))
	for _, line := range logs.lines() {
		require.False(t, strings.HasPrefix(line, "WARN") || strings.HasPrefix(line, "ERROR"), "logged: %s", line)
	}
	refusals := 0
	for _, line := range logs.lines() {
		if strings.Contains(line, "no restart watch") {
			refusals++
		}
	}
	require.Equal(t, 1, refusals, "the refused watch was tried again: %v", logs.lines())
}
