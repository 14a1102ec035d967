package redislockotel_test

import (
	"context"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.uber.org/goleak"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/internal/redistest"
	"github.com/redislock/redislock/redislockotel"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newObserver returns an Observer on a fresh SDK MeterProvider read by a
// ManualReader; the provider is shut down at cleanup.
func newObserver(t *testing.T, opts ...redislockotel.Option) (*sdkmetric.ManualReader, *redislockotel.Observer) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { require.NoError(t, provider.Shutdown(context.Background())) })
	obs, err := redislockotel.New(provider, opts...)
	require.NoError(t, err)
	return reader, obs
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

// collect reads every metric of the redislockotel scope.
func collect(t *testing.T, reader *sdkmetric.ManualReader) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	out := map[string]metricdata.Metrics{}
	for _, scope := range rm.ScopeMetrics {
		require.Equal(t, redislockotel.ScopeName, scope.Scope.Name)
		for _, m := range scope.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

func attributesOf(set attribute.Set) map[string]string {
	out := map[string]string{}
	for _, kv := range set.ToSlice() {
		out[string(kv.Key)] = kv.Value.Emit()
	}
	return out
}

// counter returns the value of the counter's point with exactly attrs, 0
// when there is none (OpenTelemetry reports a point once it was recorded).
func counter(t *testing.T, reader *sdkmetric.ManualReader, name string, attrs map[string]string) int64 {
	t.Helper()
	m, ok := collect(t, reader)[name]
	if !ok {
		return 0
	}
	sum, ok := m.Data.(metricdata.Sum[int64])
	require.True(t, ok, "%s is a %T, not an int64 sum", name, m.Data)
	require.True(t, sum.IsMonotonic, name)
	for _, p := range sum.DataPoints {
		if equalLabels(attributesOf(p.Attributes), attrs) {
			return p.Value
		}
	}
	return 0
}

// histogram returns the histogram's point with exactly attrs (a zero point
// when there is none).
func histogram(t *testing.T, reader *sdkmetric.ManualReader, name string, attrs map[string]string) metricdata.HistogramDataPoint[float64] {
	t.Helper()
	m, ok := collect(t, reader)[name]
	if !ok {
		return metricdata.HistogramDataPoint[float64]{}
	}
	h, ok := m.Data.(metricdata.Histogram[float64])
	require.True(t, ok, "%s is a %T, not a float64 histogram", name, m.Data)
	for _, p := range h.DataPoints {
		if equalLabels(attributesOf(p.Attributes), attrs) {
			return p
		}
	}
	return metricdata.HistogramDataPoint[float64]{}
}

func histogramCount(t *testing.T, reader *sdkmetric.ManualReader, name string, attrs map[string]string) uint64 {
	t.Helper()
	return histogram(t, reader, name, attrs).Count
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
func eventuallyCounter(t *testing.T, reader *sdkmetric.ManualReader, name string, attrs map[string]string, want int64) {
	t.Helper()
	eventually(t, name+formatLabels(attrs)+" reaches "+strconv.FormatInt(want, 10), func() bool {
		return counter(t, reader, name, attrs) >= want
	})
	require.Equal(t, want, counter(t, reader, name, attrs), name+formatLabels(attrs))
}
