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
	libs := familyCyclers()
	for _, goroutines := range []int{1, 16} {
		b.Run("goroutines="+strconv.Itoa(goroutines), func(b *testing.B) {
			times := reportCycles(b, srv.Addr(), libs, goroutines)
			for i, c := range libs[1:] {
				b.ReportMetric(medianRatio(times[i+1], times[0]), c.name+"/exclusive")
			}
		})
	}
}

// familyCyclers: the exclusive lock, a semaphore of 3, a shared hold and a
// multi lock of 3 names, each on one Client with its defaults.
func familyCyclers() []cycler {
	return []cycler{
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
}

// BenchmarkFamilyServerWork reports what one uncontended acquire + release
// of each kind costs the server: the microseconds of its commands (INFO
// commandstats, the scripts' own commands included) per cycle, one op
// being one cycle, on a fresh name each time:
//
//	go test -run '^$' -bench '^BenchmarkFamilyServerWork$' -benchtime 3000x .
func BenchmarkFamilyServerWork(b *testing.B) {
	srv := redistest.Start(b)
	admin := newGoRedis(srv.Addr(), nil)
	defer admin.Close()
	ctx := context.Background()
	for _, c := range familyCyclers() {
		b.Run("kind="+c.name, func(b *testing.B) {
			cycle, closeLib, err := c.open(srv.Addr())
			if err != nil {
				b.Fatal(err)
			}
			defer closeLib()
			if err := cycle(ctx, "serverwork:warmup:"+c.name); err != nil {
				b.Fatal(err)
			}
			before, err := readServerWork(ctx, admin)
			if err != nil {
				b.Fatal(err)
			}
			i := 0
			for b.Loop() {
				if err := cycle(ctx, "serverwork:"+c.name+":"+strconv.Itoa(i)); err != nil {
					b.Fatal(err)
				}
				i++
			}
			after, err := readServerWork(ctx, admin)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(after.since(before).micros.total())/float64(i), "server-µs/cycle")
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
