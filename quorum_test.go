package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/internal/redistest"
)

// quorumServers is a set of independent redis-servers for a quorum, with
// one go-redis client per server.
type quorumServers struct {
	servers []*redistest.Server
	nodes   []*redis.Client
}

// startQuorumServers starts n redis-servers. Their clients give up at once
// on a dead node (no retries) and wait 10s for a reply: a paused node is
// cut short by the quorum's per-node timeout, not by go-redis.
func startQuorumServers(t *testing.T, n int) *quorumServers {
	t.Helper()
	q := &quorumServers{}
	for range n {
		s := redistest.Start(t)
		q.servers = append(q.servers, s)
		q.nodes = append(q.nodes, quorumNodeClient(t, s.Addr()))
	}
	return q
}

func quorumNodeClient(t *testing.T, addr string) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{
		Addr: addr, MaxRetries: -1, DialerRetries: 1,
		ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second,
	})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// clients returns the go-redis clients as NewQuorum takes them.
func (q *quorumServers) clients() []redis.UniversalClient {
	out := make([]redis.UniversalClient, len(q.nodes))
	for i, n := range q.nodes {
		out[i] = n
	}
	return out
}

// otherProcess returns a second set of go-redis clients on the same
// servers, as another process would have.
func (q *quorumServers) otherProcess(t *testing.T) []redis.UniversalClient {
	out := make([]redis.UniversalClient, len(q.servers))
	for i, s := range q.servers {
		out[i] = quorumNodeClient(t, s.Addr())
	}
	return out
}

// holding returns the indexes of the live nodes whose key holds token.
func (q *quorumServers) holding(t *testing.T, key, token string, nodes ...int) []int {
	t.Helper()
	var out []int
	for _, i := range nodes {
		v, err := q.nodes[i].Get(context.Background(), key).Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		require.NoError(t, err, "GET on node %d", i)
		if v == token {
			out = append(out, i)
		}
	}
	return out
}

// setForeign makes another holder own key on the given nodes.
func (q *quorumServers) setForeign(t *testing.T, key string, ttl time.Duration, nodes ...int) {
	t.Helper()
	for _, i := range nodes {
		require.NoError(t, q.nodes[i].Set(context.Background(), key, "someone-else", ttl).Err())
	}
}

func (q *quorumServers) del(t *testing.T, key string, nodes ...int) {
	t.Helper()
	for _, i := range nodes {
		require.NoError(t, q.nodes[i].Del(context.Background(), key).Err())
	}
}

var allFive = []int{0, 1, 2, 3, 4}

func newQuorum(t *testing.T, clients []redis.UniversalClient, opts ...redislock.Option) *redislock.Client {
	t.Helper()
	c, err := redislock.NewQuorum(clients, append([]redislock.Option{quiet}, opts...)...)
	require.NoError(t, err)
	return c
}

func TestNewQuorumRejectsBadInput(t *testing.T) {
	// No test here touches the network: every client points at a closed port.
	// Four distinct addresses: two clients on one address are refused.
	dead := deadAddrs(t, 4)
	node := func(i int) *redis.Client { return newRedisClient(t, dead[i]) }
	a, b, c := node(0), node(1), node(2)
	ctx := context.Background()

	for _, tc := range []struct {
		name    string
		clients []redis.UniversalClient
		opts    []redislock.Option
		want    string
	}{
		{"no clients", nil, nil, "at least 3"},
		{"two clients", []redis.UniversalClient{a, b}, nil, "at least 3"},
		{"a nil client", []redis.UniversalClient{a, nil, c}, nil, "client 1 is nil"},
		{"a typed nil client", []redis.UniversalClient{a, b, (*redis.Client)(nil)}, nil, "client 2 is nil"},
		{"the same client twice", []redis.UniversalClient{a, b, a}, nil, "clients 0 and 2 are the same client"},
		{"two clients on one address", []redis.UniversalClient{a, b, newRedisClient(t, b.Options().Addr)}, nil, "both talk to " + b.Options().Addr},
		{"an invalid option", []redis.UniversalClient{a, b, c}, []redislock.Option{redislock.WithTTL(0)}, "TTL"},
		{"a nil option", []redis.UniversalClient{a, b, c}, []redislock.Option{nil}, "nil Option"},
		{"fencing", []redis.UniversalClient{a, b, c}, []redislock.Option{redislock.WithFencing()}, "a counter on each node is not a fencing token"},
	} {
		t.Run(tc.name+" is an invalid argument", func(t *testing.T) {
			q, err := redislock.NewQuorum(tc.clients, tc.opts...)
			require.ErrorIs(t, err, redislock.ErrInvalidArgument)
			require.ErrorContains(t, err, tc.want)
			require.Nil(t, q)
		})
	}

	t.Run("fencing is refused per call too, with the reason", func(t *testing.T) {
		q, err := redislock.NewQuorum([]redis.UniversalClient{a, b, c}, quiet)
		require.NoError(t, err)
		_, err = q.Acquire(ctx, "job", redislock.WithFencing())
		require.ErrorIs(t, err, redislock.ErrInvalidArgument)
		require.ErrorContains(t, err, "Kleppmann")
		ran := false
		err = q.RunWithLock(ctx, "job", func(context.Context) error { ran = true; return nil },
			redislock.WithFencing(), redislock.WithFailOpen())
		require.ErrorIs(t, err, redislock.ErrInvalidArgument)
		require.False(t, ran, "no fail-open run on bad input")
	})

	t.Run("WithReplicaAck on a cluster node is refused", func(t *testing.T) {
		cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{deadAddr(t)}})
		t.Cleanup(func() { _ = cluster.Close() })
		_, err := redislock.NewQuorum([]redis.UniversalClient{a, b, cluster}, redislock.WithReplicaAck(1, time.Second))
		require.ErrorIs(t, err, redislock.ErrInvalidArgument)
		require.ErrorContains(t, err, "node 2")
	})

	t.Run("an even number of nodes is accepted", func(t *testing.T) {
		_, err := redislock.NewQuorum([]redis.UniversalClient{a, b, c, node(3)})
		require.NoError(t, err)
	})
}

func TestQuorum(t *testing.T) {
	t.Parallel()
	q := startQuorumServers(t, 5)
	ctx := context.Background()

	t.Run("a lock is taken, extended, reported and released on every node", func(t *testing.T) {
		c := newQuorum(t, q.clients(), redislock.WithTTL(10*time.Second), redislock.WithWatchdog(false))
		l, err := c.Acquire(ctx, "basic")
		require.NoError(t, err)
		require.Equal(t, allFive, q.holding(t, l.Key(), l.Token(), allFive...))

		require.NoError(t, l.Extend(ctx, 20*time.Second))
		ttl, err := l.TTL(ctx)
		require.NoError(t, err)
		require.Greater(t, ttl, 10*time.Second, "extended")
		require.LessOrEqual(t, ttl, 20*time.Second)

		require.NoError(t, l.Release(ctx))
		require.Empty(t, q.holding(t, l.Key(), l.Token(), allFive...))
		require.ErrorIs(t, l.Release(ctx), redislock.ErrNotHeld)
	})

	t.Run("RunWithLock runs fn holding the lock on the nodes", func(t *testing.T) {
		c := newQuorum(t, q.clients(), redislock.WithTTL(10*time.Second))
		var held []int
		err := c.RunWithLock(ctx, "run", func(ctx context.Context) error {
			for i, n := range q.nodes {
				if n.Exists(ctx, "lock:{run}").Val() == 1 {
					held = append(held, i)
				}
			}
			return nil
		})
		require.NoError(t, err)
		require.Equal(t, allFive, held)
		for _, n := range q.nodes {
			require.Zero(t, n.Exists(ctx, "lock:{run}").Val(), "released on every node")
		}
	})

	t.Run("a minority held by someone else does not stop the lock", func(t *testing.T) {
		q.setForeign(t, "lock:{minority}", time.Minute, 0, 1)
		t.Cleanup(func() { q.del(t, "lock:{minority}", 0, 1) })
		c := newQuorum(t, q.clients(), redislock.WithTTL(10*time.Second))
		l, err := c.Acquire(ctx, "minority")
		require.NoError(t, err)
		require.Equal(t, []int{2, 3, 4}, q.holding(t, l.Key(), l.Token(), allFive...))
		require.NoError(t, l.Release(ctx))
		require.Equal(t, []int{0, 1}, q.holding(t, l.Key(), "someone-else", allFive...), "others' keys are left alone")
	})

	t.Run("a majority held by someone else is ErrNotAcquired, and the keys we took are given back", func(t *testing.T) {
		q.setForeign(t, "lock:{majority}", time.Minute, 0, 1, 2)
		t.Cleanup(func() { q.del(t, "lock:{majority}", 0, 1, 2) })
		c := newQuorum(t, q.clients(), redislock.WithTTL(10*time.Second))
		_, err := c.Acquire(ctx, "majority")
		require.ErrorIs(t, err, redislock.ErrNotAcquired)
		var qerr *redislock.QuorumError
		require.ErrorAs(t, err, &qerr, "the counts explain the refusal")
		require.Equal(t, 3, qerr.Refused)
		require.Equal(t, 2, qerr.Agreed)
		require.Zero(t, qerr.Failed)
		require.False(t, isUnreachableForFailOpen(c, t), "a refusal never runs fn fail-open")
		for _, i := range []int{3, 4} {
			require.Zero(t, q.nodes[i].Exists(ctx, "lock:{majority}").Val(), "node %d was taken and given back", i)
		}
	})

	t.Run("a waiter retries when a majority can be free, not when every holder's key has expired", func(t *testing.T) {
		// Node 0 frees up in 300ms; nodes 1 and 2 in an hour. With nodes 3
		// and 4, node 0 makes a majority: the waiter must retry at 300ms
		// even though its backoff says an hour.
		q.setForeign(t, "lock:{wait}", 300*time.Millisecond, 0)
		q.setForeign(t, "lock:{wait}", time.Hour, 1, 2)
		t.Cleanup(func() { q.del(t, "lock:{wait}", 0, 1, 2) })
		c := newQuorum(t, q.clients(), redislock.WithTTL(10*time.Second))
		waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		l, err := c.Acquire(waitCtx, "wait", redislock.WithRetry(redislock.ExponentialBackoff(time.Hour, time.Hour)))
		require.NoError(t, err)
		require.Equal(t, []int{0, 3, 4}, q.holding(t, l.Key(), l.Token(), allFive...))
		require.NoError(t, l.Release(ctx))
	})

	t.Run("with WithReplicaAck, nodes whose replicas fall short count as failed and nothing is left held", func(t *testing.T) {
		c := newQuorum(t, q.clients(), redislock.WithTTL(10*time.Second), redislock.WithReplicaAck(1, 20*time.Millisecond))
		_, err := c.Acquire(ctx, "acked")
		var qerr *redislock.QuorumError
		require.ErrorAs(t, err, &qerr)
		require.Equal(t, 0, qerr.Agreed)
		require.Equal(t, 5, qerr.Failed)
		require.ErrorIs(t, err, redislock.ErrReplicaAck)
		require.NotErrorIs(t, err, redislock.ErrNotAcquired)
		// A node whose answer came after its timeout (a loaded machine:
		// 500ms for a SET and a 20ms WAIT) is given back in the
		// background, as a failed Acquire promises: the check polls.
		for i, n := range q.nodes {
			eventually(t, 10*time.Second, func() bool { return n.Exists(ctx, "lock:{acked}").Val() == 0 }, "node %d still holds the key", i)
		}
	})

	t.Run("the watchdog keeps the lock, and reports Expired when a majority lose the key", func(t *testing.T) {
		extensions := &extensionClock{}
		c := newQuorum(t, q.clients(), redislock.WithTTL(6*time.Second), redislock.WithObserver(extensions))
		l, err := c.Acquire(ctx, "kept")
		require.NoError(t, err)
		eventually(t, 30*time.Second, func() bool { _, n := extensions.last(); return n >= 3 },
			"the watchdog did not extend the lock three times")
		require.NoError(t, l.Context().Err(), "held across three extensions, longer than the TTL")

		q.del(t, l.Key(), 0, 1, 2)
		waitDone(t, l.Context(), 10*time.Second)
		requireLost(t, l.Context(), redislock.Expired)
		require.ErrorIs(t, l.Release(ctx), redislock.ErrNotHeld)
		require.Empty(t, q.holding(t, l.Key(), l.Token(), allFive...), "the minority's keys are deleted by the release")
	})

	t.Run("the watchdog reports Taken when a majority hold another token", func(t *testing.T) {
		c := newQuorum(t, q.clients(), redislock.WithTTL(6*time.Second))
		l, err := c.Acquire(ctx, "taken")
		require.NoError(t, err)
		q.setForeign(t, l.Key(), time.Minute, 0, 1, 2)
		t.Cleanup(func() { q.del(t, l.Key(), 0, 1, 2) })
		waitDone(t, l.Context(), 10*time.Second)
		requireLost(t, l.Context(), redislock.Taken)
		require.ErrorIs(t, l.Release(ctx), redislock.ErrNotHeld)
	})

	t.Run("four processes hammering the quorum never overlap", func(t *testing.T) {
		const goroutines, rounds = 20, 5
		var attempts atomic.Int64
		obs := &attemptCounter{attempts: &attempts}
		opts := []redislock.Option{redislock.WithTTL(10 * time.Second), redislock.WithObserver(obs),
			redislock.WithRetry(redislock.ExponentialBackoff(time.Millisecond, 20*time.Millisecond))}
		processes := []*redislock.Client{newQuorum(t, q.clients(), opts...)}
		for range 3 {
			processes = append(processes, newQuorum(t, q.otherProcess(t), opts...))
		}

		hammerCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		var inside, overlaps, done atomic.Int64
		errs := make(chan error, goroutines*rounds)
		var wg sync.WaitGroup
		start := time.Now()
		for g := range goroutines {
			c := processes[g%len(processes)]
			wg.Go(func() {
				for range rounds {
					errs <- c.RunWithLock(hammerCtx, "hammer", func(context.Context) error {
						if inside.Add(1) != 1 {
							overlaps.Add(1)
						}
						for range 20 {
							runtime.Gosched() // give an intruder every chance to get in
						}
						done.Add(1)
						inside.Add(-1)
						return nil
					})
				}
			})
		}
		wg.Wait()
		elapsed := time.Since(start)
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		require.Zero(t, overlaps.Load(), "two holders at once")
		require.Equal(t, int64(goroutines*rounds), done.Load())
		t.Logf("hammer: %d critical sections on 5 nodes from %d processes × %d goroutines in %v (%.0f/s), %d acquire attempts",
			done.Load(), len(processes), goroutines/len(processes), elapsed.Round(time.Millisecond), float64(done.Load())/elapsed.Seconds(), attempts.Load())
	})
}

// attemptCounter counts the acquire commands sent.
type attemptCounter struct {
	nopObserver
	attempts *atomic.Int64
}

func (o *attemptCounter) ObserveAcquire(e redislock.AcquireEvent) {
	o.attempts.Add(int64(e.Attempts))
}

func TestQuorumSurvivesAMinorityDownAndRefusesWithoutAMajority(t *testing.T) {
	t.Parallel()
	q := startQuorumServers(t, 5)
	ctx := context.Background()
	extensions := &extensionClock{}
	// Per-node timeouts of 1s (20s/20), generous on a loaded machine, so
	// that the live nodes always answer in time; the held lock's lease is
	// short so that its loss comes quickly.
	c := newQuorum(t, q.clients(), redislock.WithTTL(20*time.Second))
	held, err := c.Acquire(ctx, "held", redislock.WithTTL(6*time.Second), redislock.WithObserver(extensions))
	require.NoError(t, err)

	q.servers[0].Kill()
	q.servers[1].Kill()

	t.Run("with 2 of 5 nodes down, locks still work", func(t *testing.T) {
		l, err := c.Acquire(ctx, "job")
		require.NoError(t, err)
		require.Equal(t, []int{2, 3, 4}, q.holding(t, l.Key(), l.Token(), 2, 3, 4))
		require.NoError(t, l.Extend(ctx, 30*time.Second))
		ttl, err := l.TTL(ctx)
		require.NoError(t, err)
		require.Greater(t, ttl, 20*time.Second)
		require.NoError(t, l.Release(ctx))
		require.Empty(t, q.holding(t, l.Key(), l.Token(), 2, 3, 4))

		ran := false
		require.NoError(t, c.RunWithLock(ctx, "job", func(context.Context) error { ran = true; return nil }))
		require.True(t, ran)

		_, before := extensions.last()
		eventually(t, 20*time.Second, func() bool { _, n := extensions.last(); return n >= before+2 },
			"the held lock was not extended with 2 nodes down")
		require.NoError(t, held.Context().Err())
	})

	q.servers[2].Kill()

	t.Run("with 3 of 5 down, acquisition fails with the counts, not ErrNotAcquired", func(t *testing.T) {
		_, err := c.Acquire(ctx, "job")
		var qerr *redislock.QuorumError
		require.ErrorAs(t, err, &qerr)
		require.Equal(t, "acquire", qerr.Op)
		require.Equal(t, [5]int{5, 3, 2, 0, 3}, [5]int{qerr.Nodes, qerr.Needed, qerr.Agreed, qerr.Refused, qerr.Failed}, "%v", err)
		require.Len(t, qerr.Errors, 3)
		require.ErrorContains(t, err, "agreed on 2 of 5 nodes (3 needed), refused by 0, failed on 3")
		require.NotErrorIs(t, err, redislock.ErrNotAcquired)
		for _, i := range []int{3, 4} {
			require.Zero(t, q.nodes[i].Exists(ctx, "lock:{job}").Val(), "node %d was given back", i)
		}
	})

	t.Run("fail closed does not run fn; fail open does", func(t *testing.T) {
		ran := false
		err := c.RunWithLock(ctx, "job", func(context.Context) error { ran = true; return nil })
		var qerr *redislock.QuorumError
		require.ErrorAs(t, err, &qerr)
		require.False(t, ran)

		err = c.RunWithLock(ctx, "job", func(context.Context) error { ran = true; return nil }, redislock.WithFailOpen())
		require.NoError(t, err)
		require.True(t, ran)
	})

	t.Run("a held lock is lost as Unreachable, with the counts", func(t *testing.T) {
		waitDone(t, held.Context(), 20*time.Second)
		lost := requireLost(t, held.Context(), redislock.Unreachable)
		var qerr *redislock.QuorumError
		require.ErrorAs(t, lost, &qerr)
		require.Equal(t, "extend", qerr.Op)
		// The three dead nodes failed; the two live ones agreed, unless the
		// last extension before the safe deadline was cut short by that
		// deadline (its per-node timeout is 300 ms, TTL/20): on a starved
		// machine (the README's run beside two busy loops) they failed too.
		require.GreaterOrEqual(t, qerr.Failed, 3, "%v", lost)
		require.Less(t, qerr.Agreed, qerr.Needed, "%v", lost)
		require.Equal(t, 5, qerr.Agreed+qerr.Refused+qerr.Failed, "%v", lost)

		// Two nodes answer: not enough to say the lock is free, so the
		// release reports the shortfall, after deleting what it could.
		err := held.Release(ctx)
		require.ErrorAs(t, err, &qerr)
		require.Equal(t, "release", qerr.Op)
		require.Empty(t, q.holding(t, held.Key(), held.Token(), 3, 4))
	})
}

func TestQuorumWithAPausedNode(t *testing.T) {
	q := startQuorumServers(t, 5)
	ctx := context.Background()
	// Per-node timeout: 6s/20 = 300ms, against the node's 10s ReadTimeout.
	c := newQuorum(t, q.clients(), redislock.WithTTL(6*time.Second))
	warm, err := c.Acquire(ctx, "warm-up") // every pool holds a connection
	require.NoError(t, err)
	require.NoError(t, warm.Release(ctx))

	q.servers[4].Pause(t)
	t.Cleanup(func() { q.servers[4].Kill() }) // ends the calls still waiting on it

	t.Run("does not stall acquisition or release beyond the per-node timeout", func(t *testing.T) {
		start := time.Now()
		l, err := c.Acquire(ctx, "job")
		acquireTook := time.Since(start)
		require.NoError(t, err)
		require.Less(t, acquireTook, 2*time.Second, "the paused node held the acquisition up")
		require.Equal(t, []int{0, 1, 2, 3}, q.holding(t, l.Key(), l.Token(), 0, 1, 2, 3))

		start = time.Now()
		require.NoError(t, l.Release(ctx))
		releaseTook := time.Since(start)
		require.Less(t, releaseTook, 2*time.Second, "the paused node held the release up")
		t.Logf("with node 4 SIGSTOPped (ReadTimeout 10s, per-node timeout 300ms): acquire %v, release %v",
			acquireTook.Round(time.Millisecond), releaseTook.Round(time.Millisecond))
	})

	t.Run("a late acquisition on the paused node is given back once it lands", func(t *testing.T) {
		// Nodes 0 and 1 are someone else's, 2 and 3 are free, 4 is paused:
		// the attempt fails as held, gives back 2 and 3, and has a SET
		// queued on node 4 that will take the key once the node runs.
		q.setForeign(t, "lock:{late}", time.Minute, 0, 1)
		t.Cleanup(func() { q.del(t, "lock:{late}", 0, 1) })
		_, err := c.Acquire(ctx, "late", redislock.WithTTL(30*time.Second))
		require.ErrorIs(t, err, redislock.ErrNotAcquired)
		for _, i := range []int{2, 3} {
			require.Zero(t, q.nodes[i].Exists(ctx, "lock:{late}").Val(), "node %d was given back", i)
		}

		q.servers[4].Resume(t)
		// The queued SET runs before any command on a new connection, and
		// its key would live 30s: gone within 10s means the late call gave
		// it back.
		probe := quorumNodeClient(t, q.servers[4].Addr())
		eventually(t, 10*time.Second, func() bool { return probe.Exists(ctx, "lock:{late}").Val() == 0 },
			"the late acquisition on node 4 was not given back")
	})
}

// ExampleNewQuorum takes a lock on a majority of three independent Redis
// servers (in-memory ones here; in production, three servers on three hosts).
func ExampleNewQuorum() {
	var nodes []redis.UniversalClient
	for range 3 {
		rdb, stop := exampleRedis()
		defer stop()
		nodes = append(nodes, rdb)
	}
	ctx := context.Background()
	locker, err := redislock.NewQuorum(nodes, redislock.WithTTL(10*time.Second),
		redislock.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		fmt.Println(err)
		return
	}

	err = locker.RunWithLock(ctx, "nightly-report", func(ctx context.Context) error {
		fmt.Println("generating the report on a majority's word")
		return nil
	})
	var quorum *redislock.QuorumError
	switch {
	case errors.Is(err, redislock.ErrNotAcquired):
		fmt.Println("another instance holds the lock")
	case errors.As(err, &quorum):
		fmt.Printf("only %d of %d nodes agreed (%d refused, %d failed)\n", quorum.Agreed, quorum.Nodes, quorum.Refused, quorum.Failed)
	case err != nil:
		fmt.Println(err)
	}

	_, err = locker.Acquire(ctx, "nightly-report", redislock.WithFencing())
	fmt.Println("fencing on a quorum:", errors.Is(err, redislock.ErrInvalidArgument))
	// Output:
	// generating the report on a majority's word
	// fencing on a quorum: true
}

// isUnreachableForFailOpen reports whether RunWithLock with WithFailOpen ran
// fn for the held lock "majority".
func isUnreachableForFailOpen(c *redislock.Client, t *testing.T) bool {
	t.Helper()
	ran := false
	err := c.RunWithLock(context.Background(), "majority", func(context.Context) error { ran = true; return nil }, redislock.WithFailOpen())
	require.ErrorIs(t, err, redislock.ErrNotAcquired)
	return ran
}
