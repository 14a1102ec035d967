package bench

import (
	"context"
	"crypto/rand"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/redislock/redislock/internal/redistest"
)

// concurrentOps is how many cycles one library runs in a round of
// BenchmarkConcurrent, split over its goroutines (at least 25 each).
const concurrentOps = 800

// BenchmarkConcurrent compares uncontended cycles run by several goroutines
// of one process at once, each on names of its own (one Client or go-redis
// client shared by all of them): the case where one Client's goroutines
// can share round trips. One op is one round in which raw (the hand-written
// go-redis cycle: SET NX, then a compare-and-delete EVALSHA), ours and
// rueidis-raw (the same two commands by hand on rueidis, which writes the
// commands of concurrent goroutines to one connection in one batch) each
// run their cycles, interleaved as in BenchmarkInterleaved. It reports each
// one's median time per cycle (wall time of the round ÷ cycles), the
// median allocations per cycle, and ours against raw and rueidis-raw and
// rueidis-raw against raw, each the median over rounds of the ratio within
// a round (load that comes and goes moves both sides of a round alike):
//
//	go test -run '^$' -bench '^BenchmarkConcurrent$' -benchtime 40x .
func BenchmarkConcurrent(b *testing.B) {
	srv := redistest.Start(b)
	libs := []cycler{
		{"raw", openRawCycle},
		{"ours", openOursCycle()},
		{"rueidis-raw", openRueidisRawCycle},
	}
	for _, goroutines := range []int{1, 16, 64} {
		b.Run("goroutines="+strconv.Itoa(goroutines), func(b *testing.B) {
			times := reportCycles(b, srv.Addr(), libs, goroutines)
			b.ReportMetric(medianRatio(times[1], times[0]), "ours/raw")
			b.ReportMetric(medianRatio(times[2], times[0]), "rueidis-raw/raw")
			b.ReportMetric(medianRatio(times[1], times[2]), "ours/rueidis-raw")
		})
	}
}

// reportCycles runs libs interleaved (see interleaveConcurrent), reports
// each one's median time and allocations per cycle, and returns each one's
// time per cycle in every round.
func reportCycles(b *testing.B, addr string, libs []cycler, goroutines int) (times [][]float64) {
	times, allocs := interleaveConcurrent(b, addr, libs, goroutines)
	for i, c := range libs {
		b.ReportMetric(median(times[i]), c.name+"-µs")
		b.ReportMetric(allocs[i], c.name+"-allocs")
	}
	return times
}

// interleaveConcurrent runs libs in rounds with goroutines goroutines each
// and returns each one's time per cycle in µs in every round (times[lib]
// [round]) and its median allocations per cycle (of the whole process, so
// with the Go runtime's and go-redis's own).
func interleaveConcurrent(b *testing.B, addr string, libs []cycler, goroutines int) (times [][]float64, allocs []float64) {
	ctx := context.Background()
	each := max(concurrentOps/goroutines, 25)
	cycles := make([]func(context.Context, string) error, len(libs))
	names := make([][][]string, len(libs)) // [lib][goroutine][cycle]
	for i, c := range libs {
		cycle, closeLib, err := c.open(addr)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { closeLib() })
		if err := cycle(ctx, "concurrent:warmup"); err != nil {
			b.Fatal(err)
		}
		cycles[i] = cycle
		names[i] = make([][]string, goroutines)
		for g := range names[i] {
			for j := range each {
				names[i][g] = append(names[i][g], fmt.Sprintf("concurrent:%s:%d:%d:%d", c.name, goroutines, g, j))
			}
		}
	}
	times = make([][]float64, len(libs))
	mallocs := make([][]float64, len(libs))
	var stats runtime.MemStats
	b.ResetTimer()
	for range b.N {
		for i := range libs {
			runtime.ReadMemStats(&stats)
			before := stats.Mallocs
			start := time.Now()
			var wg sync.WaitGroup
			for g := range goroutines {
				wg.Go(func() {
					for _, name := range names[i][g] {
						if err := cycles[i](ctx, name); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			elapsed := time.Since(start)
			runtime.ReadMemStats(&stats)
			n := float64(goroutines * each)
			times[i] = append(times[i], float64(elapsed.Nanoseconds())/1e3/n)
			mallocs[i] = append(mallocs[i], float64(stats.Mallocs-before)/n)
		}
	}
	b.StopTimer()
	return times, medians(mallocs)
}

// medians returns the median of each row (rows are left as they were).
func medians(rows [][]float64) []float64 {
	out := make([]float64, len(rows))
	for i, row := range rows {
		out[i] = median(row)
	}
	return out
}

// median returns the median of values, without reordering them.
func median(values []float64) float64 {
	sorted := slices.Clone(values)
	slices.Sort(sorted)
	return sorted[len(sorted)/2]
}

// medianRatio returns the median over rounds of a[round] / b[round].
func medianRatio(a, b []float64) float64 {
	ratios := make([]float64, len(a))
	for i := range a {
		ratios[i] = a[i] / b[i]
	}
	return median(ratios)
}

// openRueidisRawCycle is the raw cycle written by hand on rueidis: SET key
// token NX PX ttl, then the compare-and-delete script (EVALSHA, EVAL on
// NOSCRIPT), with rueidis's defaults (auto-pipelining of concurrent
// commands on one connection).
func openRueidisRawCycle(addr string) (func(context.Context, string) error, func() error, error) {
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		return nil, nil, err
	}
	release := rueidis.NewLuaScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0`)
	ttl := uncontendedTTL.Milliseconds()
	return func(ctx context.Context, name string) error {
		token := rand.Text()
		err := client.Do(ctx, client.B().Set().Key(name).Value(token).Nx().PxMilliseconds(ttl).Build()).Error()
		if rueidis.IsRedisNil(err) {
			return errRawHeld
		}
		if err != nil {
			return err
		}
		n, err := release.Exec(ctx, client, []string{name}, []string{token}).AsInt64()
		if err == nil && n != 1 {
			err = errNotOurs
		}
		return err
	}, func() error { client.Close(); return nil }, nil
}
