package redislock_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redislock/redislock"
)

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// newMini returns a client on a fresh miniredis.
func newMini(t testing.TB) *redis.Client {
	t.Helper()
	return newRedisClient(t, newMiniServer(t).Addr())
}

func newMiniServer(t testing.TB) *miniredis.Miniredis {
	t.Helper()
	return miniredis.RunT(t)
}

// logRecorder is a slog.Handler that keeps every record, at every level.
type logRecorder struct {
	mu      sync.Mutex
	records []slog.Record
}

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *logRecorder) WithGroup(string) slog.Handler            { return r }
func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.records = append(r.records, rec.Clone())
	return nil
}

// lines returns each record as "LEVEL message key=value ...".
func (r *logRecorder) lines() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, rec := range r.records {
		var b strings.Builder
		b.WriteString(rec.Level.String() + " " + rec.Message)
		rec.Attrs(func(a slog.Attr) bool {
			b.WriteString(" " + a.Key + "=" + a.Value.String())
			return true
		})
		out = append(out, b.String())
	}
	return out
}

func (r *logRecorder) find(level slog.Level, substr string) (string, bool) {
	for _, line := range r.lines() {
		if strings.HasPrefix(line, level.String()+" ") && strings.Contains(line, substr) {
			return line, true
		}
	}
	return "", false
}

// nopObserver implements redislock.Observer doing nothing; tests embed it.
type nopObserver struct{}

func (nopObserver) ObserveAcquire(redislock.AcquireEvent)   {}
func (nopObserver) ObserveExtend(redislock.ExtendEvent)     {}
func (nopObserver) ObserveLost(redislock.LostEvent)         {}
func (nopObserver) ObserveRelease(redislock.ReleaseEvent)   {}
func (nopObserver) ObserveFailOpen(redislock.FailOpenEvent) {}

// extensionClock records the send time of the last confirmed extension, the
// moment from which the lease is known to last a full TTL.
type extensionClock struct {
	nopObserver
	mu       sync.Mutex
	lastSent time.Time
	count    int
}

func (o *extensionClock) ObserveExtend(e redislock.ExtendEvent) {
	if e.Err != nil {
		return
	}
	now := time.Now()
	o.mu.Lock()
	defer o.mu.Unlock()
	o.lastSent = now.Add(-e.Latency)
	o.count++
}

func (o *extensionClock) last() (time.Time, int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.lastSent, o.count
}

// commandLog is a go-redis hook that records the name of every command a
// client sends and, when resend is set, sends each SET twice, as go-redis
// does when the reply to the first was lost on the network.
type commandLog struct {
	mu     sync.Mutex
	names  []string
	resend bool
	// trips counts round trips (a pipeline is one), extensions the
	// extend scripts among them (see tripsAndExtensions).
	trips, extensions int64
}

func (h *commandLog) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *commandLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.mu.Lock()
		h.trips++
		h.countExtension(cmd)
		switch cmd.Name() {
		case "hello", "client", "ping": // a new connection's set-up
		case "config": // a new Client's one look at the server (serverchecks_test.go counts it)
		default:
			h.names = append(h.names, cmd.Name())
		}
		resend := h.resend && cmd.Name() == "set"
		h.mu.Unlock()
		if resend {
			// The first SET lands; its reply is dropped, like a reply
			// lost with the connection. The same SET goes again.
			if err := next(ctx, cmd); err != nil && err != redis.Nil {
				return err
			}
		}
		return next(ctx, cmd)
	}
}

func (h *commandLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.mu.Lock()
		h.trips++
		for _, cmd := range cmds {
			h.countExtension(cmd)
		}
		h.mu.Unlock()
		return next(ctx, cmds)
	}
}

// countExtension counts cmd if it is the extend script; h.mu is held.
func (h *commandLog) countExtension(cmd redis.Cmder) {
	args := cmd.Args()
	if len(args) > 1 && (cmd.Name() == "evalsha" || cmd.Name() == "eval") {
		if sha, ok := args[1].(string); ok && (sha == extendSHA || strings.Contains(sha, "PEXPIRE")) {
			h.extensions++
		}
	}
}

// resetTrips zeroes the round-trip and extension counts.
func (h *commandLog) resetTrips() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.trips, h.extensions = 0, 0
}

// tripsAndExtensions returns the round trips and extension scripts since
// the last resetTrips.
func (h *commandLog) tripsAndExtensions() (trips, extensions int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.trips, h.extensions
}

// count returns how many names were recorded since the last take.
func (h *commandLog) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.names)
}

// take returns the names recorded since the last call.
func (h *commandLog) take() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	names := h.names
	h.names = nil
	return names
}

// countScripts counts the script calls among command names.
func countScripts(names []string) int {
	n := 0
	for _, name := range names {
		if name == "evalsha" || name == "eval" {
			n++
		}
	}
	return n
}

// frozenClock is a fixed instant for miniredis (Miniredis.SetTime), whose
// TIME follows its own clock: fenced acquisitions then get frozenMicros,
// frozenMicros+1, … (a fence is the counter raised to TIME in µs).
var (
	frozenClock  = time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)
	frozenMicros = frozenClock.UnixMicro()
)

// watchStalls measures, until stop is called, the longest that a 1 ms sleep
// of this process overran: how long a loaded machine kept the process from
// running. A lock's loss signal is late by as much as any pause of its
// process (docs/RELIABILITY.md), at each of its hops (the alarm's timer,
// the goroutine that signals, the test's AfterFunc): the safe-deadline
// tests allow twice the stall measured, and nothing on a quiet machine.
func watchStalls() (stop func() time.Duration) {
	done, stopped := make(chan struct{}), make(chan struct{})
	var worst time.Duration
	go func() {
		defer close(stopped)
		for {
			start := time.Now()
			select {
			case <-done:
				return
			case <-time.After(time.Millisecond):
			}
			worst = max(worst, time.Since(start)-time.Millisecond)
		}
	}()
	return func() time.Duration {
		close(done)
		<-stopped
		return 2 * worst
	}
}

// nopGauges implements redislock.GaugeObserver doing nothing.
type nopGauges struct{ nopObserver }

func (nopGauges) ObserveHold(redislock.HoldEvent)     {}
func (nopGauges) ObserveWait(redislock.WaitEvent)     {}
func (nopGauges) ObserveLeader(redislock.LeaderEvent) {}
