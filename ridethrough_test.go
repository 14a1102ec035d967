package redislock_test

// Waits ride through errors: every waiting call, of every kind, tries again
// through network errors and "not now" replies while its ctx and strategy
// last, and fails closed when they end with Redis still failing.

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/internal/faultproxy"
	"github.com/redislock/redislock/internal/redistest"
)

// waitingCall is one waiting entry point: it waits for name within ctx with
// retry (Elect ignores retry: it always waits) and says whether it got in
// (held the lock, ran fn, led).
type waitingCall struct {
	kind string
	wait func(ctx context.Context, c *redislock.Client, name string, retry redislock.RetryStrategy) (in bool, err error)
}

func released(l *redislock.Lock, err error) (bool, error) {
	if err != nil {
		return false, err
	}
	return true, l.Release(context.Background())
}

func ran(run func(fn func(context.Context) error) error) (bool, error) {
	in := false
	err := run(func(context.Context) error { in = true; return nil })
	return in, err
}

var waitingCalls = []waitingCall{
	{"Acquire", func(ctx context.Context, c *redislock.Client, name string, retry redislock.RetryStrategy) (bool, error) {
		return released(c.Acquire(ctx, name, redislock.WithRetry(retry)))
	}},
	{"AcquireShared", func(ctx context.Context, c *redislock.Client, name string, retry redislock.RetryStrategy) (bool, error) {
		return released(c.AcquireShared(ctx, name, redislock.WithRetry(retry)))
	}},
	{"AcquireSemaphore", func(ctx context.Context, c *redislock.Client, name string, retry redislock.RetryStrategy) (bool, error) {
		return released(c.AcquireSemaphore(ctx, name, 1, redislock.WithRetry(retry)))
	}},
	{"AcquireMulti", func(ctx context.Context, c *redislock.Client, name string, retry redislock.RetryStrategy) (bool, error) {
		return released(c.AcquireMulti(ctx, []string{name, name + "-2"}, redislock.WithRetry(retry)))
	}},
	{"RunWithLock", func(ctx context.Context, c *redislock.Client, name string, retry redislock.RetryStrategy) (bool, error) {
		return ran(func(fn func(context.Context) error) error {
			return c.RunWithLock(ctx, name, fn, redislock.WithRetry(retry))
		})
	}},
	{"RunWithSharedLock", func(ctx context.Context, c *redislock.Client, name string, retry redislock.RetryStrategy) (bool, error) {
		return ran(func(fn func(context.Context) error) error {
			return c.RunWithSharedLock(ctx, name, fn, redislock.WithRetry(retry))
		})
	}},
	{"RunWithSemaphore", func(ctx context.Context, c *redislock.Client, name string, retry redislock.RetryStrategy) (bool, error) {
		return ran(func(fn func(context.Context) error) error {
			return c.RunWithSemaphore(ctx, name, 1, fn, redislock.WithRetry(retry))
		})
	}},
	{"RunWithLockMulti", func(ctx context.Context, c *redislock.Client, name string, retry redislock.RetryStrategy) (bool, error) {
		return ran(func(fn func(context.Context) error) error {
			return c.RunWithLockMulti(ctx, []string{name, name + "-2"}, fn, redislock.WithRetry(retry))
		})
	}},
	{"Elect", func(ctx context.Context, c *redislock.Client, name string, _ redislock.RetryStrategy) (bool, error) {
		return ran(func(fn func(context.Context) error) error { return c.Elect(ctx, name, fn) })
	}},
}

// holdFor takes name as the waiting call of that kind would, so that the
// waiter waits: a semaphore's one slot, the multi lock's first name.
func holdFor(t *testing.T, c *redislock.Client, kind, name string) *redislock.Lock {
	t.Helper()
	ctx := context.Background()
	var l *redislock.Lock
	var err error
	switch kind {
	case "AcquireSemaphore", "RunWithSemaphore":
		l, err = c.AcquireSemaphore(ctx, name, 1)
	default: // a writer keeps out readers, a name keeps out a multi lock
		l, err = c.Acquire(ctx, name)
	}
	require.NoError(t, err)
	return l
}

// replyError is a reply of Redis (a redis.Error), as a fault hook makes one up.
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

// attempts is a go-redis hook on a waiter's client. It watches the acquire
// attempts (SET and the acquire scripts; not the janitor's give-backs): how
// many got an answer, how many failed on Redis and with what; while inject >
// 0 it answers the next ones with reply itself.
type attempts struct {
	mu       sync.Mutex
	answered int
	failed   int
	last     error
	inject   int
	reply    error
}

// acquireScripts are the sources and SHA1s of the acquire scripts.
var acquireScripts = func() map[string]bool {
	scripts := map[string]bool{}
	for _, name := range []string{"acquire", "shared_acquire", "semaphore_acquire", "multi_acquire"} {
		sha, src := redislock.Script(name)
		scripts[src], scripts[sha] = true, true
	}
	return scripts
}()

func isAttempt(cmd redis.Cmder) bool {
	args := cmd.Args()
	switch cmd.Name() {
	case "set":
		return true
	case "evalsha", "eval":
		script, _ := args[1].(string)
		return acquireScripts[script]
	}
	return false
}

func (h *attempts) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *attempts) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !isAttempt(cmd) {
			return next(ctx, cmd)
		}
		if h.injected([]redis.Cmder{cmd}) {
			return cmd.Err()
		}
		err := next(ctx, cmd)
		h.note(cmd, err) // (go-redis sets cmd's error after the hooks)
		return err
	}
}

func (h *attempts) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.injected(cmds) {
			return cmds[0].Err()
		}
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			h.note(cmd, cmd.Err())
		}
		return err
	}
}

// injected answers cmds with the reply to inject, if they are an attempt.
func (h *attempts) injected(cmds []redis.Cmder) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.inject == 0 || !isAttempt(cmds[0]) {
		return false
	}
	h.inject--
	h.failed++
	h.last = h.reply
	for _, cmd := range cmds {
		cmd.SetErr(h.reply)
	}
	return true
}

func (h *attempts) note(cmd redis.Cmder, err error) {
	if !isAttempt(cmd) {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case err == nil || err == redis.Nil:
		h.answered++
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded),
		redis.HasErrorPrefix(err, "NOSCRIPT"):
		// The caller's ctx cut it, or EVAL follows: not a failed attempt.
	default:
		h.failed++
		h.last = err
	}
}

func (h *attempts) counts() (answered, failed int, last error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.answered, h.failed, h.last
}

func (h *attempts) injectNext(n int, reply error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.inject, h.reply, h.failed = n, reply, 0
}

type waitResult struct {
	in  bool
	err error
}

// start runs call on a goroutine; its result comes on the channel.
func start(ctx context.Context, call waitingCall, c *redislock.Client, name string, retry redislock.RetryStrategy) <-chan waitResult {
	done := make(chan waitResult, 1)
	go func() {
		in, err := call.wait(ctx, c, name, retry)
		done <- waitResult{in, err}
	}()
	return done
}

// until polls cond, failing if the waiting call returns first or cond does
// not hold within 20 s (a guard against a hang, not a timing).
func until(t *testing.T, done <-chan waitResult, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		select {
		case r := <-done:
			t.Fatalf("it returned before %s: in=%v, %v", what, r.in, r.err)
		case <-time.After(2 * time.Millisecond): // polling interval
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 20 s", what)
		}
	}
}

// result waits for the call's result (20 s: a guard against a hang).
func result(t *testing.T, done <-chan waitResult) waitResult {
	t.Helper()
	select {
	case r := <-done:
		return r
	case <-time.After(20 * time.Second):
		t.Fatal("the waiting call did not return within 20 s")
		return waitResult{}
	}
}

// Every "not now" reply is ridden through, whoever sends it and whatever
// go-redis did with it; a verdict ends the wait at once. (Before, Acquire and
// every other kind ended at the first error, and Elect at the replies its
// own rule did not know: READONLY, TRYAGAIN, MOVED.)
func TestAWaitRidesThroughNotNowRepliesAndStopsAtAVerdict(t *testing.T) {
	t.Parallel()
	transient := []error{
		replyError("LOADING Redis is loading the dataset in memory"),
		replyError("READONLY You can't write against a read only replica."),
		replyError("CLUSTERDOWN The cluster is down"),
		replyError("MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'."),
		replyError("TRYAGAIN Multiple keys request during rehashing of slot"),
		replyError("MOVED 3999 127.0.0.1:6381"),
	}
	verdicts := []error{
		replyError("WRONGTYPE Operation against a key holding the wrong kind of value"),
		replyError("NOPERM User has no permissions to run the 'evalsha' command"),
	}
	forEachBackend(t, func(t *testing.T, b *backend) {
		for _, call := range waitingCalls {
			t.Run(call.kind, func(t *testing.T) {
				t.Parallel()
				hook := &attempts{}
				rdb := redis.NewClient(&redis.Options{Addr: b.rdb.Options().Addr})
				rdb.AddHook(hook)
				t.Cleanup(func() { _ = rdb.Close() })
				c := redislock.New(rdb, quiet)
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				for _, reply := range transient {
					hook.injectNext(2, reply)
					r := result(t, start(ctx, call, c, "not-now-"+call.kind, redislock.LinearBackoff(time.Hour)))
					require.NoError(t, r.err, "%s", reply)
					require.True(t, r.in, "%s", reply)
					_, failed, _ := hook.counts()
					require.Equal(t, 2, failed, "%s: two failed attempts before the lock", reply)
				}
				for _, reply := range verdicts {
					hook.injectNext(3, reply)
					r := result(t, start(ctx, call, c, "verdict-"+call.kind, redislock.LinearBackoff(time.Hour)))
					require.ErrorIs(t, r.err, reply)
					require.NotErrorIs(t, r.err, redislock.ErrNotAcquired)
					require.False(t, r.in)
					_, failed, _ := hook.counts()
					require.Equal(t, 1, failed, "%s: a verdict is not tried again", reply)
				}
			})
		}
	})
}

// A reply that comes after the lease's safe deadline (the attempt's key is
// given back) is a timeout to a waiting caller of any kind: it tries again.
// Without a wait it stays ErrNotAcquired (TestAReplyAfterTheSafeDeadline...).
// (Before, every kind, Elect too, ended with that ErrNotAcquired.)
func TestAReplyTooLateForTheLeaseIsRiddenThroughLikeATimeout(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b *backend) {
		if b.mini != nil {
			b.mini.ClockTTL(true) // the late attempts' keys expire, as on a server
		}
		for _, call := range waitingCalls {
			t.Run(call.kind, func(t *testing.T) {
				t.Parallel()
				proxy := newProxy(t, b.rdb.Options().Addr)
				hook := &attempts{}
				rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr()})
				rdb.AddHook(hook)
				t.Cleanup(func() { _ = rdb.Close() })
				// 60 ms each way against a 50 ms lease: every reply is late.
				proxy.SetDelay(60 * time.Millisecond)
				proxy.SetMode(faultproxy.Delay)
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				c := redislock.New(rdb, quiet, redislock.WithTTL(50*time.Millisecond))
				done := start(ctx, call, c, "late-"+call.kind, redislock.LinearBackoff(time.Hour))
				until(t, done, func() bool { answered, _, _ := hook.counts(); return answered > 0 }, "a late reply")
				proxy.SetMode(faultproxy.Pass)
				r := result(t, done)
				require.NoError(t, r.err)
				require.True(t, r.in)
			})
		}
	})
}

// outage is a Redis that goes away and comes back.
type outage struct {
	addr   string        // where the waiters' clients connect
	direct *redis.Client // reaches Redis outside the outage (miniredis), or nil
	begin  func()
	end    func()
	lasts  time.Duration // at least, in TestAWaitRidesThroughARedisRestart
}

// forEachOutage runs test on each kind of outage, in parallel, each on a
// Redis of its own: a real redis-server killed and restarted (its keys lost), and a
// miniredis behind a proxy that refuses connections (and resets the open
// ones) meanwhile, its keys kept.
func forEachOutage(t *testing.T, test func(t *testing.T, out outage)) {
	t.Run("miniredis", func(t *testing.T) {
		t.Parallel()
		mini := miniredis.RunT(t)
		proxy := newProxy(t, mini.Addr())
		test(t, outage{addr: proxy.Addr(), direct: newRedisClient(t, mini.Addr()),
			begin: func() { proxy.SetMode(faultproxy.Refuse); proxy.ResetAll() },
			end:   func() { proxy.SetMode(faultproxy.Pass) }})
	})
	t.Run("redis-server", func(t *testing.T) {
		t.Parallel()
		server := redistest.Start(t)
		// While it is down its port is held by a listener that closes each
		// connection at once: a parallel test's redis-server could
		// otherwise take the freed port and answer the waiters (a loaded
		// run saw an Elect win during the "outage").
		var hold net.Listener
		begin := func() {
			server.Kill()
			var err error
			hold, err = net.Listen("tcp", server.Addr())
			require.NoError(t, err, "holding the dead server's port")
			go func() {
				for {
					conn, err := hold.Accept()
					if err != nil {
						return
					}
					_ = conn.Close()
				}
			}()
		}
		end := func() { _ = hold.Close(); server.Restart(t) }
		t.Cleanup(func() {
			if hold != nil {
				_ = hold.Close()
			}
		})
		test(t, outage{addr: server.Addr(), begin: begin, end: end, lasts: 2 * time.Second})
	})
}

// goRedisRetries runs test with go-redis's own retries on (its default) and
// off, in parallel: the library's rule must not lean on them.
func goRedisRetries(t *testing.T, test func(t *testing.T, maxRetries int)) {
	for _, retries := range []struct {
		name string
		max  int
	}{{"go-redis retries on", 0}, {"go-redis retries off", -1}} {
		t.Run(retries.name, func(t *testing.T) {
			t.Parallel()
			test(t, retries.max)
		})
	}
}

// A waiter of every kind waits for a held lock, Redis goes away (a
// redis-server for about two seconds) while the waiter fails (with
// go-redis's retries on, a command fails after some 2 s of its dial retries
// and retries), and comes back: the 10 s wait ends in the lock. (Before, every kind but Elect
// returned the first error.) 10 s is ample: after Redis is back the waiter's
// next dial (go-redis's, 100 ms apart) or its next attempt (at most half a
// second) reaches it, then it takes the lock in a round trip or two.
func TestAWaitRidesThroughARedisRestart(t *testing.T) {
	t.Parallel()
	for _, call := range waitingCalls {
		t.Run(call.kind, func(t *testing.T) {
			t.Parallel()
			goRedisRetries(t, func(t *testing.T, maxRetries int) {
				forEachOutage(t, func(t *testing.T, out outage) {
					holderRDB := out.direct
					if holderRDB == nil {
						holderRDB = newRedisClient(t, out.addr)
					}
					holder := holdFor(t, redislock.New(holderRDB, quiet), call.kind, "restart")
					hook := &attempts{}
					rdb := redis.NewClient(&redis.Options{Addr: out.addr, MaxRetries: maxRetries})
					rdb.AddHook(hook)
					t.Cleanup(func() { _ = rdb.Close() })

					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					done := start(ctx, call, redislock.New(rdb, quiet), "restart", redislock.LinearBackoff(time.Hour))
					until(t, done, func() bool { answered, _, _ := hook.counts(); return answered > 0 }, "the waiter found the lock held")
					out.begin()
					down := time.Now()
					until(t, done, func() bool {
						_, failed, _ := hook.counts()
						return failed > 0 && time.Since(down) >= out.lasts
					}, "a failed attempt in the outage")
					if out.direct != nil {
						require.NoError(t, holder.Release(context.Background())) // a restart would have dropped it
					}
					outage := time.Since(down)
					out.end()
					back := time.Now()
					r := result(t, done)
					require.NoError(t, r.err)
					require.True(t, r.in)
					t.Logf("FIGURE %s: outage %v, in %v after Redis was back", t.Name(), outage.Round(time.Millisecond), time.Since(back).Round(time.Millisecond))
				})
			})
		})
	}
}

// When a wait ends while Redis is still failing (its ctx ends, its strategy
// runs out), it fails closed: the error wraps the last Redis error (and
// ctx's), never ErrNotAcquired, and fn does not run. NoRetry fails at once:
// after one command, as a plain go-redis command does in the same outage.
// (Before, a waiting call returned the first error, matching no ctx error,
// and LimitRetry's strategy was never asked; Elect's ctx error lacked the
// Redis error.)
func TestAWaitEndingDuringAnOutageFailsClosed(t *testing.T) {
	t.Parallel()
	for _, call := range waitingCalls {
		t.Run(call.kind, func(t *testing.T) {
			t.Parallel()
			goRedisRetries(t, func(t *testing.T, maxRetries int) {
				forEachOutage(t, func(t *testing.T, out outage) {
					hook := &attempts{}
					rdb := redis.NewClient(&redis.Options{Addr: out.addr, MaxRetries: maxRetries})
					rdb.AddHook(hook)
					t.Cleanup(func() { _ = rdb.Close() })
					c := redislock.New(rdb, quiet)
					out.begin()

					if call.kind != "Elect" {
						r := result(t, start(context.Background(), call, c, "down", redislock.NoRetry()))
						_, failed, last := hook.counts()
						require.Equal(t, 1, failed, "NoRetry: one command, as a plain go-redis command would send")
						require.ErrorIs(t, r.err, last)
						require.NotErrorIs(t, r.err, redislock.ErrNotAcquired)
						require.False(t, r.in)
					}
					if call.kind != "Elect" && maxRetries < 0 { // (the count is the library's, whatever go-redis does)
						strategy := &askLog{inner: redislock.LimitRetry(redislock.LinearBackoff(10*time.Millisecond), 1)}
						hook.injectNext(0, nil)
						r := result(t, start(context.Background(), call, c, "down", strategy))
						require.Equal(t, []int{1, 2}, strategy.calls(), "the failure began the one wait allowed, the next found none")
						_, _, last := hook.counts()
						require.ErrorIs(t, r.err, last)
						require.NotErrorIs(t, r.err, redislock.ErrNotAcquired)
						require.False(t, r.in)
					}

					hook.injectNext(0, nil)
					ctx, cancel := context.WithCancel(context.Background())
					defer cancel()
					done := start(ctx, call, c, "down", redislock.LinearBackoff(time.Hour))
					until(t, done, func() bool { _, failed, _ := hook.counts(); return failed > 0 }, "a failed attempt")
					cancel()
					r := result(t, done)
					_, _, last := hook.counts()
					require.ErrorIs(t, r.err, context.Canceled)
					require.ErrorIs(t, r.err, last, "the last Redis error")
					require.NotErrorIs(t, r.err, redislock.ErrNotAcquired)
					require.False(t, r.in)
				})
			})
		})
	}
}

// A wait rides through an outage in which Redis refuses connections without
// giving anything back: an attempt that could not connect sent nothing. The
// waiter keeps its token (and its place in line), and leaves the janitor no
// work and Redis no mark. (Every failed attempt counted as one that might
// have landed: a give-back and a mark each, and a new token for the next.)
// Redis goes away while no attempt is on its way (a gate holds them), so
// every failure in the outage is a refused dial.
func TestAWaitThroughRefusedConnectionsGivesNothingBack(t *testing.T) {
	t.Parallel()
	servers := []struct {
		name  string
		start func(t *testing.T) (addr string, down, up func())
	}{
		{"miniredis", func(t *testing.T) (string, func(), func()) {
			mini := miniredis.RunT(t) // its keys stay across the outage
			return mini.Addr(), mini.Close, func() { require.NoError(t, mini.Restart()) }
		}},
		{"redis-server", func(t *testing.T) (string, func(), func()) {
			server := redistest.Start(t) // its keys go with the restart
			return server.Addr(), server.Kill, func() { server.Restart(t) }
		}},
	}
	goRedisRetries(t, func(t *testing.T, maxRetries int) {
		for _, srv := range servers {
			t.Run(srv.name, func(t *testing.T) {
				t.Parallel()
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				addr, down, up := srv.start(t)
				direct := newRedisClient(t, addr)
				holder, err := redislock.New(direct, quiet).Acquire(ctx, "refused")
				require.NoError(t, err)
				gate := &sendGate{}
				rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: maxRetries})
				rdb.AddHook(gate)
				t.Cleanup(func() { _ = rdb.Close() })
				waiter := redislock.New(rdb, quiet)
				t.Cleanup(func() { _ = waiter.Close(context.Background()) })
				got := make(chan waitResult, 1)
				var token string
				go func() {
					l, err := waiter.Acquire(ctx, "refused", redislock.WithRetry(redislock.LinearBackoff(time.Hour)))
					if err == nil {
						token = l.Token()
						err = l.Release(context.Background())
					}
					got <- waitResult{err == nil, err}
				}()
				eventually(t, 10*time.Second, func() bool { return queueLen(t, direct, "refused") == 1 }, "the waiter never queued")
				queued := direct.ZRange(ctx, queueKey("refused"), 0, -1).Val()[0]

				gate.hold()
				eventually(t, 10*time.Second, func() bool { return gate.onItsWay() == 0 }, "an attempt stayed on its way")
				down()
				gate.open()
				eventually(t, 20*time.Second, func() bool { return gate.refused() > 0 }, "no attempt failed in the outage")
				up()
				_ = holder.Release(ctx) // (lost with a redis-server's keys)
				r := <-got
				require.NoError(t, r.err)
				require.Equal(t, 0, gate.others(), "every failure in the outage was a refused dial")
				require.Equal(t, queued, token, "the waiter's token, the one it queued with before the outage")
				require.Zero(t, redislock.JanitorPending(waiter), "nothing to give back")
				require.Empty(t, direct.Keys(ctx, "lock:{refused}:left:*").Val(), "no waiter marked gone")
			})
		}
	})
}

// sendGate is a go-redis hook on a waiter's client that holds its attempts
// (see isAttempt) before they are sent while held, counts those past it and
// not answered yet, and sorts their failures: refused dials, and others.
type sendGate struct {
	mu              sync.Mutex
	held            chan struct{} // non-nil while held: attempts wait for it
	sending         int
	dials, failures int
}

func (g *sendGate) hold() { g.mu.Lock(); g.held = make(chan struct{}); g.mu.Unlock() }
func (g *sendGate) open() { g.mu.Lock(); close(g.held); g.held = nil; g.mu.Unlock() }

func (g *sendGate) onItsWay() int { g.mu.Lock(); defer g.mu.Unlock(); return g.sending }
func (g *sendGate) refused() int  { g.mu.Lock(); defer g.mu.Unlock(); return g.dials }
func (g *sendGate) others() int   { g.mu.Lock(); defer g.mu.Unlock(); return g.failures }

func (g *sendGate) DialHook(next redis.DialHook) redis.DialHook { return next }

func (g *sendGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		return g.pass([]redis.Cmder{cmd}, func() error { return next(ctx, cmd) })
	}
}

func (g *sendGate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		return g.pass(cmds, func() error { return next(ctx, cmds) })
	}
}

func (g *sendGate) pass(cmds []redis.Cmder, send func() error) error {
	if !isAttempt(cmds[0]) {
		return send()
	}
	g.mu.Lock()
	held := g.held
	g.mu.Unlock()
	if held != nil {
		<-held
	}
	g.mu.Lock()
	g.sending++
	g.mu.Unlock()
	err := send()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.sending--
	var op *net.OpError
	switch {
	case err == nil || err == redis.Nil || redis.HasErrorPrefix(err, "NOSCRIPT"):
	case errors.As(err, &op) && op.Op == "dial":
		g.dials++
	default:
		g.failures++
	}
	return err
}
