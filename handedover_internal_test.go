package redislock

import (
	"context"
	"errors"
	"net"
	"os"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redislock/redislock/internal/faultproxy"
)

// A hand-over's announcement names the waiter's ticket and the lease the
// release gave; only a well-formed one to the room's ticket is kept for the
// waiter to take without a claim. Any other wakes it as before (it claims),
// or not at all (another waiter's).
func TestAHandOverAnnouncementCarriesItsLease(t *testing.T) {
	room := &waitRoom{}
	room.expect("0123456789abcdef")
	for _, tc := range []struct {
		payload string
		wakes   bool
		lease   time.Duration // 0: nothing to take without a claim
	}{
		{"g:0123456789abcdef/1000", true, time.Second},
		{"g:0123456789abcdef/250", true, 250 * time.Millisecond},
		{"g:0123456789abcdef", true, 0}, // a release of an earlier version
		{"g:0123456789abcdef/", true, 0},
		{"g:0123456789abcdef/-5", true, 0},
		{"g:0123456789abcdef/0", true, 0},
		{"g:0123456789abcdef/1e3", true, 0},
		{"g:0123456789abcdef/99999999999999999999", true, 0},
		{"g:0123456789abcdef/9223372036854775807", true, 0}, // overflows a Duration
		{"g:fedcba9876543210/1000", false, 0},               // handed to somebody else
		{"1", true, 0},                                      // a plain release
	} {
		require.Equal(t, tc.wakes, room.wants(tc.payload), tc.payload)
		lease, ok := room.takeHandover("0123456789abcdef")
		require.Equal(t, tc.lease > 0, ok, tc.payload)
		require.Equal(t, tc.lease, lease, tc.payload)
	}

	// Kept for the ticket it was announced to only: the next turn holder
	// of the room does not take its predecessor's hand-over.
	require.True(t, room.wants("g:0123456789abcdef/1000"))
	room.expect("fedcba9876543210")
	_, ok := room.takeHandover("fedcba9876543210")
	require.False(t, ok)
}

// A waiter takes a hand-over without a claim only when its lease, counted
// from the first attempt (which came before any hand-over to it), has at
// least half left, and only when the claim would add nothing: no fence to
// take, no replica acknowledgement to wait for, a watchdog to extend it.
func TestAHandedOverLockIsTakenOnlyWithLeaseToSpare(t *testing.T) {
	const ticket = "0123456789abcdef"
	base := options{ttl: time.Minute, watchdog: true}
	for _, tc := range []struct {
		name      string
		edit      func(o *options)
		announced string
		waited    time.Duration // since the first attempt was sent
		lease     time.Duration // 0: claim it
	}{
		{"just handed", nil, "g:" + ticket + "/1000", 10 * time.Millisecond, time.Second},
		{"more than half the lease gone", nil, "g:" + ticket + "/1000", 600 * time.Millisecond, 0},
		{"lease longer than the TTL", func(o *options) { o.ttl = 300 * time.Millisecond }, "g:" + ticket + "/1000", 10 * time.Millisecond, 300 * time.Millisecond},
		{"a short lease, mostly gone", nil, "g:" + ticket + "/20", 15 * time.Millisecond, 0},
		{"fenced", func(o *options) { o.fencing = true }, "g:" + ticket + "/1000", 10 * time.Millisecond, 0},
		{"replica acks", func(o *options) { o.replicas = 1 }, "g:" + ticket + "/1000", 10 * time.Millisecond, 0},
		{"no watchdog", func(o *options) { o.watchdog = false }, "g:" + ticket + "/1000", 10 * time.Millisecond, 0},
		{"no lease announced", nil, "g:" + ticket, 10 * time.Millisecond, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := base
			if tc.edit != nil {
				tc.edit(&o)
			}
			a := &acquisition{o: &o, attempts: 1, queued: true, ticket: ticket, firstSent: time.Now().Add(-tc.waited)}
			a.room = &waitRoom{}
			a.room.expect(ticket)
			require.True(t, a.room.wants(tc.announced))
			lease, ok := a.handedOver()
			require.Equal(t, tc.lease > 0, ok)
			require.Equal(t, tc.lease, lease)
		})
	}
}

// A hand-over announced late, after its lease ended and somebody else took
// the lock, is not taken as a lock: the waiter claims it, finds it held,
// and waits on. The waiter's announcements come through a proxy, which
// delays them by two seconds once the waiter listens; its attempts go
// straight to Redis.
func TestALateHandOverAnnouncementIsClaimedNotTaken(t *testing.T) {
	t.Parallel()
	forEachServer(t, func(t *testing.T, addr string) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		proxy, err := faultproxy.New(addr)
		require.NoError(t, err)
		t.Cleanup(func() { _ = proxy.Close() })
		announced := make(chan struct{}, 1)
		slow := redis.NewClient(&redis.Options{Addr: proxy.Addr(), Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &handOverSniffer{Conn: conn, seen: announced}, nil
		}})
		t.Cleanup(func() { _ = slow.Close() })

		direct := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { _ = direct.Close() })
		attempts := &scriptCount{sha: acquireSHA.(string)}
		direct.AddHook(attempts)
		waiter := New(direct, WithLogger(discard()), WithRetry(LinearBackoff(time.Hour)))
		defer waiter.Close(context.Background())
		waiter.rooms().notifier = newNotifier(slow)

		admin := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { _ = admin.Close() })
		holder, got := queueBehindAnotherClient(t, ctx, waiter, admin, "job")
		key := DefaultKeyPrefix + "{job}"
		// Release right after one of the waiter's attempts, so that its next
		// comes half a second later, after the hand-over lapsed.
		proxy.SetDelay(2 * time.Second)
		n := attempts.Calls()
		waitFor(t, func() bool { return attempts.Calls() > n }, "the waiter did not come back")
		require.NoError(t, holder.Release(ctx))
		released := time.Now()

		// The lease given to the waiter (1 s, from the release) ends
		// unclaimed: deleted here, as its expiry would. Another takes
		// the lock.
		require.Equal(t, int64(1), admin.Del(ctx, key).Val())
		const other = "another holder"
		require.True(t, admin.SetNX(ctx, key, other, time.Minute).Val())
		select {
		case <-announced:
			t.Fatalf("the machine stalled past the announcement's delay (%v since the release): the scenario did not happen", time.Since(released))
		default:
		}

		// The announcement arrives, then the waiter's claim: it finds the
		// lock held and waits on.
		select {
		case <-announced:
		case <-time.After(10 * time.Second):
			t.Fatal("the hand-over was not announced")
		}
		n = attempts.Calls()
		waitFor(t, func() bool { return attempts.Calls() > n }, "the waiter did not claim")
		select {
		case r := <-got:
			t.Fatalf("the waiter took a lock held by another (token %q, error %v)", r.l.Token(), r.err)
		default:
		}
		require.Equal(t, other, admin.Get(ctx, key).Val())

		// Released, the lock goes to the waiter as usual.
		proxy.SetMode(faultproxy.Pass)
		require.NoError(t, admin.Del(ctx, key).Err())
		r := <-got
		require.NoError(t, r.err)
		require.NoError(t, r.l.Release(ctx))
	})
}

// queueBehindAnotherClient has a Client of its own on admin take name for
// a minute, starts waiter's Acquire of it (a minute's TTL, the waiter's
// backoff), and returns once the waiter is queued on the server and
// listens for its hand-over: the holder, and where the waiter's verdict
// comes.
func queueBehindAnotherClient(t *testing.T, ctx context.Context, waiter *Client, admin *redis.Client, name string) (*Lock, <-chan acquireResult) {
	t.Helper()
	holders := New(admin, WithLogger(discard()))
	t.Cleanup(func() { _ = holders.Close(context.Background()) })
	holder, err := holders.Acquire(ctx, name, WithTTL(time.Minute))
	require.NoError(t, err)
	got := make(chan acquireResult, 1)
	go func() {
		l, err := waiter.Acquire(ctx, name, WithTTL(time.Minute))
		got <- acquireResult{l, err}
	}()
	key := DefaultKeyPrefix + "{" + name + "}"
	channel := handoverChannel(key, waiter.rooms().tag)
	waitFor(t, func() bool {
		return admin.ZCard(ctx, key+":q").Val() == 1 && admin.PubSubNumSub(ctx, channel).Val()[channel] == 1
	}, "the waiter did not queue and subscribe")
	return holder, got
}

// handOverSniffer is a connection that says when a hand-over's
// announcement (see lua/release.lua) arrives on it.
type handOverSniffer struct {
	net.Conn
	seen chan<- struct{}
}

var handOverPayload = regexp.MustCompile(`g:[0-9a-f]{16}/`)

func (c *handOverSniffer) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if handOverPayload.Match(b[:n]) {
		select {
		case c.seen <- struct{}{}:
		default:
		}
	}
	return n, err
}

// scriptCount counts the calls of one script, by its SHA1, lone or in a
// pipeline, once their replies are in.
type scriptCount struct {
	sha string
	n   atomic.Int64
}

// Calls returns how many calls were answered so far.
func (h *scriptCount) Calls() int64 { return h.n.Load() }

func (h *scriptCount) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *scriptCount) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.count(cmd)
		return err
	}
}

func (h *scriptCount) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			h.count(cmd)
		}
		return err
	}
}

func (h *scriptCount) count(cmd redis.Cmder) {
	args := cmd.Args()
	if len(args) < 2 || redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
		return // an EVALSHA the server did not know: the EVAL that follows is the call
	}
	switch cmd.Name() {
	case "evalsha":
		if args[1] == h.sha {
			h.n.Add(1)
		}
	case "eval":
		if src, ok := args[1].(string); ok && redis.NewScript(src).Hash() == h.sha {
			h.n.Add(1)
		}
	}
}

// A lock taken from a hand-over holds only the hand-over's lease (1 s)
// until its first extension: when that extension fails (a dropped reply),
// the watchdog tries again within that lease, not a third of the TTL's
// interval later, and the lock is kept.
func TestAHandedOverLockWhoseFirstExtensionFailsIsKept(t *testing.T) {
	forEachServer(t, func(t *testing.T, addr string) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		waiter, rdb, _ := newTracedClient(t, addr)
		defer waiter.Close(context.Background())
		failing := &failFirstExtension{sha: extendScript.Hash()}
		rdb.AddHook(failing)
		attempts := &scriptCount{sha: acquireSHA.(string)}
		rdb.AddHook(attempts)

		admin := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { _ = admin.Close() })
		holder, got := queueBehindAnotherClient(t, ctx, waiter, admin, "job")
		key := DefaultKeyPrefix + "{job}"
		// It tries, subscribes, and tries once more once subscribed: a
		// release before that reply would be claimed by that attempt.
		waitFor(t, func() bool { return attempts.Calls() >= 2 }, "the waiter did not settle")
		failing.armed.Store(true)
		n := attempts.Calls()
		require.NoError(t, holder.Release(ctx))
		r := <-got
		require.NoError(t, r.err)
		l := r.l
		require.Equal(t, n, attempts.Calls(), "the waiter claimed the lock: no hand-over lease to test")
		defer l.Release(context.Background())

		waitFor(t, func() bool { return failing.failed.Load() }, "the first extension was not sent")
		waitFor(t, func() bool { return admin.PTTL(ctx, key).Val() > 20*time.Second || l.Context().Err() != nil }, "no extension came after the failed one")
		require.NoError(t, l.Context().Err(), "the lock was lost: %v", context.Cause(l.Context()))
		require.Equal(t, l.Token(), admin.Get(ctx, key).Val())
	})
}

// failFirstExtension fails, once armed, the first pipeline that carries the
// extend script, as a reply lost on the network would.
type failFirstExtension struct {
	sha           string
	armed, failed atomic.Bool
}

func (h *failFirstExtension) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *failFirstExtension) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h *failFirstExtension) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.armed.Load() && !h.failed.Load() {
			for _, cmd := range cmds {
				if args := cmd.Args(); cmd.Name() == "evalsha" && len(args) > 1 && args[1] == h.sha {
					h.failed.Store(true)
					err := errors.New("i/o timeout (injected)")
					for _, c := range cmds {
						c.SetErr(err)
					}
					return err
				}
			}
		}
		return next(ctx, cmds)
	}
}

// A waiter's first attempt, sent by its Client's releaser in the release's
// round trip, can run on the server and queue the waiter although its
// reply is lost. A hand-over to the waiter can then come before the
// waiter's own first attempt: its lease is dated from the attempt that
// rode along, or the waiter takes a hand-over that lapsed while someone
// else holds the lock. Here H and W share a Client, X (another Client) is
// first in the server's queue: H's release hands the lock to X and queues
// W, and its reply is held back, then lost. X releases, handing the lock to
// W for a second; that lapses, Y takes the lock, and only then W's turn
// comes with the lost reply: W must claim, find Y, and wait on.
func TestARideAlongAttemptWhoseReplyWasLostDatesTheHandOver(t *testing.T) {
	t.Parallel()
	forEachServer(t, func(t *testing.T, addr string) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		announced := make(chan struct{}, 1)
		rdbA := redis.NewClient(&redis.Options{Addr: addr, Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &handOverSniffer{Conn: conn, seen: announced}, nil
		}})
		t.Cleanup(func() { _ = rdbA.Close() })
		stall := &loseRideAlong{ran: make(chan struct{}), free: make(chan struct{})}
		rdbA.AddHook(stall)
		attempts := &scriptCount{sha: acquireSHA.(string)}
		rdbA.AddHook(attempts)
		a := New(rdbA, WithLogger(discard()), WithRetry(LinearBackoff(time.Hour)))
		defer a.Close(context.Background())
		var freeOnce sync.Once
		free := func() { freeOnce.Do(func() { close(stall.free) }) }
		defer free()
		rdbB := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { _ = rdbB.Close() })
		b := New(rdbB, WithLogger(discard()))
		defer b.Close(context.Background())
		admin := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { _ = admin.Close() })
		require.NoError(t, releaseScript.Load(ctx, admin).Err())
		key := DefaultKeyPrefix + "{job}"

		// H waited for the lock: A's room listens for hand-overs, and
		// keeps listening while H holds it.
		first, hGot := queueBehindAnotherClient(t, ctx, a, admin, "job")
		require.NoError(t, first.Release(ctx))
		hr := <-hGot
		require.NoError(t, hr.err)
		h := hr.l
		channelA := handoverChannel(key, a.rooms().tag)
		require.EqualValues(t, 1, admin.PubSubNumSub(ctx, channelA).Val()[channelA], "A listens for hand-overs")
		xGot := make(chan acquireResult, 1)
		go func() {
			l, err := b.Acquire(ctx, "job", WithTTL(time.Minute), WithRetry(LinearBackoff(time.Hour)))
			xGot <- acquireResult{l, err}
		}()
		channel := handoverChannel(key, b.rooms().tag)
		waitFor(t, func() bool {
			return admin.ZCard(ctx, key+":q").Val() == 1 && admin.PubSubNumSub(ctx, channel).Val()[channel] == 1
		}, "X did not queue and subscribe")
		wGot := queuedBehind(t, ctx, a, "job", WithTTL(time.Minute))

		stall.armed.Store(true)
		released := make(chan struct{})
		go func() {
			defer close(released)
			_ = h.Release(ctx) // its reply is lost: the janitor retries, harmlessly
		}()
		select {
		case <-stall.ran:
		case <-time.After(10 * time.Second):
			t.Fatal("H's release did not carry W's attempt")
		}
		require.EqualValues(t, 1, admin.ZCard(ctx, key+":q").Val(), "W's attempt ran and queued W")
		x := <-xGot
		require.NoError(t, x.err)
		require.NoError(t, x.l.Release(ctx), "X hands the lock to W")
		handed := time.Now()
		select {
		case <-announced:
		case <-time.After(10 * time.Second):
			t.Fatal("the hand-over to W was not announced")
		}
		// The hand-over's lease (1 s) ends unclaimed: on redis-server the
		// key expires; miniredis's clock stands still, so it is deleted.
		waitFor(t, func() bool { return time.Since(handed) > 1100*time.Millisecond }, "")
		admin.Del(ctx, key)
		const other = "Y, another holder"
		require.True(t, admin.SetNX(ctx, key, other, time.Minute).Val())

		n := attempts.Calls()
		free()
		<-released
		waitFor(t, func() bool { return attempts.Calls() >= n+2 || len(wGot) > 0 }, "W neither claimed nor returned")
		select {
		case r := <-wGot:
			t.Fatalf("W took a lock held by another (error %v, key holds %q)", r.err, admin.Get(ctx, key).Val())
		default:
		}
		require.Equal(t, other, admin.Get(ctx, key).Val())

		// Released, the lock goes to W as usual.
		require.NoError(t, admin.Del(ctx, key).Err())
		r := <-wGot
		require.NoError(t, r.err)
		require.NoError(t, r.l.Release(ctx))
	})
}

// loseRideAlong, once armed, lets the first pipeline of a release and a
// waiter's attempt run on the server, holds its replies until free is
// closed, then fails them, as a reply lost on the network.
type loseRideAlong struct {
	armed     atomic.Bool
	ran, free chan struct{}
}

func (h *loseRideAlong) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *loseRideAlong) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h *loseRideAlong) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) != 2 || !h.armed.Load() || !isScript(cmds[0], releaseSHA) || !isScript(cmds[1], acquireSHA) {
			return next(ctx, cmds)
		}
		h.armed.Store(false)
		_ = next(ctx, cmds)
		close(h.ran)
		<-h.free
		err := errors.New("i/o timeout (injected)")
		for _, c := range cmds {
			c.SetErr(err)
		}
		return err
	}
}

// isScript tells whether cmd is an EVALSHA of the script with that SHA1.
func isScript(cmd redis.Cmder, sha any) bool {
	args := cmd.Args()
	return cmd.Name() == "evalsha" && len(args) > 1 && args[1] == sha
}

// WithMaxHold counts from when the waiter took the lock handed to it, as
// it does from a claim, not from the waiter's first attempt (which dates
// only the hand-over's lease, on the safe side): a waiter handed the lock
// later than its maximum hold after it queued lost it as it took it.
func TestAHandedOverLocksMaximumHoldCountsFromTheTake(t *testing.T) {
	t.Parallel()
	forEachServer(t, func(t *testing.T, addr string) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		const maxHold = 100 * time.Millisecond
		waiter, rdb, _ := newTracedClient(t, addr, WithMaxHold(maxHold))
		defer waiter.Close(context.Background())
		attempts := &scriptCount{sha: acquireSHA.(string)}
		rdb.AddHook(attempts)
		admin := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { _ = admin.Close() })
		holder, got := queueBehindAnotherClient(t, ctx, waiter, admin, "job")
		queued := time.Now()
		// Handed over after more than the maximum hold since the first
		// attempt, with more than half the hand-over's lease left.
		waitFor(t, func() bool { return time.Since(queued) > maxHold+50*time.Millisecond }, "")
		n := attempts.Calls()
		require.NoError(t, holder.Release(ctx))
		r := <-got
		returned := time.Now()
		require.NoError(t, r.err)
		require.Equal(t, n, attempts.Calls(), "the waiter claimed the lock: no hand-over to test")
		<-r.l.Context().Done()
		held := time.Since(returned)
		var lost *LostError
		require.ErrorAs(t, context.Cause(r.l.Context()), &lost)
		require.Equal(t, MaxHoldReached, lost.Reason)
		require.Greater(t, held, maxHold/2, "lost %v after Acquire returned: the maximum hold counted the wait", held)
		_ = r.l.Release(ctx)
	})
}

// An attempt that landed but whose reply was lost (a timeout) left the
// waiter's place in line under its token, and a release handed the lock to
// that token before the janitor gave it back: the waiter does not take that
// hand-over (the give-back lets the lock go), it goes on under a token of
// its own, and whatever Lock it returns, the key holds its token. (It took
// the hand-over as its lock, under the token the janitor then released:
// the key was free while the waiter held a Lock.)
func TestAHandOverToAGivenBackTokenIsNotTaken(t *testing.T) {
	t.Parallel()
	forEachServer(t, func(t *testing.T, addr string) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		admin := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { _ = admin.Close() })
		holders := New(admin, WithLogger(discard()))
		t.Cleanup(func() { _ = holders.Close(context.Background()) })
		holder, err := holders.Acquire(ctx, "given-back", WithTTL(time.Minute))
		require.NoError(t, err)
		key := DefaultKeyPrefix + "{given-back}"

		rdb := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { _ = rdb.Close() })
		waiter := New(rdb, WithLogger(discard()), WithRetry(LinearBackoff(time.Hour)))
		t.Cleanup(func() { _ = waiter.Close(context.Background()) })
		channel := handoverChannel(key, waiter.rooms().tag)
		// The attempt to lose: the first once the waiter hears its
		// hand-overs (it tries again at once then), so that the hand-over
		// comes with most of its lease left, as one would in production.
		lose := &lostReply{sha: acquireSHA, ran: make(chan struct{}), goOn: make(chan struct{}),
			ready: func() bool { return admin.PubSubNumSub(ctx, channel).Val()[channel] == 1 }}
		rdb.AddHook(lose)
		got := make(chan acquireResult, 1)
		go func() {
			l, err := waiter.Acquire(ctx, "given-back", WithTTL(time.Minute))
			got <- acquireResult{l, err}
		}()
		select {
		case <-lose.ran:
		case <-ctx.Done():
			t.Fatal("the waiter never queued and listened")
		}
		// The attempt ran (the waiter is in line under its token); before
		// its reply is lost, the holder's release hands the lock to that
		// token, and the announcement reaches the waiter's room.
		queued := admin.ZRange(ctx, key+":q", 0, -1).Val()
		require.Len(t, queued, 1)
		ticket := handoffTicket(queued[0])
		require.NoError(t, holder.Release(ctx))
		waitFor(t, func() bool { return waiter.rooms().announced(key, ticket) }, "the hand-over was not announced to the waiter")
		close(lose.goOn)

		r := <-got
		require.NoError(t, r.err)
		waitFor(t, func() bool { return waiter.cleaner.pending() == 0 }, "the janitor did not finish")
		require.Equal(t, r.l.Token(), admin.Get(ctx, key).Val(), "the waiter's Lock is held under its token")
		require.NoError(t, r.l.Release(ctx))
	})
}

// announced tells whether a hand-over to ticket waits in key's room.
func (w *waitRooms) announced(key, ticket string) bool {
	w.mu.Lock()
	room := w.rooms[key]
	w.mu.Unlock()
	if room == nil {
		return false
	}
	room.mu.Lock()
	defer room.mu.Unlock()
	s := room.seats[ticket]
	return s != nil && s.handed > 0
}

// lostReply is a go-redis hook that runs the first call of a script (by
// SHA1) made once ready, signals ran, waits for goOn, and then answers it
// with a timeout, as a stalled link whose reply never came: an attempt
// that landed, unanswered.
type lostReply struct {
	sha      any
	ready    func() bool
	ran      chan struct{}
	goOn     chan struct{}
	lostOnce atomic.Bool
}

func (h *lostReply) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *lostReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		return h.lose([]redis.Cmder{cmd}, func() error { return next(ctx, cmd) })
	}
}

func (h *lostReply) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		return h.lose(cmds, func() error { return next(ctx, cmds) })
	}
}

func (h *lostReply) lose(cmds []redis.Cmder, send func() error) error {
	args := cmds[0].Args()
	if len(cmds) != 1 || len(args) < 2 || args[1] != h.sha || h.lostOnce.Load() || !h.ready() {
		return send()
	}
	h.lostOnce.Store(true)
	_ = send()
	close(h.ran)
	<-h.goOn
	timeout := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	cmds[0].SetErr(timeout)
	return timeout
}
