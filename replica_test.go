package redislock_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
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
	t.Run("with an empty script cache, each command and its WAIT go again as EVAL", func(t *testing.T) {
		// 5 s: as above.
		c := redislock.New(primary, quiet, redislock.WithReplicaAck(1, 5*time.Second), redislock.WithFencing())
		flush := func() { require.NoError(t, primary.ScriptFlush(ctx).Err()) }
		for _, acquire := range []func() (*redislock.Lock, error){
			func() (*redislock.Lock, error) { return c.Acquire(ctx, "flushed") },
			func() (*redislock.Lock, error) { return c.AcquireMulti(ctx, []string{"flushed:a", "flushed:b"}) },
		} {
			flush()
			l, err := acquire()
			require.NoError(t, err)
			flush()
			require.NoError(t, l.Extend(ctx, time.Minute))
			flush()
			require.NoError(t, l.Release(ctx))
		}
	})
	t.Run("too few replicas: ErrReplicaAck and nothing left held", func(t *testing.T) {
		// The one replica acknowledges within the second even on a loaded
		// machine (50 ms it missed), the second never does: it takes the second.
		c := redislock.New(primary, quiet, redislock.WithReplicaAck(2, time.Second))
		_, err := c.Acquire(ctx, "job")
		require.ErrorIs(t, err, redislock.ErrReplicaAck)
		require.NotErrorIs(t, err, redislock.ErrNotAcquired)
		require.ErrorContains(t, err, "1 of 2 replicas")
		// Given back as a waiter that gives up leaves: landed when Acquire
		// returns on a link that answers within its usual round trip, which
		// a loaded machine can exceed; then within the janitor's rounds.
		eventually(t, 10*time.Second, func() bool { return primary.Exists(ctx, "lock:{job}").Val() == 0 }, "the unacknowledged lock was not given back")
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

// A waiter whose acquisitions the replicas do not acknowledge (a replica
// catching up after a failover: ErrReplicaAck is ridden through) gives each
// one back once, unmarked (its reply was read: nothing is on its way), and
// makes its next attempt under a new token, whether WAIT answered too few
// or failed with an error reply (NOREPLICAS is ridden through too). (Before:
// a shortfall was given back twice, the second time as an attempt without
// an answer, marking the token gone; a WAIT error reply reused the token
// given back, and NOREPLICAS ended the wait.)
func TestAnUnacknowledgedAcquisitionIsGivenBackOnceUnderItsToken(t *testing.T) {
	t.Parallel()
	kinds := []familyKind{exclusiveKind, sharedKind, semaphoreKind}
	forEachBackend(t, func(t *testing.T, b *backend) {
		for _, waitFails := range []bool{false, true} {
			for _, kind := range kinds {
				what := "too few replicas"
				if waitFails {
					what = "WAIT answers NOREPLICAS"
				}
				t.Run(what+", "+kind.name, func(t *testing.T) {
					ctx, cancel := context.WithCancel(context.Background())
					defer cancel()
					name := "unacked-" + strings.ReplaceAll(kind.name, " ", "-")
					hook := &ackedAttempts{waitFails: waitFails, enough: 3, cancel: cancel}
					rdb := redis.NewClient(&redis.Options{Addr: b.rdb.Options().Addr})
					rdb.AddHook(hook)
					t.Cleanup(func() { _ = rdb.Close() })
					c := redislock.New(rdb, quiet, redislock.WithReplicaAck(1, 10*time.Millisecond))
					t.Cleanup(func() { _ = c.Close(context.Background()) })
					_, err := kind.acquire(ctx, c, name, redislock.WithRetry(redislock.LinearBackoff(time.Hour)))
					require.ErrorIs(t, err, context.Canceled, "ridden through until its ctx ended")
					require.ErrorIs(t, err, redislock.ErrReplicaAck)
					tokens := hook.taken()
					require.GreaterOrEqual(t, len(tokens), 3)
					for i, token := range tokens {
						require.NotContains(t, tokens[:i], token, "attempt %d reused a token given back", i+1)
					}
					// The last attempt's give-back may still be on its way
					// (bounded by the link's usual round trip, then handed to
					// the janitor) when the call returns: wait for both.
					eventually(t, 10*time.Second, func() bool {
						return redislock.JanitorPending(c) == 0 && b.rdb.Exists(context.Background(), "lock:{"+name+"}").Val() == 0
					}, "an unacknowledged acquisition was not given back")
					require.Empty(t, b.rdb.Keys(context.Background(), "lock:{"+name+"}:left:*").Val(), "no token marked gone")
				})
			}
		}
	})
}

// ackedAttempts is a go-redis hook on a waiter's client with WithReplicaAck:
// it keeps the token of each acquire script that took the lock (its reply
// positive or 0), with waitFails answers the WAIT sent with it NOREPLICAS,
// and calls cancel once enough attempts took it.
type ackedAttempts struct {
	waitFails bool
	enough    int
	cancel    func()
	mu        sync.Mutex
	tokens    []string
}

func (h *ackedAttempts) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *ackedAttempts) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h *ackedAttempts) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		var token string
		for _, cmd := range cmds {
			switch {
			case isAttempt(cmd) && cmd.Name() != "set":
				args := cmd.Args()
				numKeys, _ := args[2].(int)
				if n, err := cmd.(*redis.Cmd).Int64(); err == nil && n >= 0 {
					switch arg := args[3+numKeys].(type) {
					case *string:
						token = *arg
					case string:
						token = arg
					}
				}
			case cmd.Name() == "wait" && h.waitFails && token != "":
				cmd.SetErr(replyError("NOREPLICAS Not enough good replicas to write."))
			}
		}
		if token != "" {
			h.mu.Lock()
			defer h.mu.Unlock()
			if h.tokens = append(h.tokens, token); len(h.tokens) == h.enough {
				h.cancel()
			}
		}
		return err
	}
}

func (h *ackedAttempts) taken() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.tokens...)
}
