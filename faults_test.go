//go:build linux

package redislock_test

// Fault injection on real redis-servers: a paused holder process, a hung
// server, a crashed one, a bad network, connection churn. Each test logs
// its measured figures on lines starting with FIGURE; docs/RELIABILITY.md
// collects them (go test -run TestFault -v . | grep FIGURE).

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/internal/faultproxy"
	"github.com/redislock/redislock/internal/monoclock"
	"github.com/redislock/redislock/internal/redistest"
)

// fencedWrite is the protected resource of these tests: a hash on its own
// redis-server, written only through the README's fenced update (accept a
// fence above the highest accepted so far), with every attempt logged in
// the order the resource ran it (negative: rejected).
var fencedWrite = redis.NewScript(`
local stored = tonumber(redis.call('HGET', KEYS[1], 'fence') or '0')
local fence = tonumber(ARGV[1])
if fence > stored then
  redis.call('HSET', KEYS[1], 'fence', ARGV[1], 'value', ARGV[2])
  redis.call('RPUSH', KEYS[2], ARGV[1])
  return 1
end
redis.call('RPUSH', KEYS[2], '-' .. ARGV[1])
return 0
`)

func writeResource(ctx context.Context, rdb *redis.Client, name string, fence int64, value string) (bool, error) {
	n, err := fencedWrite.Run(ctx, rdb, []string{"resource:" + name, "resource:" + name + ":log"}, fence, value).Int64()
	return n == 1, err
}

// staleAccepted replays the resource's log of name and counts accepted
// writes whose fence was not above every fence accepted before them.
func staleAccepted(t *testing.T, rdb *redis.Client, name string) int {
	t.Helper()
	entries, err := rdb.LRange(context.Background(), "resource:"+name+":log", 0, -1).Result()
	require.NoError(t, err)
	stale, highest := 0, int64(0)
	for _, entry := range entries {
		fence, err := strconv.ParseInt(entry, 10, 64)
		require.NoError(t, err)
		if fence <= 0 {
			continue
		}
		if fence <= highest {
			stale++
		}
		highest = max(highest, fence)
	}
	return stale
}

// lossStamp records when a lock's context ended, as it ends.
func lossStamp(ctx context.Context) func(t *testing.T, within time.Duration) time.Time {
	var at atomic.Pointer[time.Time]
	done := make(chan struct{})
	context.AfterFunc(ctx, func() {
		now := time.Now()
		at.Store(&now)
		close(done)
	})
	return func(t *testing.T, within time.Duration) time.Time {
		t.Helper()
		select {
		case <-done:
			return *at.Load()
		case <-time.After(within):
			t.Fatalf("the lock's context did not end within %v", within)
			return time.Time{}
		}
	}
}

// ---- 1. Process pause ------------------------------------------------------

const faultHelperEnv = "REDISLOCK_FAULT_HELPER"

// helperConfig is what the paused holder process is told.
type helperConfig struct {
	Lock, Resource, Name string
	TTL                  time.Duration
}

// helperReport is what it says back, on lines starting with "HELPER ".
type helperReport struct {
	Fence      int64  `json:"fence,omitempty"`
	LostMono   int64  `json:"lost_mono,omitempty"`
	Reason     string `json:"reason,omitempty"`
	Accepted   bool   `json:"accepted,omitempty"`
	Wrote      bool   `json:"wrote,omitempty"`
	ReleaseErr string `json:"release_err,omitempty"`
	Err        string `json:"err,omitempty"`
}

// TestFaultHelperProcess is not a test of its own: it is the holder process
// that TestFaultProcessPause starts (this test binary, re-executed) and
// stops with SIGSTOP. Without the environment variable it does nothing.
func TestFaultHelperProcess(t *testing.T) {
	raw := os.Getenv(faultHelperEnv)
	if raw == "" {
		return
	}
	report := func(r helperReport) {
		line, _ := json.Marshal(r)
		fmt.Printf("HELPER %s\n", line)
	}
	var cfg helperConfig
	require.NoError(t, json.Unmarshal([]byte(raw), &cfg))
	lockRDB := newRedisClient(t, cfg.Lock)
	resourceRDB := newRedisClient(t, cfg.Resource)
	ctx := context.Background()
	c := redislock.New(lockRDB, quiet, redislock.WithTTL(cfg.TTL), redislock.WithFencing())
	l, err := c.Acquire(ctx, cfg.Name)
	if err != nil {
		report(helperReport{Err: err.Error()})
		t.Fatal(err)
	}
	// Stamp the loss signal on the machine's monotonic clock, which the
	// parent's SIGCONT stamp shares.
	lostMono := make(chan int64, 1)
	context.AfterFunc(l.Context(), func() { lostMono <- monoNow() })
	report(helperReport{Fence: l.Fence()})

	// The parent stops us here, lets another holder take the lock and
	// write, resumes us, and then says "write".
	line, err := bufio.NewReader(os.Stdin).ReadString('\n')
	require.NoError(t, err, "reading the parent's command")
	require.Equal(t, "write\n", line)
	var lost int64
	select {
	case lost = <-lostMono:
	case <-time.After(10 * time.Second):
		t.Fatal("the lock's context did not end after the pause")
	}
	r := helperReport{Fence: l.Fence(), LostMono: lost}
	var lostErr *redislock.LostError
	if errors.As(context.Cause(l.Context()), &lostErr) {
		r.Reason = lostErr.Reason.String()
	}
	// The write of a holder that was past its check when it froze: it
	// does not look at its context again.
	r.Accepted, err = writeResource(ctx, resourceRDB, cfg.Name, l.Fence(), "stale holder")
	require.NoError(t, err)
	r.Wrote = true
	if err := l.Release(ctx); err != nil {
		r.ReleaseErr = err.Error()
	}
	report(r)
}

func TestFaultProcessPauseHolderIsFencedOut(t *testing.T) {
	lockServer, resourceServer := redistest.Start(t), redistest.Start(t)
	const ttl = 600 * time.Millisecond
	const name = "settlement"
	raw, err := json.Marshal(helperConfig{Lock: lockServer.Addr(), Resource: resourceServer.Addr(), Name: name, TTL: ttl})
	require.NoError(t, err)

	cmd := exec.Command(os.Args[0], "-test.run=^TestFaultHelperProcess$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), faultHelperEnv+"="+string(raw))
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	reports := make(chan helperReport, 2)
	var output []string
	var outputMu sync.Mutex
	var reading sync.WaitGroup
	reading.Go(func() {
		scanner := bufio.NewScanner(stdout)
		for scanner.Scan() {
			line := scanner.Text()
			outputMu.Lock()
			output = append(output, line)
			outputMu.Unlock()
			if rest, ok := cutPrefix(line, "HELPER "); ok {
				var r helperReport
				if json.Unmarshal([]byte(rest), &r) == nil {
					reports <- r
				}
			}
		}
		close(reports)
	})
	next := func() helperReport {
		select {
		case r, ok := <-reports:
			if !ok {
				outputMu.Lock()
				defer outputMu.Unlock()
				t.Fatalf("the holder process ended early: %q", output)
			}
			require.Empty(t, r.Err)
			return r
		case <-time.After(60 * time.Second):
			t.Fatal("no report from the holder process")
		}
		return helperReport{}
	}

	first := next()
	require.Positive(t, first.Fence)
	require.NoError(t, cmd.Process.Signal(syscall.SIGSTOP))
	stoppedAt := time.Now()

	// Another holder waits out the frozen holder's lease, takes the lock
	// with a newer fence, and writes.
	lockRDB, resourceRDB := newRedisClient(t, lockServer.Addr()), newRedisClient(t, resourceServer.Addr())
	ctx := context.Background()
	c := redislock.New(lockRDB, quiet, redislock.WithTTL(ttl), redislock.WithFencing(),
		redislock.WithRetry(redislock.ExponentialBackoff(5*time.Millisecond, 50*time.Millisecond)))
	waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	second, err := c.Acquire(waitCtx, name)
	require.NoError(t, err)
	takenAfter := time.Since(stoppedAt)
	require.Greater(t, second.Fence(), first.Fence)
	accepted, err := writeResource(ctx, resourceRDB, name, second.Fence(), "new holder")
	require.NoError(t, err)
	require.True(t, accepted)

	resumedMono := monoNow()
	require.NoError(t, cmd.Process.Signal(syscall.SIGCONT))
	_, err = io.WriteString(stdin, "write\n")
	require.NoError(t, err)
	final := next()
	reading.Wait()
	require.NoError(t, cmd.Wait(), "the holder process failed")

	require.True(t, final.Wrote)
	require.False(t, final.Accepted, "the resumed holder's stale write was accepted")
	require.Contains(t, []string{redislock.Unreachable.String(), redislock.Expired.String(), redislock.Taken.String()}, final.Reason)
	interval := ttl / 3
	resumedToLoss := time.Duration(final.LostMono - resumedMono)
	require.Positive(t, final.LostMono)
	require.LessOrEqual(t, resumedToLoss, interval,
		"the resumed holder's context must end when it resumes or within one extend interval")
	require.Zero(t, staleAccepted(t, resourceRDB, name), "stale writes accepted")
	require.Equal(t, "new holder", resourceRDB.HGet(ctx, "resource:"+name, "value").Val())
	require.NoError(t, second.Release(ctx))
	t.Logf("FIGURE pause: 1 trial, 2 acquisitions, taken by the second holder %v after SIGSTOP (TTL %v); resumed holder's loss signal %v after SIGCONT (reason %q), stale write rejected, stale writes accepted 0",
		takenAfter.Round(time.Millisecond), ttl, resumedToLoss.Round(10*time.Microsecond), final.Reason)
}

// monoNow reads the clock every process on the machine shares.
func monoNow() int64 { return monoclock.Now() }

func cutPrefix(s, prefix string) (string, bool) {
	if len(s) >= len(prefix) && s[:len(prefix)] == prefix {
		return s[len(prefix):], true
	}
	return s, false
}

// ---- 2. Redis hang ---------------------------------------------------------

// clientKinds are the go-redis settings the network faults are tried
// with: the defaults (a 5s read timeout, far above the TTL), short socket
// timeouts, and contexts honoured.
var clientKinds = []struct {
	name string
	opts func(addr string) *redis.Options
}{
	{"default options", func(addr string) *redis.Options { return &redis.Options{Addr: addr} }},
	{"short timeouts", func(addr string) *redis.Options {
		return &redis.Options{Addr: addr, ReadTimeout: 250 * time.Millisecond, WriteTimeout: 250 * time.Millisecond, DialTimeout: 250 * time.Millisecond}
	}},
	{"context timeouts", func(addr string) *redis.Options {
		return &redis.Options{Addr: addr, ContextTimeoutEnabled: true}
	}},
}

// watchedLock is a held lock with the send time of its last confirmed
// extension and the instant of its loss signal.
type watchedLock struct {
	kind  string
	lock  *redislock.Lock
	clock *extensionClock
	lost  func(t *testing.T, within time.Duration) time.Time
}

func holdWatched(t *testing.T, rdb *redis.Client, kind, name string, opts ...redislock.Option) *watchedLock {
	t.Helper()
	clock := &extensionClock{}
	c := redislock.New(rdb, append([]redislock.Option{quiet, redislock.WithObserver(clock)}, opts...)...)
	l, err := c.Acquire(context.Background(), name)
	require.NoError(t, err)
	eventually(t, 10*time.Second, func() bool { _, n := clock.last(); return n >= 1 }, "no extension confirmed")
	return &watchedLock{kind: kind, lock: l, clock: clock, lost: lossStamp(l.Context())}
}

// requireLostBeforeSafeDeadline checks that w's loss was signalled after
// the fault and before its lease could have expired: before the send time
// of its last confirmed extension plus the TTL.
func (w *watchedLock) requireLostBeforeSafeDeadline(t *testing.T, fault time.Time, ttl time.Duration) (faultToLoss, margin time.Duration) {
	t.Helper()
	stalls := watchStalls()
	lostAt := w.lost(t, 10*time.Second)
	stalled := stalls()
	lastSent, _ := w.clock.last()
	var lost *redislock.LostError
	require.ErrorAs(t, context.Cause(w.lock.Context()), &lost, "%s: lost", w.kind)
	require.True(t, lostAt.After(fault), "%s: lost only after the fault", w.kind)
	require.True(t, lostAt.Before(lastSent.Add(ttl+stalled)),
		"%s: loss signalled %v after the last confirmed extension was sent; the lease (%v) could have expired first (the process stalled %v)",
		w.kind, lostAt.Sub(lastSent), ttl, stalled)
	return lostAt.Sub(fault), lastSent.Add(ttl).Sub(lostAt)
}

// The fault tests that assert the safe-deadline bound use TTLs of 2s and
// more: the bound's margin is the drift allowance (TTL/100 + 2ms), and on a
// loaded machine timers fire late by more than the 8ms a 600ms TTL leaves
// (a scheduler delay is a small process pause; see docs/RELIABILITY.md).
const boundTTL = 2 * time.Second

func TestFaultRedisHangEndsEveryHoldBeforeItsLease(t *testing.T) {
	server := redistest.Start(t)
	const ttl = boundTTL
	var held []*watchedLock
	for i, kind := range clientKinds {
		rdb := redis.NewClient(kind.opts(server.Addr()))
		t.Cleanup(func() { _ = rdb.Close() })
		held = append(held, holdWatched(t, rdb, kind.name, "job-"+strconv.Itoa(i), redislock.WithTTL(ttl)))
	}

	server.Pause(t) // SIGSTOP: connections stay open, nothing answers
	pausedAt := time.Now()
	resumed := false
	defer func() {
		if !resumed {
			server.Resume(t)
		}
	}()
	for _, w := range held {
		faultToLoss, margin := w.requireLostBeforeSafeDeadline(t, pausedAt, ttl)
		t.Logf("FIGURE hang: %s: loss signal %v after SIGSTOP (TTL %v), %v before the lease could end",
			w.kind, faultToLoss.Round(time.Millisecond), ttl, margin.Round(time.Millisecond))
	}

	// While the server is stopped, nobody becomes a holder.
	probe := redis.NewClient(&redis.Options{Addr: server.Addr(), ReadTimeout: 100 * time.Millisecond, MaxRetries: -1})
	defer probe.Close()
	_, err := redislock.New(probe, quiet).Acquire(context.Background(), "job-0")
	require.Error(t, err, "acquired a lock from a stopped server")
	require.NotErrorIs(t, err, redislock.ErrNotAcquired, "a timeout, not a held lock")
	require.Greater(t, time.Since(pausedAt), ttl, "the server stayed stopped longer than the TTL")

	server.Resume(t)
	resumed = true
	ctx := context.Background()
	for _, w := range held {
		err := w.lock.Release(ctx)
		require.True(t, err == nil || errors.Is(err, redislock.ErrNotHeld), "%s: release after resume: %v", w.kind, err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	again, err := redislock.New(newRedisClient(t, server.Addr()), quiet,
		redislock.WithRetry(redislock.ExponentialBackoff(5*time.Millisecond, 50*time.Millisecond))).Acquire(waitCtx, "job-0")
	require.NoError(t, err, "new acquisitions work after SIGCONT")
	require.NoError(t, again.Release(ctx))
}

// ---- 3. Redis crash and restart --------------------------------------------

// scriptHashes returns the SHA1 of each of the core's Lua scripts, as
// EVALSHA names them.
func scriptHashes(t *testing.T) []string {
	t.Helper()
	hashes := redislock.ScriptHashes()
	require.NotEmpty(t, hashes)
	return hashes
}

func TestFaultRedisCrashAndRestart(t *testing.T) {
	lockServer, resourceServer := redistest.Start(t), redistest.Start(t)
	before := goleak.IgnoreCurrent()
	ctx := context.Background()
	lockRDB := redis.NewClient(&redis.Options{Addr: lockServer.Addr()})
	resourceRDB := redis.NewClient(&redis.Options{Addr: resourceServer.Addr()})
	const ttl = 2 * time.Second
	interval := 50 * time.Millisecond

	var held []*watchedLock
	for _, name := range []string{"a", "b"} {
		w := holdWatched(t, lockRDB, name, name, redislock.WithTTL(ttl), redislock.WithExtendInterval(interval), redislock.WithFencing())
		accepted, err := writeResource(ctx, resourceRDB, name, w.lock.Fence(), "before the crash")
		require.NoError(t, err)
		require.True(t, accepted)
		held = append(held, w)
	}
	// Another acquisition raises "a"'s fence well above what a restarted,
	// empty counter will hand out first.
	raise := redislock.New(lockRDB, quiet, redislock.WithFencing(), redislock.WithKeyPrefix("other:"))
	for range 3 {
		l, err := raise.Acquire(ctx, "a")
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))
	}
	loaded, err := lockRDB.ScriptExists(ctx, scriptHashes(t)...).Result()
	require.NoError(t, err)
	require.Contains(t, loaded, true, "some scripts were cached before the crash")

	crashedAt := time.Now()
	lockServer.Restart(t) // SIGKILL, then an empty server on the same port: no keys, no scripts
	for _, w := range held {
		faultToLoss, margin := w.requireLostBeforeSafeDeadline(t, crashedAt, ttl)
		requireLost(t, w.lock.Context(), redislock.Expired)
		t.Logf("FIGURE crash: holder %s: loss signal (expired) %v after SIGKILL+restart (TTL %v, extend interval %v), %v before the lease could end",
			w.kind, faultToLoss.Round(time.Millisecond), ttl, interval, margin.Round(time.Millisecond))
	}

	// The script cache is empty; every script still runs (EVALSHA, then
	// EVAL on NOSCRIPT).
	admin := redis.NewClient(&redis.Options{Addr: lockServer.Addr()})
	require.NoError(t, admin.ScriptFlush(ctx).Err())
	cached, err := admin.ScriptExists(ctx, scriptHashes(t)...).Result()
	require.NoError(t, err)
	require.NotContains(t, cached, true)
	for _, w := range held {
		require.ErrorIs(t, w.lock.Release(ctx), redislock.ErrNotHeld, "the restarted server has no key")
	}
	c := redislock.New(lockRDB, quiet, redislock.WithTTL(ttl), redislock.WithWatchdog(false), redislock.WithFencing())
	fresh, err := c.Acquire(ctx, "a")
	require.NoError(t, err, "acquire after the restart")
	require.NoError(t, admin.ScriptFlush(ctx).Err())
	require.NoError(t, fresh.Extend(ctx, ttl), "extend after NOSCRIPT")
	left, err := fresh.TTL(ctx)
	require.NoError(t, err)
	require.Positive(t, left)

	// The fence counter was lost with the server, but fences follow the
	// server's clock: the new holder's fence is above every one handed out
	// before the crash, and the resource takes its write with no operator.
	require.Greater(t, fresh.Fence(), held[0].lock.Fence())
	accepted, err := writeResource(ctx, resourceRDB, "a", fresh.Fence(), "after the crash")
	require.NoError(t, err)
	require.True(t, accepted, "a fence after the restart is above the ones before it")
	require.NoError(t, admin.ScriptFlush(ctx).Err())
	require.NoError(t, fresh.Release(ctx), "release after NOSCRIPT")
	again, err := c.Acquire(ctx, "a")
	require.NoError(t, err)
	require.Greater(t, again.Fence(), fresh.Fence())
	require.NoError(t, again.Release(ctx))
	require.Zero(t, staleAccepted(t, resourceRDB, "a"))
	require.Zero(t, staleAccepted(t, resourceRDB, "b"))

	// No goroutine outlives the locks and clients.
	for _, rdb := range []*redis.Client{lockRDB, resourceRDB, admin} {
		require.NoError(t, rdb.Close())
	}
	lockServer.Kill()
	resourceServer.Kill()
	goleak.VerifyNone(t, before)
}

// ---- 4. Network stall and slowness -----------------------------------------

func newProxy(t *testing.T, upstream string) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.New(upstream)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func TestFaultNetworkLossAlwaysBeforeTheSafeDeadline(t *testing.T) {
	server := redistest.Start(t)
	const ttl = boundTTL
	faults := []struct {
		name   string
		inject func(p *faultproxy.Proxy)
	}{
		{"blackhole (half-open connection)", func(p *faultproxy.Proxy) { p.SetMode(faultproxy.Blackhole) }},
		{"latency above the TTL", func(p *faultproxy.Proxy) { p.SetDelay(ttl) }},
		{"reset, new connections refused", func(p *faultproxy.Proxy) { p.SetMode(faultproxy.Refuse); p.ResetAll() }},
	}
	for _, fault := range faults {
		t.Run(fault.name, func(t *testing.T) {
			for _, kind := range clientKinds {
				t.Run(kind.name, func(t *testing.T) {
					t.Parallel()
					proxy := newProxy(t, server.Addr())
					rdb := redis.NewClient(kind.opts(proxy.Addr()))
					t.Cleanup(func() { _ = rdb.Close() })
					w := holdWatched(t, rdb, kind.name, "net-"+strconv.Itoa(int(time.Now().UnixNano())), redislock.WithTTL(ttl))

					injectedAt := time.Now()
					fault.inject(proxy)
					faultToLoss, margin := w.requireLostBeforeSafeDeadline(t, injectedAt, ttl)
					t.Logf("FIGURE network: %s, %s: loss signal %v after the fault (TTL %v), %v before the lease could end",
						fault.name, kind.name, faultToLoss.Round(time.Millisecond), ttl, margin.Round(time.Millisecond))

					// Heal the network and unblock calls stuck on a dead
					// connection, so Release does not wait for a read timeout.
					proxy.SetMode(faultproxy.Pass)
					proxy.ResetAll()
					err := w.lock.Release(context.Background())
					require.True(t, err == nil || errors.Is(err, redislock.ErrNotHeld), "release after healing: %v", err)
				})
			}
		})
	}
}

func TestFaultNetworkTransientTroubleKeepsTheLock(t *testing.T) {
	server := redistest.Start(t)
	direct := newRedisClient(t, server.Addr())
	const ttl = boundTTL
	interval := 150 * time.Millisecond
	troubles := []struct {
		name   string
		inject func(p *faultproxy.Proxy)
		gives  map[string]bool // the clientKinds that give up on it
	}{
		// A round trip of 300ms: twice the extend interval, but well
		// inside the lease. Short socket timeouts (250ms) cannot ride
		// it out; see the loss test above for what they do instead.
		{"latency above the extend interval", func(p *faultproxy.Proxy) { p.SetDelay(interval) }, map[string]bool{"short timeouts": true}},
		{"every connection reset once", func(p *faultproxy.Proxy) { p.ResetAll() }, nil},
	}
	for _, trouble := range troubles {
		t.Run(trouble.name, func(t *testing.T) {
			for _, kind := range clientKinds {
				t.Run(kind.name, func(t *testing.T) {
					t.Parallel()
					proxy := newProxy(t, server.Addr())
					rdb := redis.NewClient(kind.opts(proxy.Addr()))
					t.Cleanup(func() { _ = rdb.Close() })
					w := holdWatched(t, rdb, kind.name, "transient-"+strconv.Itoa(int(time.Now().UnixNano())),
						redislock.WithTTL(ttl), redislock.WithExtendInterval(interval))
					_, before := w.clock.last()
					trouble.inject(proxy)
					injectedAt := time.Now()
					if trouble.gives[kind.name] {
						// These settings give up on the slow replies: the
						// loss must still come before the safe deadline.
						faultToLoss, margin := w.requireLostBeforeSafeDeadline(t, injectedAt, ttl)
						t.Logf("FIGURE network: %s, %s: lost, signal %v after the fault (TTL %v), %v before the lease could end",
							trouble.name, kind.name, faultToLoss.Round(time.Millisecond), ttl, margin.Round(time.Millisecond))
					} else {
						// Three confirmed extensions through the trouble.
						eventually(t, 10*time.Second, func() bool { _, n := w.clock.last(); return n >= before+3 },
							"extensions did not go on through the trouble")
						require.NoError(t, w.lock.Context().Err(), "the lock was lost: %v", context.Cause(w.lock.Context()))
						require.Equal(t, w.lock.Token(), direct.Get(context.Background(), w.lock.Key()).Val())
						t.Logf("FIGURE network: %s, %s: held through it (3 extensions confirmed in %v)",
							trouble.name, kind.name, time.Since(injectedAt).Round(time.Millisecond))
					}
					proxy.SetMode(faultproxy.Pass)
					proxy.ResetAll()
					err := w.lock.Release(context.Background())
					require.True(t, err == nil || errors.Is(err, redislock.ErrNotHeld), "release: %v", err)
				})
			}
		})
	}
}

// ---- 5. Connection churn ---------------------------------------------------

// contend runs workers goroutines, each taking the lock on name rounds times
// through RunWithLock with fencing, writing the resource inside; it returns
// how many runs acquired, how many returned an error, the overlaps seen
// between holders that had not been told of a loss, and the losses that
// only the release found (fn's context was still live when fn returned).
func contend(t *testing.T, c *redislock.Client, resource *redis.Client, name string, workers, rounds int, wait time.Duration) (acquired, failed, overlaps, lostAtRelease int) {
	t.Helper()
	var inside, overlapCount, acquiredCount, missedCount, atRelease atomic.Int32
	errs := make(chan error, workers*rounds)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range rounds {
				waitCtx, cancel := context.WithTimeout(context.Background(), wait)
				liveAtEnd := false
				err := c.RunWithLock(waitCtx, name, func(ctx context.Context) error {
					defer func() { liveAtEnd = ctx.Err() == nil }()
					acquiredCount.Add(1)
					if inside.Add(1) != 1 && ctx.Err() == nil {
						overlapCount.Add(1)
					}
					defer inside.Add(-1)
					fence, _ := redislock.FenceFromContext(ctx)
					_, err := writeResource(ctx, resource, name, fence, "x")
					return err
				})
				cancel()
				if err != nil {
					missedCount.Add(1)
				}
				if liveAtEnd && errors.Is(err, redislock.ErrLockLost) {
					atRelease.Add(1)
				}
				errs <- err
			}
		})
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(2*wait*time.Duration(rounds) + 30*time.Second):
		t.Fatal("contenders did not finish: deadlock")
	}
	close(errs)
	for err := range errs {
		if err == nil {
			continue
		}
		// Every failure is one of the documented ones: not acquired
		// (waiting ended), the lock lost, or Redis unreachable.
		var lost *redislock.LostError
		if errors.Is(err, redislock.ErrNotAcquired) || errors.As(err, &lost) {
			continue
		}
		require.NotErrorIs(t, err, redislock.ErrInvalidArgument)
	}
	return int(acquiredCount.Load()), int(missedCount.Load()), int(overlapCount.Load()), int(atRelease.Load())
}

func TestFaultClientKillDuringHolds(t *testing.T) {
	lockServer, resourceServer := redistest.Start(t), redistest.Start(t)
	resource := newRedisClient(t, resourceServer.Addr())
	admin := newRedisClient(t, lockServer.Addr())
	logs := &logRecorder{}
	c := redislock.New(newRedisClient(t, lockServer.Addr()), redislock.WithLogger(slog.New(logs)),
		redislock.WithTTL(time.Second), redislock.WithExtendInterval(20*time.Millisecond), redislock.WithFencing(),
		redislock.WithRetry(redislock.ExponentialBackoff(time.Millisecond, 20*time.Millisecond)))

	stop := make(chan struct{})
	var killer sync.WaitGroup
	var kills atomic.Int64
	killer.Go(func() {
		ticker := time.NewTicker(5 * time.Millisecond)
		defer ticker.Stop()
		for {
			select {
			case <-stop:
				return
			case <-ticker.C:
				// SKIPME yes (the default): the admin connection survives.
				n, err := admin.ClientKillByFilter(context.Background(), "TYPE", "normal").Result()
				if err == nil {
					kills.Add(n)
				}
			}
		}
	})
	acquired, missed, overlaps, atRelease := contend(t, c, resource, "churn", 6, 20, 5*time.Second)
	close(stop)
	killer.Wait()
	require.Positive(t, kills.Load(), "no connection was killed")
	require.Positive(t, acquired)
	require.Zero(t, overlaps, "two holders inside at once")
	require.Zero(t, staleAccepted(t, resource, "churn"))
	losses := map[string]int{}
	for _, line := range logs.lines() {
		if strings.HasPrefix(line, "ERROR redislock: lock lost") {
			losses[line[strings.Index(line, "reason="):]]++
		}
	}
	t.Logf("FIGURE churn: CLIENT KILL TYPE normal every 5ms (%d connections killed): 120 runs, %d acquisitions, %d runs returned an error, overlaps 0, stale writes accepted 0, losses %v (%d of them reported by the release after fn ended with a live context)",
		kills.Load(), acquired, missed, losses, atRelease)
}

func TestFaultPoolExhaustionWithManyWaiters(t *testing.T) {
	lockServer, resourceServer := redistest.Start(t), redistest.Start(t)
	resource := newRedisClient(t, resourceServer.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: lockServer.Addr(), PoolSize: 1, MaxActiveConns: 1})
	t.Cleanup(func() { _ = rdb.Close() })
	c := redislock.New(rdb, quiet, redislock.WithTTL(time.Second), redislock.WithFencing(),
		redislock.WithRetry(redislock.ExponentialBackoff(time.Millisecond, 20*time.Millisecond)))
	start := time.Now()
	acquired, missed, overlaps, _ := contend(t, c, resource, "pool", 20, 5, 3*time.Second)
	require.Positive(t, acquired)
	require.Zero(t, overlaps, "two holders inside at once")
	require.Zero(t, staleAccepted(t, resource, "pool"))
	t.Logf("FIGURE pool: PoolSize 1, 20 waiters x 5 runs: %d acquisitions, %d ended without running or lost, overlaps 0, stale writes accepted 0, all done in %v",
		acquired, missed, time.Since(start).Round(time.Millisecond))
}

// ---- 6. Clock ---------------------------------------------------------------

// TestFaultClockOnlyMonotonicTimeDecidesSafety proves, without stubbing
// anything, that no wall-clock reading can move a deadline: it type-checks
// the core package and requires every use of package time to be one that
// works on the monotonic clock (time.Now and its differences, timers,
// durations), and the Lua scripts to set expiries only relative to the
// server's now (PX, PEXPIRE), never as absolute times. A wall-clock jump
// on this host therefore changes no decision of the lock; one on the Redis
// host can (the server expires keys by its own clock), which no client can
// prevent.
func TestFaultClockOnlyMonotonicTimeDecidesSafety(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("the go command is needed to type-check the package: %v", err)
	}
	// Export data of every dependency, from the build cache.
	out, err := exec.Command(goBin, "list", "-deps", "-export", "-f", "{{.ImportPath}}\t{{.Export}}", ".").Output()
	require.NoError(t, err)
	exports := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		path, file, _ := strings.Cut(line, "\t")
		exports[path] = file
	}
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	var parsed []*ast.File
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, file, nil, 0)
		require.NoError(t, err)
		parsed = append(parsed, f)
	}
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}, Selections: map[*ast.SelectorExpr]*types.Selection{}}
	conf := types.Config{Importer: importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		file, ok := exports[path]
		if !ok || file == "" {
			return nil, fmt.Errorf("no export data for %q", path)
		}
		return os.Open(file)
	})}
	_, err = conf.Check("github.com/redislock/redislock", fset, parsed, info)
	require.NoError(t, err)

	// What keeps a time.Time on the monotonic clock: made by Now, moved by
	// Add, compared with Sub, Before, After, Compare, Until, Since.
	allowed := map[string]bool{
		"Now": true, "Since": true, "Until": true, "NewTimer": true, "AfterFunc": true, "Sleep": true,
		"Duration": true, "Time": true, "Timer": true,
		"Nanosecond": true, "Microsecond": true, "Millisecond": true, "Second": true, "Minute": true, "Hour": true,
		"Time.Add": true, "Time.Sub": true, "Time.Before": true, "Time.After": true, "Time.Compare": true, "Time.IsZero": true,
		"Timer.Reset": true, "Timer.Stop": true, "Timer.C": true,
	}
	used := map[string]int{}
	for ident, obj := range info.Uses {
		if obj.Pkg() == nil || obj.Pkg().Path() != "time" {
			continue
		}
		name := obj.Name()
		if fn, ok := obj.(*types.Func); ok {
			if recv := fn.Signature().Recv(); recv != nil {
				recvType := recv.Type()
				if ptr, ok := recvType.(*types.Pointer); ok {
					recvType = ptr.Elem()
				}
				name = recvType.(*types.Named).Obj().Name() + "." + name
			}
		}
		if v, ok := obj.(*types.Var); ok && v.IsField() {
			name = "Timer." + name
		}
		if strings.HasPrefix(name, "Duration.") {
			continue // arithmetic on lengths of time, no clock involved
		}
		used[name]++
		require.True(t, allowed[name], "%s uses time.%s, which reads or depends on the wall clock", fset.Position(ident.Pos()), name)
	}
	require.Positive(t, used["Now"], "the check saw the package's clock readings")
	require.Positive(t, used["Time.Sub"]+used["Until"]+used["Since"])

	scripts, err := filepath.Glob("lua/*.lua")
	require.NoError(t, err)
	for _, file := range scripts {
		src, err := os.ReadFile(file)
		require.NoError(t, err)
		code := strings.ToUpper(string(src))
		// Leases are set and read as durations only (PX, PEXPIRE, PTTL).
		for _, absolute := range []string{"'EXPIREAT'", "'PEXPIREAT'", "'EXAT'", "'PXAT'", "'EXPIRETIME'", "'PEXPIRETIME'"} {
			require.NotContains(t, code, absolute, "%s uses an absolute server time", file)
		}
		// The server's clock is read only for the waiters' queue (their
		// order and when a waiter's place lapses), which decides who is
		// handed the lock next (also by Break) and which waiters Inspect
		// counts and how long they waited, never how long anybody holds it; and it is compared only
		// with itself. Semaphores are the exception: a holder's lease is
		// its score in the holders' set, the server's TIME plus the TTL,
		// compared only with the server's TIME, the same wall clock Redis
		// expires keys by (PX): a step of the server's clock moves a
		// semaphore's leases exactly as it moves a lock's TTL. Shared
		// holds keep their leases the same way (their set's scores).
		// prelude.lua, which the others start with, holds the clock's
		// parse and the fence step: a fence is raised to the clock, which
		// decides nobody's hold.
		if filepath.Base(file) == "prelude.lua" {
			continue
		}
		if strings.Contains(code, "'TIME'") {
			require.Contains(t, []string{"acquire.lua", "release.lua", "state.lua", "break.lua", "inspect.lua", "handover.lua", "multi_acquire.lua",
				"semaphore_acquire.lua", "semaphore_lease.lua", "semaphore_release.lua",
				"shared_acquire.lua", "shared_lease.lua", "shared_release.lua"}, filepath.Base(file), "%s reads the server's clock", file)
			require.True(t, strings.Contains(code, "'ZADD'") || strings.Contains(code, "'ZSCORE'") || strings.Contains(code, "'ZCOUNT'"),
				"%s reads the clock for something other than the queue", file)
		}
	}
	t.Logf("FIGURE clock: time API uses in the core: %v", used)
}
