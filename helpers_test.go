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
