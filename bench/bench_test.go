package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/internal/redistest"
)

// Benchmarks. Each starts its own redis-server on a free 127.0.0.1 port;
// run.sh runs them all with the settings that BENCHMARKS.md reports.

const (
	contendedGoroutines = 8
	contendedHold       = 100 * time.Microsecond
	contendedTimeout    = 5 * time.Minute
	processes           = 4
)

func BenchmarkUncontended(b *testing.B) {
	srv := redistest.Start(b)
	for _, c := range append(cyclers(), metadataCycler()) {
		b.Run("lib="+c.name, func(b *testing.B) { benchCycle(b, srv.Addr(), c) })
	}
}

func BenchmarkUncontendedFencing(b *testing.B) {
	srv := redistest.Start(b)
	for _, c := range append(fencedCyclers(), metadataCycler(redislock.WithFencing())) {
		b.Run("lib="+c.name, func(b *testing.B) { benchCycle(b, srv.Addr(), c) })
	}
}

// benchMetadata is what redislock run stores by default, typical of
// holder metadata.
const benchMetadata = "host=web-3.prod.example.com pid=424242 cmd=/usr/local/bin/settle"

// metadataCycler is ours with WithMetadata(benchMetadata): against the
// "ours" row, what holder metadata costs.
func metadataCycler(opts ...redislock.Option) cycler {
	return cycler{"ours+metadata", openOursCycle(append(opts, redislock.WithMetadata(benchMetadata))...)}
}

// BenchmarkInspect measures Client.Inspect of a held, fenced lock with
// metadata: its latency and its round trips per call (rt/op, counted by a
// go-redis hook), which must be 1.
func BenchmarkInspect(b *testing.B) {
	srv := redistest.Start(b)
	ctx := context.Background()
	counter := &callCounter{}
	rdb := newGoRedis(srv.Addr(), counter)
	defer rdb.Close()
	locker := redislock.New(rdb, redislock.WithFencing(), redislock.WithMetadata(benchMetadata))
	l, err := locker.Acquire(ctx, "bench:inspect", redislock.WithTTL(time.Hour), redislock.WithWatchdog(false))
	if err != nil {
		b.Fatal(err)
	}
	defer l.Release(ctx)
	if _, err := locker.Inspect(ctx, "bench:inspect"); err != nil { // loads the script
		b.Fatal(err)
	}
	_, before := counter.snapshot()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		info, err := locker.Inspect(ctx, "bench:inspect")
		if err != nil || !info.Held || info.Metadata != benchMetadata {
			b.Fatalf("Inspect: %+v, %v", info, err)
		}
	}
	b.StopTimer()
	_, after := counter.snapshot()
	b.ReportMetric(float64(after-before)/float64(b.N), "rt/op")
}

// benchCycle measures acquire + release on a fresh key, one goroutine.
func benchCycle(b *testing.B, addr string, c cycler) {
	ctx := context.Background()
	cycle, closeLib, err := c.open(addr)
	if err != nil {
		b.Fatal(err)
	}
	defer closeLib()
	names := make([]string, b.N)
	for i := range names {
		names[i] = "bench:uncontended:" + c.name + ":" + strconv.Itoa(i)
	}
	if err := cycle(ctx, "bench:warmup"); err != nil { // connection, scripts
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if err := cycle(ctx, names[i]); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParallel(b *testing.B) {
	srv := redistest.Start(b)
	for _, c := range cyclers() {
		b.Run("lib="+c.name, func(b *testing.B) {
			ctx := context.Background()
			cycle, closeLib, err := c.open(srv.Addr())
			if err != nil {
				b.Fatal(err)
			}
			defer closeLib()
			if err := cycle(ctx, "bench:warmup"); err != nil {
				b.Fatal(err)
			}
			var next atomicCounter
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				// Distinct keys per goroutine, built before the loop; a
				// goroutine reuses its own keys, which it has released.
				g := next.add()
				names := make([]string, 1024)
				for i := range names {
					names[i] = fmt.Sprintf("bench:parallel:%s:%d:%d", c.name, g, i)
				}
				for i := 0; pb.Next(); i++ {
					if err := cycle(ctx, names[i%len(names)]); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkContended: 8 goroutines of one process on one key, a 100µs
// critical section; each op is one acquisition (run with -benchtime
// 2000x). A holder that released queues again only once another has
// acquired, so every acquisition is a handoff to a parked waiter.
func BenchmarkContended(b *testing.B) {
	srv := redistest.Start(b)
	for _, c := range contenders() {
		b.Run("lib="+c.name, func(b *testing.B) {
			runContended(b, srv, c.name, 1, contendedGoroutines, contendedHold, true)
		})
	}
}

// BenchmarkContendedProcesses: the same, with 4 processes × 2 goroutines.
// Holds are timed on the wall clock (time.Now().UnixNano()), which the
// processes share on one machine. The two slow pollers (redsync's 50-250ms
// defaults, bsm at 10ms) are measured in one process only: across
// processes they would take minutes and show the same.
func BenchmarkContendedProcesses(b *testing.B) {
	srv := redistest.Start(b)
	for _, c := range contenders() {
		if c.name == "redsync" || c.name == "bsm-10ms" {
			continue
		}
		b.Run("lib="+c.name, func(b *testing.B) {
			runContended(b, srv, c.name, processes, contendedGoroutines/processes, contendedHold, true)
		})
	}
}

// BenchmarkFreeForAll: 8 goroutines hammering one key with an empty
// critical section, no baton: throughput and fairness.
func BenchmarkFreeForAll(b *testing.B) {
	srv := redistest.Start(b)
	for _, c := range contenders() {
		b.Run("lib="+c.name, func(b *testing.B) {
			runContended(b, srv, c.name, 1, contendedGoroutines, 0, false)
		})
	}
}

// BenchmarkFreeForAllProcesses: the same across 8 processes of one
// goroutine each (so 8 Clients), for raw and ours: the barging raw loop
// against our server-side queue.
func BenchmarkFreeForAllProcesses(b *testing.B) {
	srv := redistest.Start(b)
	for _, c := range contenders() {
		if c.name != "raw" && c.name != "ours" {
			continue
		}
		b.Run("lib="+c.name, func(b *testing.B) {
			runContended(b, srv, c.name, contendedGoroutines, 1, 0, false)
		})
	}
}

func runContended(b *testing.B, srv *redistest.Server, lib string, procs, perProc int, holdFor time.Duration, baton bool) {
	ctx := context.Background()
	admin := srv.Client(b)
	if err := admin.FlushAll(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	boardPath := filepath.Join(b.TempDir(), "board")
	board, err := createBoard(boardPath)
	if err != nil {
		b.Fatal(err)
	}
	defer board.close()
	cfg := contendConfig{
		Lib: lib, Addr: srv.Addr(), Key: "bench:contended", Board: boardPath,
		Target: int64(b.N), Goroutines: perProc, HoldFor: holdFor, Baton: baton,
		WallClock: procs > 1, Timeout: contendedTimeout,
	}
	readies := make(chan error, procs)
	results := make(chan contendResult, procs)
	var children []*exec.Cmd
	var stderrs []*bytes.Buffer
	for p := range procs {
		cfg.FirstID = p * perProc
		if procs == 1 {
			go func(cfg contendConfig) {
				results <- runHolders(cfg, func() { readies <- nil })
			}(cfg)
			continue
		}
		raw, _ := json.Marshal(cfg)
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"="+string(raw))
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		stderr := &bytes.Buffer{}
		cmd.Stderr = stderr
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		children, stderrs = append(children, cmd), append(stderrs, stderr)
		go readChild(stdout, readies, results)
	}
	defer func() {
		for i, cmd := range children {
			if err := cmd.Wait(); err != nil {
				b.Errorf("child %d: %v: %s", i, err, stderrs[i])
			}
		}
	}()
	for range procs {
		if err := <-readies; err != nil {
			board.start() // let the others end
			b.Fatalf("a holder process failed to start: %v", err)
		}
	}
	before, err := readServerWork(ctx, admin)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	board.start()
	var holds []hold
	var commands, roundTrips, gaveUp int64
	var failures []string
	for range procs {
		r := <-results
		holds = append(holds, r.Holds...)
		commands += r.Commands
		roundTrips += r.RoundTrips
		gaveUp += r.GaveUp
		if r.Err != "" {
			failures = append(failures, r.Err)
		}
	}
	b.StopTimer()
	after, err := readServerWork(ctx, admin)
	if err != nil {
		b.Fatal(err)
	}
	if len(failures) > 0 {
		b.Fatalf("holders failed: %v", failures)
	}
	stats := analyzeHolds(holds)
	if err := stats.check(); err != nil {
		b.Fatal(err)
	}
	holders := make([]int, procs*perProc)
	for i := range holders {
		holders[i] = i
	}
	acq := float64(stats.Acquisitions)
	server := after.since(before)
	b.Logf("N=%d acquisitions=%d commands: %v", b.N, stats.Acquisitions, server.calls)
	b.Logf("microseconds per command: %v; server CPU %v", server.micros, server.cpu)
	b.Logf("acquisitions per holder (holder %d to %d in process 0, and so on): %v", 0, perProc-1, stats.PerHolder)
	b.ReportMetric(acq/stats.Span.Seconds(), "acq/s")
	reportHandoffs(b, stats.Handoffs)
	b.ReportMetric(float64(server.calls.total())/acq, "cmds/acq")
	b.ReportMetric(float64(server.cpu.Microseconds())/acq, "server-cpu-µs/acq")
	b.ReportMetric(float64(server.scriptMicros())/acq, "script-µs/acq")
	b.ReportMetric(float64(commands)/acq, "client-cmds/acq")
	b.ReportMetric(float64(roundTrips)/acq, "rt/acq")
	b.ReportMetric(stats.fairness(holders), "fairness-min/max")
	b.ReportMetric(float64(gaveUp)/acq, "gaveup/acq")
}

// watchdogScale is the size of BenchmarkWatchdog: 10,000 locks held for
// 10 s with a 3 s TTL, or a small run with -short (CI's smoke run).
func watchdogScale() (locks int, ttl, holdFor time.Duration) {
	if testing.Short() {
		return 500, time.Second, 1500 * time.Millisecond
	}
	return 10_000, 3 * time.Second, 10 * time.Second
}

// BenchmarkWatchdog holds many locks at once and lets each library renew
// them. One op is the whole scenario (run with -benchtime 1x).
func BenchmarkWatchdog(b *testing.B) {
	srv := redistest.Start(b)
	for _, lib := range watchdogLibs() {
		b.Run("lib="+lib.name, func(b *testing.B) { benchWatchdog(b, srv, lib) })
	}
}

func benchWatchdog(b *testing.B, srv *redistest.Server, lib watchdogLib) {
	ctx := context.Background()
	locks, ttl, holdFor := watchdogScale()
	admin := srv.Client(b)
	if err := admin.FlushAll(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	var counter callCounter
	r, err := lib.open(srv.Addr(), ttl, &counter)
	if err != nil {
		b.Fatal(err)
	}
	defer r.close()
	warmup, err := r.hold(ctx, "bench:watchdog:warmup")
	if err != nil {
		b.Fatal(err)
	}
	if err := warmup.release(ctx); err != nil {
		b.Fatal(err)
	}
	goroutines0, memory0 := footprint()

	acquireStart := time.Now()
	acquireCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	held := make([]heldLock, 0, locks)
	for i := range locks {
		// A library may time out under load (rueidislock gives each key
		// 20ms by default): a name gets a few tries before the run stops
		// at what it could hold.
		var h heldLock
		var err error
		for range 3 {
			if h, err = r.hold(acquireCtx, "bench:watchdog:"+strconv.Itoa(i)); err == nil {
				break
			}
		}
		if err != nil {
			b.Logf("held %d of %d locks, then: %v", len(held), locks, err)
			break
		}
		held = append(held, h)
	}
	acquireTime := time.Since(acquireStart)
	if len(held) == 0 {
		b.Fatal("held no lock at all")
	}

	before, err := readCommandStats(ctx, admin)
	if err != nil {
		b.Fatal(err)
	}
	commands0, roundTrips0 := counter.snapshot()
	extensions0 := r.extensions()
	cpu0 := cpuTime()
	windowStart := time.Now()
	time.Sleep(holdFor) // the measurement window: the libraries renew on their own
	window := time.Since(windowStart)
	cpu := cpuTime() - cpu0
	extensions1 := r.extensions()
	commands1, roundTrips1 := counter.snapshot()
	after, err := readCommandStats(ctx, admin)
	if err != nil {
		b.Fatal(err)
	}
	goroutines, memory := footprint()
	keys, err := admin.DBSize(ctx).Result()
	if err != nil {
		b.Fatal(err)
	}
	lost := 0
	for _, h := range held {
		if h.lost() {
			lost++
		}
	}

	releaseStart := time.Now()
	var releaseErrors int
	for _, h := range held {
		if err := h.release(ctx); err != nil {
			releaseErrors++
		}
	}
	releaseTime := time.Since(releaseStart)

	server := after.since(before)
	seconds := window.Seconds()
	b.Logf("held %d locks (acquired in %v), %d lost and %d keys after %v, released in %v (%d errors); commands: %v",
		len(held), acquireTime, lost, keys, window, releaseTime, releaseErrors, server)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(float64(len(held)), "locks")
	b.ReportMetric(float64(goroutines-goroutines0), "goroutines")
	b.ReportMetric(float64(memory-memory0)/float64(len(held)), "B/lock")
	b.ReportMetric(float64(server.total())/seconds, "cmds/s")
	b.ReportMetric(float64(commands1-commands0)/seconds, "client-cmds/s")
	b.ReportMetric(float64(roundTrips1-roundTrips0)/seconds, "rt/s")
	if extensions := extensions1 - extensions0; extensions1 >= 0 {
		b.ReportMetric(float64(extensions)/seconds, "ext/s")
		if rt := roundTrips1 - roundTrips0; rt > 0 {
			b.ReportMetric(float64(extensions)/float64(rt), "ext/rt")
		}
	}
	b.ReportMetric(100*cpu.Seconds()/seconds, "cpu-%")
	b.ReportMetric(float64(lost), "lost")
	b.ReportMetric(releaseTime.Seconds(), "release-all-s")
}

// footprint returns the goroutines and the bytes in use (heap objects and
// goroutine stacks) after a collection.
func footprint() (goroutines int, bytes int64) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return runtime.NumGoroutine(), int64(ms.HeapAlloc + ms.StackInuse)
}

// cpuTime returns the CPU time (user + system) this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
