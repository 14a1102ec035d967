package bench

import (
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	RunChildIfAsked() // a child of BenchmarkContendedProcesses runs its holders and exits
	// Library logs (slog's default) go to the file run.sh names, so that
	// they cannot split a benchmark's result line in the output.
	if path := os.Getenv(logEnv); path != "" {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		slog.SetDefault(slog.New(slog.NewTextHandler(f, nil)))
	}
	goleak.VerifyTestMain(m)
}

// logEnv names the file that receives the libraries' logs.
const logEnv = "REDISLOCK_BENCH_LOG"

type atomicCounter struct{ n atomic.Int64 }

func (c *atomicCounter) add() int64 { return c.n.Add(1) - 1 }
