package redislockprom_test

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/internal/redistest"
	"github.com/redislock/redislock/redislockprom"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newObserver returns an Observer registered on a fresh registry.
func newObserver(t *testing.T, opts ...redislockprom.Option) (*prometheus.Registry, *redislockprom.Observer) {
	t.Helper()
	reg := prometheus.NewRegistry()
	obs, err := redislockprom.New(reg, opts...)
	require.NoError(t, err)
	return reg, obs
}

// newMini returns a miniredis and a go-redis client on it, both closed at
// cleanup.
func newMini(t *testing.T) (*miniredis.Miniredis, *redis.Client) {
	t.Helper()
	mr := miniredis.RunT(t)
	return mr, newRedisClient(t, mr.Addr())
}

func newRedisClient(t *testing.T, addr string) *redis.Client {
	t.Helper()
	// No retries: a test that expects Redis to be down should not wait
	// through go-redis's backoff.
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// unreachableClient returns a client on a 127.0.0.1 port where nothing
// listens.
func unreachableClient(t *testing.T) *redis.Client {
	t.Helper()
	return newRedisClient(t, "127.0.0.1:"+strconv.Itoa(redistest.FreePort(t)))
}

func newLocker(rdb redis.UniversalClient, obs redislock.Observer, opts ...redislock.Option) *redislock.Client {
	return redislock.New(rdb, append([]redislock.Option{
		redislock.WithObserver(obs), redislock.WithLogger(slog.New(slog.DiscardHandler)),
	}, opts...)...)
}

// waitDone waits for ctx to end, failing the test if it does not within
// the bound (which only guards against a hang; correctness does not
// depend on it).
func waitDone(t *testing.T, ctx context.Context) {
	t.Helper()
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the lock's context was not cancelled within 10s")
	}
}

// series finds the one series of family name whose labels are exactly
// labels (const labels included).
func series(t *testing.T, reg prometheus.Gatherer, name string, labels map[string]string) *dto.Metric {
	t.Helper()
	m, missing := lookup(t, reg, name, labels)
	if m == nil {
		t.Fatal(missing)
	}
	return m
}

// lookup is series, or nil and what is missing.
func lookup(t *testing.T, reg prometheus.Gatherer, name string, labels map[string]string) (*dto.Metric, string) {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		var seen []string
		for _, m := range f.GetMetric() {
			got := map[string]string{}
			for _, lp := range m.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			if equalLabels(got, labels) {
				return m, ""
			}
			seen = append(seen, formatLabels(got))
		}
		return nil, fmt.Sprintf("%s has no series %s; it has %s", name, formatLabels(labels), strings.Join(seen, ", "))
	}
	return nil, "no metric family " + name
}

func equalLabels(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if bv, ok := b[k]; !ok || bv != v {
			return false
		}
	}
	return true
}

func formatLabels(labels map[string]string) string {
	var parts []string
	for k, v := range labels {
		parts = append(parts, k+"="+v)
	}
	sort.Strings(parts)
	return "{" + strings.Join(parts, ",") + "}"
}

// counter returns the value of a counter series.
func counter(t *testing.T, reg prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	return series(t, reg, name, labels).GetCounter().GetValue()
}

// histogramCount returns how many observations a histogram series holds.
func histogramCount(t *testing.T, reg prometheus.Gatherer, name string, labels map[string]string) uint64 {
	t.Helper()
	return series(t, reg, name, labels).GetHistogram().GetSampleCount()
}

// eventually polls cond until it holds, failing after a bound that only
// guards against a hang.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond) // polling interval
	}
}

// eventuallyCounter waits until a counter series reaches want. The lock
// reports a loss to its Observer just after cancelling its context, so a
// test that saw the context end polls for the counters.
func eventuallyCounter(t *testing.T, reg prometheus.Gatherer, name string, labels map[string]string, want float64) {
	t.Helper()
	eventually(t, name+formatLabels(labels)+" reaches "+strconv.FormatFloat(want, 'g', -1, 64), func() bool {
		return counter(t, reg, name, labels) >= want
	})
	require.Equal(t, want, counter(t, reg, name, labels), name+formatLabels(labels))
}
