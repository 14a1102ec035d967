package bench

import (
	"context"
	"errors"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/internal/redistest"
)

// Storm sizes: stormGoroutines goroutines of one process on one name for
// stormFor, each acquiring, releasing at once and acquiring again.
const (
	stormGoroutines = 500
	stormFor        = 6 * time.Second
	// stormAttempt bounds one Acquire (and the naive spin lock's wait):
	// a goroutine that does not get the lock by then tries again.
	stormAttempt = 2 * time.Second
)

// BenchmarkStorm: stormGoroutines goroutines of one process hammer one
// name for stormFor, with the machine idle (load=0) and with load=2 (two
// busy processes, one per core of a 2-core machine, competing with the
// benchmark and with redis-server for the CPU). Each goroutine acquires
// (within stormAttempt), releases at once and acquires again.
//
//   - raw: the naive spin lock on go-redis (SET NX every 1 ms);
//   - ours: one Client, waiting with LinearBackoff(1ms) (its goroutines
//     queue in-process; only the head talks to Redis);
//   - ours-noretry: one Client with the default (no waiting): a tight
//     loop of attempts, each failed one answered with ErrNotAcquired;
//   - ours-clients: a Client per goroutine on one go-redis client, waiting
//     with LinearBackoff(1ms): 500 processes' worth of waiters, queued on
//     the server and woken by its announcements.
//
// It reports acquisitions per second and fairness (fewest acquisitions
// of a goroutine ÷ most; 0 when a goroutine never got the lock). One op
// is one storm (run with -benchtime 1x):
//
//	go test -run '^$' -bench '^BenchmarkStorm$' -benchtime 1x .
func BenchmarkStorm(b *testing.B) {
	srv := redistest.Start(b)
	libs := []contender{
		{"raw", openRaw},
		{"ours", openOurs(redislock.WithRetry(redislock.LinearBackoff(pollInterval)))},
		{"ours-noretry", openOurs()},
		{"ours-clients", openOursPerGoroutine(redislock.WithRetry(redislock.LinearBackoff(pollInterval)))},
	}
	for _, load := range []int{0, 2} {
		for _, c := range libs {
			b.Run("load="+strconv.Itoa(load)+"/lib="+c.name, func(b *testing.B) {
				stopLoad := startLoad(b, load)
				defer stopLoad()
				m, err := c.open(srv.Addr(), nil)
				if err != nil {
					b.Fatal(err)
				}
				defer m.close()
				var total, fairness []float64
				storms := b.N
				if testing.Short() {
					storms = 1 // CI's smoke run (-benchtime 100x): one short storm
				}
				for i := range storms {
					acq, fair := storm(b, m, "bench:storm:"+c.name+":"+strconv.Itoa(load)+":"+strconv.Itoa(i))
					total, fairness = append(total, acq), append(fairness, fair)
				}
				rows := medians([][]float64{total, fairness})
				b.ReportMetric(rows[0], "acq/s")
				b.ReportMetric(rows[1], "fairness-min/max")
			})
		}
	}
}

// storm runs one storm on name and returns acquisitions per second and
// fairness.
func storm(b *testing.B, m mutex, name string) (perSecond, fairness float64) {
	length := stormFor
	if testing.Short() {
		length = 200 * time.Millisecond
	}
	ctx, cancel := context.WithTimeout(context.Background(), length)
	defer cancel()
	counts := make([]int64, stormGoroutines)
	var failed atomic.Value
	var wg sync.WaitGroup
	start := time.Now()
	for g := range counts {
		wg.Go(func() {
			for ctx.Err() == nil {
				attempt, stop := context.WithTimeout(context.WithValue(ctx, goroutineKey{}, int64(g)), stormAttempt)
				unlock, err := m.lock(attempt, name)
				stop()
				if err != nil {
					if ctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, redislock.ErrNotAcquired) {
						failed.Store(err)
					}
					continue
				}
				counts[g]++
				if err := unlock(context.Background()); err != nil {
					failed.Store(err)
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	var sum int64
	for _, n := range counts {
		sum += n
	}
	return float64(sum) / elapsed.Seconds(), float64(slices.Min(counts)) / float64(max(slices.Max(counts), 1))
}

// startLoad starts n busy processes (shell loops) and returns what stops
// them.
func startLoad(b *testing.B, n int) func() {
	var busy []*exec.Cmd
	for range n {
		cmd := exec.Command("sh", "-c", "while :; do :; done")
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		busy = append(busy, cmd)
	}
	return func() {
		for _, cmd := range busy {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}
}

// oursPerGoroutine gives each goroutine of a storm a Client of its own, on
// one shared go-redis client: many processes' worth of waiters, which
// queue on the server, in one process.
type oursPerGoroutine struct {
	rdb     *redis.Client
	opts    []redislock.Option
	mu      sync.Mutex
	clients map[int64]*redislock.Client
}

func openOursPerGoroutine(opts ...redislock.Option) func(string, *callCounter) (mutex, error) {
	return func(addr string, counter *callCounter) (mutex, error) {
		return &oursPerGoroutine{rdb: newGoRedis(addr, counter), opts: opts, clients: map[int64]*redislock.Client{}}, nil
	}
}

type goroutineKey struct{}

func (m *oursPerGoroutine) lock(ctx context.Context, name string) (func(context.Context) error, error) {
	g, _ := ctx.Value(goroutineKey{}).(int64)
	m.mu.Lock()
	c := m.clients[g]
	if c == nil {
		c = redislock.New(m.rdb, m.opts...)
		m.clients[g] = c
	}
	m.mu.Unlock()
	l, err := c.Acquire(ctx, name)
	if err != nil {
		return nil, err
	}
	return l.Release, nil
}

func (m *oursPerGoroutine) close() error {
	for _, c := range m.clients {
		_ = c.Close(context.Background())
	}
	return m.rdb.Close()
}
