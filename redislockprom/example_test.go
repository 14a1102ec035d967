package redislockprom_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
	"github.com/redis/go-redis/v9"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/redislockprom"
)

// Attach an Observer to a client, and every lock it takes is counted.
func Example() {
	mr, err := miniredis.Run() // stands in for your Redis
	if err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	registry := prometheus.NewRegistry() // or prometheus.DefaultRegisterer
	obs, err := redislockprom.New(registry)
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

	// What Prometheus scrapes (testutil formats it here; in production
	// promhttp.HandlerFor(registry, ...) serves it):
	text, err := testutil.CollectAndFormat(obs, expfmt.TypeTextPlain,
		"redislock_acquired_total", "redislock_not_acquired_total", "redislock_lost_total")
	if err != nil {
		panic(err)
	}
	fmt.Print(string(text))
	// Output:
	// second instance skipped the job
	// # HELP redislock_acquired_total Acquire calls that took the lock.
	// # TYPE redislock_acquired_total counter
	// redislock_acquired_total 1
	// # HELP redislock_lost_total Held locks that were lost, by reason (expired, taken, unreachable, max_hold).
	// # TYPE redislock_lost_total counter
	// redislock_lost_total{reason="expired"} 0
	// redislock_lost_total{reason="max_hold"} 0
	// redislock_lost_total{reason="taken"} 0
	// redislock_lost_total{reason="unreachable"} 0
	// # HELP redislock_not_acquired_total Acquire calls that gave up because another holder had the lock.
	// # TYPE redislock_not_acquired_total counter
	// redislock_not_acquired_total 1
}
