package bench

import (
	"context"
	"strconv"
	"testing"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/internal/redistest"
)

// BenchmarkFamily compares the lock family's uncontended cycles with the
// exclusive lock's, on one Client shared by 1 or 16 goroutines, each on
// names of its own (a fresh name every cycle): one op is one round in
// which the exclusive lock (Acquire), a semaphore of 3 (AcquireSemaphore),
// a shared hold (AcquireShared) and a multi lock of 3 names
// (AcquireMulti) each run their cycles of acquire + release, interleaved
// as in BenchmarkConcurrent. It reports each one's median time and
// allocations per cycle, and each family member against the exclusive
// lock: the median over rounds of the ratio within a round:
//
//	go test -run '^$' -bench '^BenchmarkFamily$' -benchtime 40x .
func BenchmarkFamily(b *testing.B) {
	srv := redistest.Start(b)
	libs := []cycler{
		{"exclusive", openOursCycle()},
		{"semaphore", openFamilyCycle(func(ctx context.Context, c *redislock.Client, name string) (*redislock.Lock, error) {
			return c.AcquireSemaphore(ctx, name, 3)
		})},
		{"shared", openFamilyCycle(func(ctx context.Context, c *redislock.Client, name string) (*redislock.Lock, error) {
			return c.AcquireShared(ctx, name)
		})},
		{"multi3", openFamilyCycle(func(ctx context.Context, c *redislock.Client, name string) (*redislock.Lock, error) {
			return c.AcquireMulti(ctx, []string{name + ":a", name + ":b", name + ":c"})
		})},
	}
	for _, goroutines := range []int{1, 16} {
		b.Run("goroutines="+strconv.Itoa(goroutines), func(b *testing.B) {
			times := reportCycles(b, srv.Addr(), libs, goroutines)
			for i, c := range libs[1:] {
				b.ReportMetric(medianRatio(times[i+1], times[0]), c.name+"/exclusive")
			}
		})
	}
}

// openFamilyCycle is a cycler of one member of the lock family: take with
// acquire, then Release, on one Client with its defaults.
func openFamilyCycle(acquire func(ctx context.Context, c *redislock.Client, name string) (*redislock.Lock, error)) func(string) (func(context.Context, string) error, func() error, error) {
	return func(addr string) (func(context.Context, string) error, func() error, error) {
		rdb := newGoRedis(addr, nil)
		locker := redislock.New(rdb)
		return func(ctx context.Context, name string) error {
			l, err := acquire(ctx, locker, name)
			if err != nil {
				return err
			}
			return l.Release(ctx)
		}, rdb.Close, nil
	}
}
