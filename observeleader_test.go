package redislock_test

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/internal/lockrules"
	"github.com/redislock/redislock/internal/redistest"
)

// observation is a loop over ObserveLeader on a goroutine of its own.
type observation struct {
	seen   chan redislock.HolderInfo
	cancel context.CancelFunc
	done   chan struct{} // closed when the loop has returned
}

// observe runs ObserveLeader(name) on c until the test ends (or stop).
func observe(t *testing.T, c *redislock.Client, name string) *observation {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	o := &observation{seen: make(chan redislock.HolderInfo, 16), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(o.done)
		for leader := range c.ObserveLeader(ctx, name) {
			select {
			case o.seen <- leader:
			case <-ctx.Done():
				return
			}
		}
	}()
	t.Cleanup(o.stop)
	return o
}

func (o *observation) stop() {
	o.cancel()
	<-o.done
}

// next waits for the next leader yielded. The TTLs in these tests are a
// minute, so the observer's own reads (at the lease's end) cannot bring a
// change within the 10 s allowed: only an announcement can. 10 s is far
// above a few round trips on a loaded machine.
func (o *observation) next(t *testing.T) redislock.HolderInfo {
	t.Helper()
	select {
	case leader := <-o.seen:
		return leader
	case <-time.After(10 * time.Second):
		t.Fatal("ObserveLeader yielded nothing within 10s")
	}
	return redislock.HolderInfo{}
}

func TestLeaderSaysWhoLeadsAnElection(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		ttl := time.Minute
		observer := redislock.New(newRedisClient(t, b.rdb.Options().Addr), quiet)

		_, leads, err := observer.Leader(ctx, "relay")
		require.NoError(t, err)
		require.False(t, leads, "nobody campaigns yet")

		cp := campaign(t, redislock.New(b.rdb, quiet, redislock.WithTTL(ttl), redislock.WithMetadata("pod-a")), "a", "relay")
		tm := cp.nextTerm(t, 10*time.Second)
		leader, leads, err := observer.Leader(ctx, "relay")
		require.NoError(t, err)
		require.True(t, leads)
		require.Equal(t, "pod-a", leader.Metadata)
		require.Greater(t, leader.TTL, time.Duration(0))
		require.LessOrEqual(t, leader.TTL, ttl)

		tm.finish <- nil // lead returns: leadership is given up
		require.NoError(t, cp.result(t))
		leader, leads, err = observer.Leader(ctx, "relay")
		require.NoError(t, err)
		require.False(t, leads, "released")
		require.Zero(t, leader)

		sem, err := observer.AcquireSemaphore(ctx, "pool", 2)
		require.NoError(t, err)
		defer func() { _ = sem.Release(ctx) }()
		_, _, err = observer.Leader(ctx, "pool")
		require.ErrorIs(t, err, redislock.ErrNotALock, "a semaphore is no election")
	})
}

func TestLeaderAndObserveLeaderRefuseBadInput(t *testing.T) {
	rdb := newMini(t)
	c := redislock.New(rdb, quiet)
	//lint:ignore SA1012 a nil ctx is the bad input under test
	_, _, err := c.Leader(nil, "relay") //nolint:staticcheck
	require.ErrorIs(t, err, redislock.ErrInvalidArgument)
	_, _, err = c.Leader(context.Background(), "")
	require.ErrorIs(t, err, redislock.ErrInvalidArgument)
	_, _, err = new(redislock.Client).Leader(context.Background(), "relay")
	require.Error(t, err)

	logs := &logRecorder{}
	c = redislock.New(rdb, redislock.WithLogger(slog.New(logs)))
	for _, seq := range []func(func(redislock.HolderInfo) bool){
		c.ObserveLeader(context.Background(), ""),
		c.ObserveLeader(nil, "relay"), //nolint:staticcheck // the bad input under test
		new(redislock.Client).ObserveLeader(context.Background(), "relay"),
	} {
		for leader := range seq {
			t.Fatalf("yielded %v for bad input", leader)
		}
	}
	_, logged := logs.find(slog.LevelError, "observe leader: nothing to observe")
	require.True(t, logged, "the reason is logged")
}

func TestObserveLeaderFollowsTheElection(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		addr := b.rdb.Options().Addr
		// Each candidate and the observer on a Client and connections of
		// their own, as pods would be.
		candidate := func(who string) *redislock.Client {
			return redislock.New(newRedisClient(t, addr), quiet, redislock.WithTTL(time.Minute), redislock.WithMetadata(who))
		}
		observerPod := newPod(t, addr)

		t.Run("the leader at once, then nobody when it gives up", func(t *testing.T) {
			o := observe(t, observerPod.c, "none-then-a")
			require.Zero(t, o.next(t), "nobody leads yet")
			cp := campaign(t, candidate("pod-a"), "a", "none-then-a")
			tm := cp.nextTerm(t, 10*time.Second)
			require.Equal(t, "pod-a", o.next(t).Metadata, "the term's start is announced")
			tm.finish <- nil
			require.NoError(t, cp.result(t))
			require.Zero(t, o.next(t), "a release with nobody in line, announced by Elect")
		})

		t.Run("the leader's Client closed", func(t *testing.T) {
			// Close ends the term (lead returns) before it releases the lock:
			// its scripts are held up 200 ms here, so that an announcement
			// made as lead returns would come before the release.
			slow := &slowScripts{}
			rdb := newRedisClient(t, addr)
			rdb.AddHook(slow)
			leaderClient := redislock.New(rdb, quiet, redislock.WithTTL(time.Minute), redislock.WithMetadata("pod-a"))
			a := campaign(t, leaderClient, "a", "closed")
			a.nextTerm(t, 10*time.Second)
			o := observe(t, observerPod.c, "closed")
			require.Equal(t, "pod-a", o.next(t).Metadata)
			slow.on.Store(true)
			require.NoError(t, leaderClient.Close(ctx))
			require.ErrorIs(t, a.result(t), redislock.ErrClosed)
			require.Zero(t, o.next(t), "Close released it, and Elect announced the term's end")
		})

		t.Run("a hand-over to another Client's campaign, and nothing while nothing changes", func(t *testing.T) {
			a := campaign(t, candidate("pod-a"), "a", "handover")
			termA := a.nextTerm(t, 10*time.Second)
			bCampaign := campaign(t, candidate("pod-b"), "b", "handover")
			eventually(t, 10*time.Second, func() bool { return queueLen(t, b.rdb, "handover") == 1 }, "pod-b did not queue")
			o := observe(t, observerPod.c, "handover")
			require.Equal(t, "pod-a", o.next(t).Metadata)

			// An announcement that changes nothing: the observer reads, and yields nothing.
			observerPod.cmds.take()
			require.NoError(t, b.rdb.Publish(ctx, lockrules.Leader("lock:{handover}"), "1").Err())
			eventually(t, 10*time.Second, func() bool { return countScripts(observerPod.cmds.take()) > 0 }, "the observer did not read at the announcement")

			termA.finish <- nil // handed to pod-b, waiting in line
			require.Equal(t, "pod-b", o.next(t).Metadata, "the next yield is the change, not the same leader again")
			bCampaign.nextTerm(t, 10*time.Second)
		})

		t.Run("a Break, with and without a campaign in line", func(t *testing.T) {
			operator := redislock.New(newRedisClient(t, addr), quiet)
			a := campaign(t, candidate("pod-a"), "a", "broken")
			a.nextTerm(t, 10*time.Second)
			o := observe(t, observerPod.c, "broken")
			require.Equal(t, "pod-a", o.next(t).Metadata)
			bCampaign := campaign(t, candidate("pod-b"), "b", "broken")
			eventually(t, 10*time.Second, func() bool { return queueLen(t, b.rdb, "broken") == 1 }, "pod-b did not queue")

			_, err := operator.Break(ctx, "broken") // handed to pod-b, which announces its term
			require.NoError(t, err)
			require.Equal(t, "pod-b", o.next(t).Metadata)
			bCampaign.nextTerm(t, 10*time.Second)

			// pod-a learns of its loss at its next extension (20 s away) and
			// campaigns again: stop it, so that the next break leaves nobody.
			a.cancel(nil)
			_ = a.result(t)
			_, err = operator.Break(ctx, "broken") // nobody in line: announced as a release
			require.NoError(t, err)
			require.Zero(t, o.next(t))
		})

		// BreakHolder of a leader with nobody in line is heard at once too:
		// its release alone would announce nothing, and the broken leader
		// learns of it only at its next extension (20 s away).
		t.Run("a BreakHolder of the leader, nobody in line", func(t *testing.T) {
			operator := redislock.New(newRedisClient(t, addr), quiet)
			a := campaign(t, candidate("pod-a"), "a", "held-by-id")
			a.nextTerm(t, 10*time.Second)
			o := observe(t, observerPod.c, "held-by-id")
			leader := o.next(t)
			require.Equal(t, "pod-a", leader.Metadata)
			_, err := operator.BreakHolder(ctx, "held-by-id", leader.ID)
			require.NoError(t, err)
			require.Zero(t, o.next(t))
			a.cancel(nil)
			_ = a.result(t)
		})

		t.Run("a leader that dies is gone at its lease's end", func(t *testing.T) {
			const lease = 500 * time.Millisecond
			dead, err := redislock.New(newRedisClient(t, addr), quiet, redislock.WithWatchdog(false), redislock.WithTTL(lease),
				redislock.WithMetadata("pod-dead")).Acquire(ctx, "dies")
			require.NoError(t, err)
			// It died: never released (kept reachable, as a Lock dropped while
			// held is released by its Client).
			defer func() { _ = dead.Release(ctx) }()
			// The observer's own TTL is a minute: only the lease it saw
			// can make it read within the 10 s next allows.
			o := observe(t, redislock.New(newRedisClient(t, addr), quiet, redislock.WithTTL(time.Minute)), "dies")
			require.Equal(t, "pod-dead", o.next(t).Metadata)
			if b.mini != nil {
				b.mini.FastForward(lease) // miniredis' clock moves only when told
			}
			// No announcement: only the read at the lease's end sees it.
			require.Zero(t, o.next(t))
		})
	})
}

func TestObserveLeaderLeavesNothingRunning(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		channel := lockrules.Leader("lock:{quiet}")
		subscribers := func() int64 { return b.rdb.PubSubNumSub(ctx, channel).Val()[channel] }
		// A holder without a watchdog, whose Client starts no goroutine of
		// its own while the test counts them.
		holder, err := redislock.New(b.rdb, quiet, redislock.WithWatchdog(false), redislock.WithTTL(time.Minute),
			redislock.WithMetadata("pod-a")).Acquire(ctx, "quiet")
		require.NoError(t, err)
		defer func() { _ = holder.Release(ctx) }() // held (not dropped, which releases it) until the end
		c := redislock.New(newRedisClient(t, b.rdb.Options().Addr), quiet)
		// Subscribing once leaves the Client's own connections in place.
		for range c.ObserveLeader(ctx, "quiet") {
			break
		}
		eventually(t, 10*time.Second, func() bool { return subscribers() == 0 }, "still subscribed")
		before := goleak.IgnoreCurrent()

		t.Run("when the loop breaks", func(t *testing.T) {
			for leader := range c.ObserveLeader(ctx, "quiet") {
				require.Equal(t, "pod-a", leader.Metadata)
				eventually(t, 10*time.Second, func() bool { return subscribers() == 1 }, "it does not listen while it runs")
				break
			}
			eventually(t, 10*time.Second, func() bool { return subscribers() == 0 }, "still subscribed after the loop broke")
			goleak.VerifyNone(t, before)
		})
		t.Run("when ctx ends", func(t *testing.T) {
			o := observe(t, c, "quiet")
			require.Equal(t, "pod-a", o.next(t).Metadata)
			o.stop() // cancels ctx and waits for the loop to return
			eventually(t, 10*time.Second, func() bool { return subscribers() == 0 }, "still subscribed after ctx ended")
			goleak.VerifyNone(t, before)
		})
		t.Run("when the Client is closed", func(t *testing.T) {
			o := observe(t, c, "quiet")
			require.Equal(t, "pod-a", o.next(t).Metadata)
			require.NoError(t, c.Close(ctx))
			select {
			case <-o.done:
			case <-time.After(10 * time.Second):
				t.Fatal("the loop goes on after Close")
			}
			eventually(t, 10*time.Second, func() bool { return subscribers() == 0 }, "still subscribed after Close")
			for leader := range c.ObserveLeader(ctx, "quiet") {
				t.Fatalf("a closed Client yielded %v", leader)
			}
		})
	})
}

// On a cluster the announcements are sharded (SPUBLISH, SSUBSCRIBE on the
// lock's node): the same events come through.
func TestObserveLeaderOnACluster(t *testing.T) {
	t.Parallel()
	cluster := redistest.SharedCluster(t)
	candidate := func(who string) *redislock.Client {
		return redislock.New(cluster.Client(t), quiet, redislock.WithTTL(time.Minute), redislock.WithMetadata(who))
	}
	o := observe(t, redislock.New(cluster.Client(t), quiet), "relay")
	require.Zero(t, o.next(t))
	a := campaign(t, candidate("pod-a"), "a", "relay")
	termA := a.nextTerm(t, 10*time.Second)
	require.Equal(t, "pod-a", o.next(t).Metadata)
	b := campaign(t, candidate("pod-b"), "b", "relay")
	rdb := cluster.Client(t)
	eventually(t, 10*time.Second, func() bool { return rdb.ZCard(context.Background(), queueKey("relay")).Val() == 1 }, "pod-b did not queue")
	termA.finish <- nil
	require.Equal(t, "pod-b", o.next(t).Metadata, "the hand-over")
	b.nextTerm(t, 10*time.Second).finish <- nil
	require.NoError(t, b.result(t))
	require.Zero(t, o.next(t), "pod-b gave up, nobody in line")
}

// A quorum Client has no announcements: its observer sees a change at its
// own reads, at the lease's end (TTL 1 s here, so within 10 s on a loaded
// machine) and every third of it while nobody leads.
func TestLeaderAndObserveLeaderOnAQuorum(t *testing.T) {
	backends := []struct {
		name  string
		nodes func(t *testing.T) []string
	}{
		{"miniredis", func(t *testing.T) []string {
			return []string{miniredis.RunT(t).Addr(), miniredis.RunT(t).Addr(), miniredis.RunT(t).Addr()}
		}},
		{"redis-server", func(t *testing.T) []string {
			var out []string
			for _, s := range startQuorumServers(t, 3).servers {
				out = append(out, s.Addr())
			}
			return out
		}},
	}
	for _, backend := range backends {
		t.Run(backend.name, func(t *testing.T) {
			nodes := backend.nodes(t)
			process := func(opts ...redislock.Option) *redislock.Client {
				var clients []redis.UniversalClient
				for _, addr := range nodes {
					clients = append(clients, quorumNodeClient(t, addr))
				}
				return newQuorum(t, clients, append([]redislock.Option{redislock.WithTTL(time.Second)}, opts...)...)
			}
			observer := process()
			o := observe(t, observer, "relay")
			require.Zero(t, o.next(t))
			a := campaign(t, process(redislock.WithMetadata("pod-a")), "a", "relay")
			termA := a.nextTerm(t, 10*time.Second)
			leader, leads, err := observer.Leader(context.Background(), "relay")
			require.NoError(t, err)
			require.True(t, leads)
			require.Equal(t, "pod-a", leader.Metadata)
			require.Equal(t, "pod-a", o.next(t).Metadata)
			termA.finish <- nil
			require.NoError(t, a.result(t))
			require.Zero(t, o.next(t), "released on every node")
			campaign(t, process(redislock.WithMetadata("pod-b")), "b", "relay").nextTerm(t, 10*time.Second)
			require.Equal(t, "pod-b", o.next(t).Metadata)
		})
	}
}

// slowScripts is a go-redis hook that, once on, holds every script call up
// for 200 ms (a slow link for the scripts alone: PUBLISH goes at once).
type slowScripts struct{ on atomic.Bool }

func (h *slowScripts) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *slowScripts) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.delay([]redis.Cmder{cmd})
		return next(ctx, cmd)
	}
}

func (h *slowScripts) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.delay(cmds)
		return next(ctx, cmds)
	}
}

func (h *slowScripts) delay(cmds []redis.Cmder) {
	for _, cmd := range cmds {
		if h.on.Load() && (cmd.Name() == "evalsha" || cmd.Name() == "eval") {
			time.Sleep(200 * time.Millisecond) // the injected slowness, not a synchronisation
			return
		}
	}
}
