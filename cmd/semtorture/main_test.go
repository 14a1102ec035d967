package main

import (
	"flag"
	"io"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/redislock/redislock/internal/redistest"
)

var soak = flag.Duration("semtorture.soak", 0, "run the checker this long instead of the CI's few seconds")

func TestMain(m *testing.M) {
	// The checker re-executes its own binary as the children; under go
	// test that binary is this test binary.
	if runChildFromEnv() {
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// checkerConfig is the CI's short checker run (or -semtorture.soak long)
// of mode on a redis-server of its own: 3 processes of 3 goroutines,
// 300 ms leases, SIGSTOP pauses of 700 ms.
func checkerConfig(t *testing.T, name, mode string) config {
	d := 3 * time.Second
	if *soak > 0 {
		d = *soak
	}
	return config{
		Redis: redistest.Start(t).Addr(), Procs: 3, Goroutines: 3, Limit: 1, Duration: d,
		TTL: 300 * time.Millisecond, Work: 20 * time.Millisecond, Writes: 5,
		Pause: 300 * time.Millisecond, PauseFor: 700 * time.Millisecond, Name: name, Mode: mode,
	}
}

// runChecker runs cfg with this test binary as the children.
func runChecker(t *testing.T, cfg config) summary {
	exe, err := os.Executable()
	require.NoError(t, err)
	s, err := run(cfg, exe)
	require.NoError(t, err)
	t.Logf("%+v", s)
	return s
}

func TestNeverMoreThanLimitInside(t *testing.T) {
	cfg := checkerConfig(t, "torture", "")
	cfg.Limit = 2
	s := runChecker(t, cfg)
	require.Positive(t, s.Holds)
	require.Zero(t, s.Violations, "more than %d inside at once", cfg.Limit)
	require.Zero(t, s.RepeatedFences)
	require.True(t, s.ok())
}

func TestTheAnalysisFindsTooManyInside(t *testing.T) {
	holds := []hold{
		{Fence: 1, From: 0, To: 10},
		{Fence: 2, From: 5, To: 15},
		{Fence: 3, From: 10, To: 20}, // touches the first: not an overlap
	}
	s := analyze(holds, 2)
	require.Zero(t, s.Violations)
	require.Equal(t, 2, s.MaxInside)
	holds = append(holds, hold{Fence: 3, From: 12, To: 13})
	s = analyze(holds, 2)
	require.Equal(t, 1, s.Violations, "three inside from 12 to 13")
	require.Equal(t, 1, s.RepeatedFences)
	require.False(t, s.ok())
}

func TestNoExclusiveHolderWithAnyOther(t *testing.T) {
	s := runChecker(t, checkerConfig(t, "torture-shared", "shared"))
	require.Positive(t, s.Shared)
	require.Less(t, s.Shared, s.Holds, "exclusive holds too")
	require.Greater(t, s.MaxInside, 1, "shared holders were inside together")
	require.Zero(t, s.Violations, "an exclusive holder with another inside")
	require.Zero(t, s.RepeatedFences)
	require.Zero(t, s.FenceInversions)
	require.True(t, s.ok())
}

func TestTheSharedAnalysisFindsAnExclusiveWithOthers(t *testing.T) {
	holds := []hold{
		{Fence: 5, From: 0, To: 10, Shared: true},
		{Fence: 5, From: 2, To: 12, Shared: true}, // readers together: fine
		{Fence: 6, From: 12, To: 20},              // a writer after them, touching: fine
		{Fence: 7, From: 21, To: 30, Shared: true},
	}
	s := analyzeShared(holds)
	require.Zero(t, s.Violations)
	require.Zero(t, s.FenceInversions)
	require.Equal(t, 2, s.MaxInside)
	require.True(t, s.ok())

	s = analyzeShared(append(holds, hold{Fence: 8, From: 25, To: 26}))
	require.Equal(t, 1, s.Violations, "a writer with a reader inside")
	s = analyzeShared(append(holds, hold{Fence: 9, From: 15, To: 16}))
	require.Equal(t, 1, s.Violations, "two writers")
	s = analyzeShared(append(holds, hold{Fence: 6, From: 31, To: 40}))
	require.Equal(t, 1, s.RepeatedFences)
	require.Equal(t, 2, s.FenceInversions, "a writer whose fence is not above those of the writer (6) and the reader (7) before it")
	require.False(t, s.ok())
}

func TestMultiNeverTwoInsideOneName(t *testing.T) {
	cfg := checkerConfig(t, "torture-multi", "multi")
	cfg.Names = 5
	s := runChecker(t, cfg)
	require.Positive(t, s.Holds)
	require.Zero(t, s.Violations, "two holders inside one name at once")
	require.Zero(t, s.RepeatedFences)
	require.True(t, s.ok())
}

func TestTheMultiAnalysisFindsTwoInsideOneName(t *testing.T) {
	holds := []hold{
		{Names: []string{"a", "b"}, Fences: []int64{1, 1}, From: 0, To: 10},
		{Names: []string{"c"}, Fences: []int64{1}, From: 5, To: 15},          // another name: no overlap
		{Names: []string{"b", "c"}, Fences: []int64{2, 2}, From: 15, To: 20}, // touches both: not an overlap
	}
	s := analyzeMulti(holds)
	require.Zero(t, s.Violations)
	require.Equal(t, 1, s.MaxInside)
	holds = append(holds, hold{Names: []string{"d", "a"}, Fences: []int64{1, 1}, From: 9, To: 12})
	s = analyzeMulti(holds)
	require.Equal(t, 1, s.Violations, "a held twice from 9 to 10")
	require.Equal(t, 1, s.RepeatedFences, "a's fence 1 twice")
	require.False(t, s.ok())
}

func TestModeFlag(t *testing.T) {
	cfg, err := parseFlags([]string{"-mode", "multi", "-names", "4"}, io.Discard)
	require.NoError(t, err)
	require.Equal(t, "multi", cfg.Mode)
	require.Equal(t, 4, cfg.Names)
	_, err = parseFlags([]string{"-mode", "nope"}, io.Discard)
	require.ErrorContains(t, err, `-mode "nope"`)
}
