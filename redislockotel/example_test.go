package redislockotel_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/redislockotel"
)

// Attach an Observer to a client, and every lock it takes is recorded on
// your MeterProvider. A ManualReader stands in for an exporter here.
func Example() {
	mr, err := miniredis.Run() // stands in for your Redis
	if err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer provider.Shutdown(context.Background())

	obs, err := redislockotel.New(provider) // or otel.GetMeterProvider()
	if err != nil {
		panic(err)
	}
	locker := redislock.New(rdb, redislock.WithObserver(obs),
		redislock.WithLogger(slog.New(slog.DiscardHandler)))

	ctx := context.Background()
	lock, err := locker.Acquire(ctx, "nightly-report")
	if err != nil {
		panic(err)
	}
	if _, err := locker.Acquire(ctx, "nightly-report"); errors.Is(err, redislock.ErrNotAcquired) {
		fmt.Println("second instance skipped the job")
	}
	if err := lock.Release(ctx); err != nil {
		panic(err)
	}

	var data metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &data); err != nil {
		panic(err)
	}
	var lines []string
	for _, m := range data.ScopeMetrics[0].Metrics {
		if m.Name != "redislock.acquisitions" {
			continue
		}
		for _, point := range m.Data.(metricdata.Sum[int64]).DataPoints {
			result, _ := point.Attributes.Value(redislockotel.AcquireResultKey)
			lines = append(lines, fmt.Sprintf("%s{%s=%s} %d %s",
				m.Name, redislockotel.AcquireResultKey, result.AsString(), point.Value, m.Unit))
		}
	}
	slices.Sort(lines) // the SDK reports points in no set order
	fmt.Println(strings.Join(lines, "\n"))
	// Output:
	// second instance skipped the job
	// redislock.acquisitions{redislock.acquire.result=acquired} 1 {acquisition}
	// redislock.acquisitions{redislock.acquire.result=not_acquired} 1 {acquisition}
}
