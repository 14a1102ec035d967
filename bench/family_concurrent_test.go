package bench

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

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

// BenchmarkFamilyServerWork reports what an uncontended acquire + release
// of each kind costs each side, one op being one cycle on a fresh name,
// run by 1 or 16 goroutines on one Client: the server's CPU time (INFO
// cpu, user + system: its network reads and writes included), this
// process's CPU time (getrusage, the benchmark's own loop included), both
// per cycle; the commands' calls and microseconds over the run (INFO
// commandstats, where a script's time includes the commands it runs,
// which are also counted on their own) are logged with -v:
//
//	go test -run '^$' -bench '^BenchmarkFamilyServerWork$' -benchtime 20000x .
func BenchmarkFamilyServerWork(b *testing.B) {
	srv := redistest.Start(b)
	admin := newGoRedis(srv.Addr(), nil)
	defer admin.Close()
	for _, goroutines := range []int{1, 16} {
		for _, c := range familyCyclers() {
			b.Run("goroutines="+strconv.Itoa(goroutines)+"/kind="+c.name, func(b *testing.B) {
				serverWorkRun(b, admin, c, srv.Addr(), goroutines)
			})
		}
	}
}

// serverWorkRun runs b.N cycles of c on goroutines goroutines and reports
// the CPU each side spent per cycle (see BenchmarkFamilyServerWork).
func serverWorkRun(b *testing.B, admin *redis.Client, c cycler, addr string, goroutines int) {
	ctx := context.Background()
	cycle, closeLib, err := c.open(addr)
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
	clientBefore := cpuTime()
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for range goroutines {
		wg.Go(func() {
			for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
				if err := cycle(ctx, fmt.Sprintf("serverwork:%s:%d:%d", c.name, goroutines, i)); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	client := cpuTime() - clientBefore
	after, err := readServerWork(ctx, admin)
	if err != nil {
		b.Fatal(err)
	}
	work := after.since(before)
	n := float64(b.N)
	b.ReportMetric(float64(work.cpu.Microseconds())/n, "server-cpu-µs/cycle")
	b.ReportMetric(float64(client.Microseconds())/n, "client-cpu-µs/cycle")
	b.Logf("%d cycles: calls %v; µs %v", b.N, work.calls, work.micros)
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
