package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// contendConfig describes the holders of one process in a contended run.
type contendConfig struct {
	Lib        string        `json:"lib"`
	Addr       string        `json:"addr"`
	Key        string        `json:"key"`
	Board      string        `json:"board"`
	Target     int64         `json:"target"`     // acquisitions across all processes
	Goroutines int           `json:"goroutines"` // holders in this process
	FirstID    int           `json:"first_id"`   // holder numbers FirstID, FirstID+1, ...
	HoldFor    time.Duration `json:"hold_for"`   // the critical section
	// Baton: after releasing, a holder waits until another holder has
	// acquired before it queues again, so that every acquisition is a
	// handoff to a waiter that was parked when the lock was released.
	Baton     bool          `json:"baton"`
	WallClock bool          `json:"wall_clock"` // time with UnixNano (several processes)
	Timeout   time.Duration `json:"timeout"`
}

// contendResult is what the holders of one process report.
type contendResult struct {
	Holds []hold `json:"holds"`
	// GaveUp counts lock calls that returned an error other than the end
	// of the run (redsync gives up after its tries; the caller then asks
	// again).
	GaveUp     int64  `json:"gave_up"`
	Commands   int64  `json:"commands"`    // sent by this process' client
	RoundTrips int64  `json:"round_trips"` // idem
	Err        string `json:"err,omitempty"`
}

// maxGiveUps bounds the failed lock calls of a run, so that a broken
// library or server ends the run instead of spinning until the timeout.
const maxGiveUps = 10_000

// runHolders opens the library and runs cfg.Goroutines holders until the
// board counts cfg.Target acquisitions. ready is called once the library
// is open and warmed up; holders then wait for the board's start.
func runHolders(cfg contendConfig, ready func()) contendResult {
	var result contendResult
	fail := func(err error) contendResult { result.Err = err.Error(); return result }
	c, err := contenderNamed(cfg.Lib)
	if err != nil {
		return fail(err)
	}
	b, err := openBoard(cfg.Board)
	if err != nil {
		return fail(err)
	}
	defer b.close()
	var counter callCounter
	m, err := c.open(cfg.Addr, &counter)
	if err != nil {
		return fail(err)
	}
	defer m.close()
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Timeout)
	defer cancel()
	// Warm up on another key: connections, scripts, subscriptions.
	unlock, err := m.lock(ctx, cfg.Key+":warmup")
	if err != nil {
		return fail(fmt.Errorf("warm-up: %w", err))
	}
	if err := unlock(ctx); err != nil {
		return fail(fmt.Errorf("warm-up release: %w", err))
	}
	ready()
	for !b.started() {
		if ctx.Err() != nil {
			return fail(errors.New("the run never started"))
		}
		time.Sleep(50 * time.Microsecond)
	}
	commands0, roundTrips0 := counter.snapshot()

	epoch := time.Now()
	clock := func() int64 { return int64(time.Since(epoch)) }
	if cfg.WallClock {
		clock = func() int64 { return time.Now().UnixNano() }
	}
	done := func() bool { return b.count() >= cfg.Target }
	var (
		mu     sync.Mutex
		errs   []error
		wg     sync.WaitGroup
		gaveUp int64
	)
	for g := range cfg.Goroutines {
		id := cfg.FirstID + g
		wg.Go(func() {
			var holds []hold
			var failed int64
			defer func() {
				mu.Lock()
				result.Holds = append(result.Holds, holds...)
				gaveUp += failed
				mu.Unlock()
			}()
			for !done() {
				unlock, err := m.lock(ctx, cfg.Key)
				if err != nil {
					failed++
					if ctx.Err() != nil || failed > maxGiveUps {
						mu.Lock()
						errs = append(errs, fmt.Errorf("holder %d: %w", id, err))
						mu.Unlock()
						return
					}
					continue
				}
				acquiredAt := clock()
				n := b.acquired()
				if cfg.HoldFor > 0 {
					time.Sleep(cfg.HoldFor)
				}
				releasingAt := clock()
				if err := unlock(ctx); err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("holder %d release: %w", id, err))
					mu.Unlock()
					return
				}
				holds = append(holds, hold{Holder: id, AcquiredAt: acquiredAt, ReleasingAt: releasingAt})
				if cfg.Baton {
					b.waitPast(n, done)
				}
			}
		})
	}
	wg.Wait()
	result.GaveUp = gaveUp
	commands1, roundTrips1 := counter.snapshot()
	result.Commands, result.RoundTrips = commands1-commands0, roundTrips1-roundTrips0
	if err := errors.Join(errs...); err != nil {
		return fail(err)
	}
	return result
}

// childEnv carries a contendConfig, as JSON, to a child process.
const childEnv = "REDISLOCK_BENCH_CHILD"

// RunChildIfAsked runs the holders of one process of a multi-process
// benchmark when the environment asks for it, and exits; otherwise it
// returns at once. Call it first in TestMain.
//
// The child prints "ready" once warmed up, waits for the parent to start
// the board, and prints its contendResult as JSON.
func RunChildIfAsked() {
	raw := os.Getenv(childEnv)
	if raw == "" {
		return
	}
	var cfg contendConfig
	var result contendResult
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		result.Err = fmt.Sprintf("reading %s: %v", childEnv, err)
	} else {
		result = runHolders(cfg, func() { fmt.Println("ready") })
	}
	out, _ := json.Marshal(result)
	fmt.Println(string(out))
	os.Exit(0)
}

// readChild reads a child's output: "ready", then the result line.
func readChild(out io.Reader, ready chan<- error, result chan<- contendResult) {
	scanner := bufio.NewScanner(out)
	scanner.Buffer(make([]byte, 1<<20), 1<<26)
	sawReady := false
	for scanner.Scan() {
		line := scanner.Bytes()
		if !sawReady && string(line) == "ready" {
			sawReady = true
			ready <- nil
			continue
		}
		var r contendResult
		if err := json.Unmarshal(line, &r); err != nil {
			continue // not ours: a log line from a library, say
		}
		if !sawReady {
			ready <- errors.New(r.Err)
		}
		result <- r
		return
	}
	err := fmt.Errorf("child ended without a result: %v", scanner.Err())
	if !sawReady {
		ready <- err
	}
	result <- contendResult{Err: err.Error()}
}
