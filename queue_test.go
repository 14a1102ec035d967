package redislock_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/internal/redistest"
)

// pod is one process's Client on its own connections, with a log of the
// commands it sends.
type pod struct {
	c    *redislock.Client
	cmds *commandLog
}

func newPod(t *testing.T, addr string) pod {
	t.Helper()
	rdb := newRedisClient(t, addr)
	cmds := &commandLog{}
	rdb.AddHook(cmds)
	return pod{redislock.New(rdb, quiet), cmds}
}

// waitFor starts an Acquire of name in the background, with an hour of
// backoff: only a hand-over or a release announcement wakes it in time.
// The lock it gets is sent on the channel; the caller releases it.
func (p pod) waitFor(ctx context.Context, name string, opts ...redislock.Option) <-chan acquired {
	got := make(chan acquired, 1)
	go func() {
		opts = append([]redislock.Option{redislock.WithRetry(redislock.LinearBackoff(time.Hour))}, opts...)
		l, err := p.c.Acquire(ctx, name, opts...)
		got <- acquired{l, err}
	}()
	return got
}

type acquired struct {
	l   *redislock.Lock
	err error
}

func queueLen(t *testing.T, rdb *redis.Client, name string) int64 {
	t.Helper()
	return rdb.ZCard(context.Background(), "lock:{"+name+"}:q").Val()
}

func TestAReleaseHandsTheLockToTheFirstWaiterInLine(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		addr := b.rdb.Options().Addr
		holderPod, firstPod, secondPod := newPod(t, addr), newPod(t, addr), newPod(t, addr)

		holder, err := holderPod.c.Acquire(ctx, "job", redislock.WithTTL(time.Minute), redislock.WithFencing())
		require.NoError(t, err)
		first := firstPod.waitFor(ctx, "job", redislock.WithFencing())
		eventually(t, 10*time.Second, func() bool { return queueLen(t, b.rdb, "job") == 1 }, "the first waiter did not queue")
		second := secondPod.waitFor(ctx, "job", redislock.WithFencing())
		eventually(t, 10*time.Second, func() bool { return queueLen(t, b.rdb, "job") == 2 }, "the second waiter did not queue")
		// Each waiter tries, subscribes, and tries once more once the
		// subscription is confirmed; from then on it waits.
		for _, p := range []pod{firstPod, secondPod} {
			eventually(t, 10*time.Second, func() bool { return p.cmds.count() >= 2 }, "a waiter did not settle")
			p.cmds.take()
		}
		eventually(t, 10*time.Second, func() bool {
			return b.rdb.PubSubNumSub(ctx, "lock:{job}:released").Val()["lock:{job}:released"] == 2
		}, "the waiters are not listening")

		require.NoError(t, holder.Release(ctx))
		got := <-first
		require.NoError(t, got.err)
		require.Greater(t, got.l.Fence(), holder.Fence(), "the hand-over gives a fence of its own")
		require.Equal(t, got.l.Token(), b.rdb.Get(ctx, "lock:{job}").Val())
		require.Greater(t, b.rdb.PTTL(ctx, "lock:{job}").Val(), 20*time.Second, "the waiter renewed the lease to its own TTL")
		require.Equal(t, []string{"evalsha"}, firstPod.cmds.take(), "one command to claim the lock handed over")
		require.Equal(t, int64(1), queueLen(t, b.rdb, "job"), "the second waiter is still in line")
		select {
		case g := <-second:
			t.Fatalf("the second waiter got %v while the first holds the lock", g)
		default:
		}
		require.Empty(t, secondPod.cmds.take(), "a hand-over to someone else does not wake a waiter")

		require.NoError(t, got.l.Release(ctx))
		got = <-second
		require.NoError(t, got.err)
		require.Greater(t, got.l.Fence(), holder.Fence()+1)
		require.NoError(t, got.l.Release(ctx))
		require.Zero(t, b.rdb.Exists(ctx, "lock:{job}", "lock:{job}:q", "lock:{job}:qx").Val(), "nothing left behind")
	})
}

// A waiter the lock is handed to takes it when the announcement comes,
// without the claim's round trip, and its watchdog then extends the
// hand-over's lease (1 s) to the waiter's TTL; so does a waiter a Break,
// or the last shared holder's release, hands the lock to. (A fenced
// waiter claims: the test above.)
func TestAWaiterHandedTheLockTakesItWithoutAClaim(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		addr := b.rdb.Options().Addr
		holderPod := newPod(t, addr)
		rdb := newRedisClient(t, addr)
		attempts := redislock.CountAcquireScript()
		rdb.AddHook(attempts)
		waiter := redislock.New(rdb, quiet)

		release := func(ctx context.Context, holder *redislock.Lock) error { return holder.Release(ctx) }
		for _, tc := range []struct {
			name   string
			shared bool // the holder holds it shared: its release hands it to the waiter
			end    func(ctx context.Context, holder *redislock.Lock) error
		}{
			{"released", false, release},
			{"broken", false, func(ctx context.Context, holder *redislock.Lock) error {
				_, err := holderPod.c.Break(ctx, holder.Name())
				return err
			}},
			{"released-by-a-shared-holder", true, release},
		} {
			t.Run(tc.name, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				name := "job-" + tc.name
				key := "lock:{" + name + "}"
				for round := 1; ; round++ {
					acquire := holderPod.c.Acquire
					if tc.shared {
						acquire = holderPod.c.AcquireShared
					}
					holder, err := acquire(ctx, name, redislock.WithTTL(time.Minute))
					require.NoError(t, err)
					before := attempts.Calls()
					got := pod{c: waiter}.waitFor(ctx, name, redislock.WithTTL(time.Minute))
					eventually(t, 10*time.Second, func() bool { return queueLen(t, b.rdb, name) == 1 }, "the waiter did not queue")
					eventually(t, 10*time.Second, func() bool {
						return b.rdb.PubSubNumSub(ctx, key+":released").Val()[key+":released"] == 1
					}, "the waiter is not listening")
					// It tries, subscribes, and tries once more once subscribed.
					eventually(t, 10*time.Second, func() bool { return attempts.Calls() >= before+2 }, "the waiter did not settle")

					before = attempts.Calls()
					ended := time.Now()
					require.NoError(t, tc.end(ctx, holder))
					g := <-got
					require.NoError(t, g.err)
					_ = holder.Release(ctx) // after a Break: ErrNotHeld
					if stalledPastRefresh(t, attempts.Calls()-before, ended, tc.name) {
						require.Less(t, round, 3, "the machine stalled in every round")
						require.NoError(t, g.l.Release(ctx))
						continue // again
					}
					require.Zero(t, g.l.Fence(), "no fence asked for")
					require.NoError(t, g.l.Context().Err())
					require.Equal(t, g.l.Token(), b.rdb.Get(ctx, key).Val())
					eventually(t, 10*time.Second, func() bool {
						return b.rdb.PTTL(ctx, key).Val() > 20*time.Second
					}, "the watchdog did not extend the hand-over's lease to the waiter's TTL")
					require.Equal(t, before, attempts.Calls(), "the lease was extended, not claimed")
					require.NoError(t, g.l.Release(ctx))
					require.Zero(t, b.rdb.Exists(ctx, key, key+":q", key+":qx").Val(), "nothing left behind")
					return
				}
			})
		}
	})
}

// stalledPastRefresh tells whether the waiter sent n attempts between the
// hand-over at handedAt and its verdict, which only a stall past its
// half-second refresh explains: sooner, it claimed the lock handed to it,
// and the test fails.
func stalledPastRefresh(t *testing.T, n int64, handedAt time.Time, what string) bool {
	t.Helper()
	if n == 0 {
		return false
	}
	stall := time.Since(handedAt)
	require.Greater(t, stall, 400*time.Millisecond, "%s: the waiter claimed the lock handed to it (%d attempts)", what, n)
	t.Logf("%s: stalled for %v, the waiter's refresh came first", what, stall)
	return true
}

// A waiter that gives up leaves the queue, and leaves no mark: none of its
// commands is on its way (its refresh is put out of reach; not parallel).
func TestAWaiterThatGivesUpLeavesTheQueue(t *testing.T) {
	t.Cleanup(redislock.SetQueueRefresh(time.Hour))
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		addr := b.rdb.Options().Addr
		holderPod := newPod(t, addr)
		holder, err := holderPod.c.Acquire(ctx, "job", redislock.WithTTL(time.Minute))
		require.NoError(t, err)

		waitCtx, cancel := context.WithCancel(ctx)
		rdb := newRedisClient(t, addr)
		settled, _ := settle(t, b, rdb, "job") // its answers read: it saw the lock held
		got := pod{c: redislock.New(rdb, quiet)}.waitFor(waitCtx, "job")
		settled()
		cancel()
		g := <-got
		require.ErrorIs(t, g.err, redislock.ErrNotAcquired)
		require.ErrorIs(t, g.err, context.Canceled)
		// It leaves the queue in the background, after returning.
		eventually(t, 5*time.Second, func() bool { return queueLen(t, b.rdb, "job") == 0 }, "the waiter did not leave the queue")

		require.Empty(t, b.rdb.Keys(ctx, "lock:{job}:left:*").Val(), "a waiter that left with nothing on its way left a mark")

		// The release then frees the lock for anyone: nobody is in line.
		require.NoError(t, holder.Release(ctx))
		require.Zero(t, b.rdb.Exists(ctx, "lock:{job}").Val())
	})
}

func TestALockHandedToAWaiterThatGaveUpIsPassedOn(t *testing.T) {
	t.Parallel()
	server := redistest.Start(t)
	ctx := context.Background()
	admin := newRedisClient(t, server.Addr())
	holderPod, waiterPod := newPod(t, server.Addr()), newPod(t, server.Addr())
	// The quitter may take locks and queue, but not subscribe: it never
	// hears that the lock was handed to it, and comes back only after
	// queueRefresh (half a second).
	quitterPod := redislock.New(setACLUser(t, admin, "quitter", append([]string{"~*", "resetchannels"}, minimalACLCommands...)...), quiet)
	for _, cmd := range []string{"+zcard", "+zadd", "+zrange", "+zrem", "+zscore", "+time"} {
		require.NoError(t, admin.Do(ctx, "ACL", "SETUSER", "quitter", cmd).Err())
	}
	holder, err := holderPod.c.Acquire(ctx, "job", redislock.WithTTL(time.Minute))
	require.NoError(t, err)

	quitCtx, quit := context.WithCancel(ctx)
	defer quit()
	quitter := make(chan error, 1)
	go func() {
		_, err := quitterPod.Acquire(quitCtx, "job", redislock.WithRetry(redislock.LinearBackoff(time.Hour)))
		quitter <- err
	}()
	eventually(t, 10*time.Second, func() bool { return queueLen(t, admin, "job") == 1 }, "the quitter did not queue")
	waitCtx, stop := context.WithTimeout(ctx, 20*time.Second)
	defer stop()
	waiter := waiterPod.waitFor(waitCtx, "job")
	eventually(t, 10*time.Second, func() bool { return queueLen(t, admin, "job") == 2 }, "the waiter did not queue")

	require.NoError(t, holder.Release(ctx))
	handedTo := admin.Get(ctx, "lock:{job}").Val()
	require.NotEqual(t, holder.Token(), handedTo, "the lock was handed to the quitter, first in line")
	quit()
	require.ErrorIs(t, <-quitter, context.Canceled)
	// It passes the lock on in the background, after returning.
	eventually(t, 5*time.Second, func() bool { return admin.Get(ctx, "lock:{job}").Val() != handedTo },
		"the quitter left, still holding the lock it was handed")
	w := <-waiter
	require.NoError(t, w.err, "the quitter passed the lock on as it left")
	require.NoError(t, w.l.Release(ctx))
	require.Zero(t, admin.Exists(ctx, "lock:{job}", "lock:{job}:q", "lock:{job}:qx").Val(), "nothing left behind")
}

func TestALapsedPlaceIsSkippedAndAnUnclaimedHandOverLapses(t *testing.T) {
	t.Parallel()
	server := redistest.Start(t)
	ctx := context.Background()
	admin := newRedisClient(t, server.Addr())
	holderPod, waiterPod := newPod(t, server.Addr()), newPod(t, server.Addr())
	holder, err := holderPod.c.Acquire(ctx, "job", redislock.WithTTL(time.Minute))
	require.NoError(t, err)

	// Two places left by waiters that are gone: one lapsed already, one
	// that has not lapsed yet (a crashed process, within queueHold).
	now := time.Now().UnixMilli()
	require.NoError(t, admin.ZAdd(ctx, "lock:{job}:q", redis.Z{Score: float64(now - 10), Member: "gone-lapsed"}, redis.Z{Score: float64(now - 5), Member: "gone-fresh"}).Err())
	require.NoError(t, admin.ZAdd(ctx, "lock:{job}:qx", redis.Z{Score: float64(now - 1), Member: "gone-lapsed"}, redis.Z{Score: float64(now + 60_000), Member: "gone-fresh"}).Err())
	waitCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	waiter := waiterPod.waitFor(waitCtx, "job")
	eventually(t, 10*time.Second, func() bool { return queueLen(t, admin, "job") == 3 }, "the waiter did not queue")

	require.NoError(t, holder.Release(ctx))
	require.Equal(t, "gone-fresh", admin.Get(ctx, "lock:{job}").Val(), "the lapsed place was skipped; the fresh one was handed the lock")
	claim := admin.PTTL(ctx, "lock:{job}").Val()
	require.LessOrEqual(t, claim, time.Second, "a hand-over lasts only as long as the claim window")
	// Nobody claims it: it lapses, and the waiter, coming back on its
	// own, takes the lock.
	w := <-waiter
	require.NoError(t, w.err)
	require.NoError(t, w.l.Release(ctx))
}

// nextMessage returns the next message on sub, failing after a while.
func nextMessage(t *testing.T, sub *redis.PubSub) *redis.Message {
	t.Helper()
	select {
	case m := <-sub.Channel():
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("no message on the release channel")
		return nil
	}
}

// subscribe listens to the release channel of name, confirmed.
func subscribe(t *testing.T, rdb *redis.Client, name string) *redis.PubSub {
	t.Helper()
	sub := rdb.Subscribe(context.Background(), "lock:{"+name+"}:released")
	t.Cleanup(func() { _ = sub.Close() })
	_, err := sub.Receive(context.Background()) // the confirmation
	require.NoError(t, err)
	return sub
}

func TestAReleaseWithNobodyInLineAnnouncesNothing(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		sub := subscribe(t, b.rdb, "job")
		c := redislock.New(b.rdb, quiet)
		for _, opts := range [][]redislock.Option{nil, {redislock.WithFencing()}} {
			l, err := c.Acquire(ctx, "job", opts...)
			require.NoError(t, err)
			require.NoError(t, l.Release(ctx))
		}
		// Messages on one channel arrive in order: if either release
		// had announced itself, that would come before our marker.
		require.NoError(t, b.rdb.Publish(ctx, "lock:{job}:released", "marker").Err())
		require.Equal(t, "marker", nextMessage(t, sub).Payload, "a release with an empty queue announced itself")
		require.Zero(t, queueLen(t, b.rdb, "job"))
	})
}

// A hand-over is announced to the Client of the waiter it is for, on a
// channel of its own, and not on the lock's shared channel: the other
// waiting Clients do not hear it (with a Client per goroutine, each
// hand-over used to wake every waiting Client).
func TestAHandOverIsAnnouncedToTheWaitersClientOnly(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		shared := subscribe(t, b.rdb, "job")
		own := b.rdb.PSubscribe(ctx, "lock:{job}:released:*")
		t.Cleanup(func() { _ = own.Close() })
		_, err := own.Receive(ctx) // the confirmation
		require.NoError(t, err)
		addr := b.rdb.Options().Addr
		holderPod, firstPod, secondPod := newPod(t, addr), newPod(t, addr), newPod(t, addr)

		holder, err := holderPod.c.Acquire(ctx, "job")
		require.NoError(t, err)
		first := firstPod.waitFor(ctx, "job")
		eventually(t, 10*time.Second, func() bool { return queueLen(t, b.rdb, "job") == 1 }, "the first waiter did not queue")
		second := secondPod.waitFor(ctx, "job")
		eventually(t, 10*time.Second, func() bool { return queueLen(t, b.rdb, "job") == 2 }, "the second waiter did not queue")
		require.NoError(t, holder.Release(ctx))

		msg := nextMessage(t, own)
		got := <-first
		require.NoError(t, got.err)
		tag, _, ok := strings.Cut(got.l.Token(), ".")
		require.True(t, ok, "a waiter's token begins with its Client's tag")
		require.Equal(t, "lock:{job}:released:"+tag, msg.Channel, "announced on the first waiter's Client's channel")
		require.Regexp(t, "^g:[0-9a-f]{16}/1000$", msg.Payload, "the waiter's ticket, and the lease the hand-over gave it (ms)")
		require.NoError(t, b.rdb.Publish(ctx, "lock:{job}:released", "marker").Err())
		require.Equal(t, "marker", nextMessage(t, shared).Payload, "the hand-over went on the shared channel too")

		require.NoError(t, got.l.Release(ctx))
		got = <-second
		require.NoError(t, got.err)
		require.NoError(t, got.l.Release(ctx))
		secondTag, _, _ := strings.Cut(got.l.Token(), ".")
		require.NotEqual(t, tag, secondTag, "each Client has a tag of its own")
	})
}

func TestAReleaseIsAnnouncedToWaitersThatCannotQueue(t *testing.T) {
	// A user without the queue's commands (but allowed to publish and
	// subscribe) does not queue; releases of its locks go the long way
	// and announce "1" on the channel its waiters listen to. (The
	// waiter would also come back by itself within queueRefresh: what
	// this checks is the announcement.)
	server := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin := newRedisClient(t, server.Addr())
	rules := append([]string{"~lock:*", "resetchannels", "&lock:*", "+publish", "+subscribe", "+unsubscribe"}, minimalACLCommands...)
	sub := subscribe(t, admin, "job")
	holderRDB, waiterRDB := setACLUser(t, admin, "holder", rules...), setACLUser(t, admin, "waiter", rules...)

	holder, err := redislock.New(holderRDB, quiet).Acquire(ctx, "job")
	require.NoError(t, err)
	waiter := pod{c: redislock.New(waiterRDB, quiet)}.waitFor(ctx, "job")
	// The waiter cannot queue, so watch for its subscription instead.
	eventually(t, 10*time.Second, func() bool {
		n, err := admin.PubSubNumSub(ctx, "lock:{job}:released").Result()
		return err == nil && n["lock:{job}:released"] == 2
	}, "the waiter did not subscribe")
	require.NoError(t, holder.Release(ctx))
	require.Equal(t, "1", nextMessage(t, sub).Payload)
	got := <-waiter
	require.NoError(t, got.err)
	require.NoError(t, got.l.Release(ctx))
	require.Zero(t, queueLen(t, admin, "job"))
}

// A waiting Client listens on the lock's shared channel and its own
// hand-over channel, and leaves both once nobody of it waits any more.
func TestAWaitingClientLeavesBothChannelsWhenDone(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		addr := b.rdb.Options().Addr
		holderPod, waiterPod := newPod(t, addr), newPod(t, addr)
		holder, err := holderPod.c.Acquire(ctx, "job")
		require.NoError(t, err)
		waiting := waiterPod.waitFor(ctx, "job")
		channels := func() []string {
			list, err := b.rdb.PubSubChannels(ctx, "lock:{job}:released*").Result()
			require.NoError(t, err)
			return list
		}
		eventually(t, 10*time.Second, func() bool { return len(channels()) == 2 }, "the waiter did not subscribe to both channels")
		require.NoError(t, holder.Release(ctx))
		got := <-waiting
		require.NoError(t, got.err)
		tag, _, _ := strings.Cut(got.l.Token(), ".")
		require.ElementsMatch(t, []string{"lock:{job}:released", "lock:{job}:released:" + tag}, channels())
		require.NoError(t, got.l.Release(ctx))
		eventually(t, 10*time.Second, func() bool { return len(channels()) == 0 }, "the idle room kept a channel: %v", channels())
	})
}
