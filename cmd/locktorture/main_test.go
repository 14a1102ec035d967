package main

import (
	"flag"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/redislock/redislock/internal/redistest"
)

var soak = flag.Duration("locktorture.soak", 0, "run the checker this long (per scenario) instead of the CI's few seconds")

func TestMain(m *testing.M) {
	// The checker re-executes its own binary as the children; under go
	// test that binary is this test binary.
	if runChildFromEnv() {
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

func duration(ci time.Duration) time.Duration {
	if *soak > 0 {
		return *soak
	}
	return ci
}

// servers starts the lock server and the resource's server.
func servers(t *testing.T) (lockAddr, resourceAddr string) {
	t.Helper()
	return redistest.Start(t).Addr(), redistest.Start(t).Addr()
}

func runChecker(t *testing.T, cfg config) Summary {
	t.Helper()
	s, err := run(cfg, os.Args[0])
	require.NoError(t, err)
	var table strings.Builder
	s.printTable(&table)
	t.Logf("FIGURE locktorture %s\n%s", t.Name(), table.String())
	return s
}

func TestCheckerFindsNoOverlapWithoutFaults(t *testing.T) {
	lockAddr, resourceAddr := servers(t)
	s := runChecker(t, config{Redis: lockAddr, Resource: resourceAddr, Procs: 3, Goroutines: 2, Names: 2,
		Duration: duration(2 * time.Second), TTL: time.Second, Work: time.Millisecond})
	require.Empty(t, s.Failures)
	require.Positive(t, s.Acquisitions)
	require.Zero(t, s.Overlaps, "holders of one name overlapped with no fault injected")
	require.Zero(t, s.StaleWritesAttempted)
	require.Zero(t, s.StaleWritesAccepted)
	require.Zero(t, s.LostUpdates)
	require.Equal(t, s.Writes, s.WritesAccepted, "without faults every fenced write is the newest")
}

// Without fences a waiter takes a lock handed over to it without claiming
// it: the holders of one name must still never overlap.
func TestCheckerUnfencedFindsNoOverlapWithoutFaults(t *testing.T) {
	lockAddr, resourceAddr := servers(t)
	s := runChecker(t, config{Redis: lockAddr, Resource: resourceAddr, Procs: 3, Goroutines: 2, Names: 2,
		Duration: duration(2 * time.Second), TTL: time.Second, Work: time.Millisecond, Unfenced: true})
	require.Empty(t, s.Failures)
	require.Positive(t, s.Acquisitions)
	require.Zero(t, s.Overlaps, "holders of one name overlapped with no fault injected")
	require.Zero(t, s.Writes, "nothing is written without a fence")
}

func TestCheckerWithPausedHoldersAcceptsNoStaleWrite(t *testing.T) {
	lockAddr, resourceAddr := servers(t)
	const ttl = 300 * time.Millisecond
	// A long work phase, so that a pause most often lands between the read
	// and the write: the case fencing is for.
	s := runChecker(t, config{Redis: lockAddr, Resource: resourceAddr, Procs: 3, Goroutines: 2, Names: 2,
		Duration: duration(4 * time.Second), TTL: ttl, Work: 40 * time.Millisecond,
		Pause: 500 * time.Millisecond, PauseFor: 2 * ttl})
	require.Positive(t, s.Acquisitions)
	require.Positive(t, s.Pauses, "no pause was injected")
	require.Zero(t, s.StaleWritesAccepted, "a write with an outdated fence was accepted")
	require.Empty(t, s.Failures)
	// A holder frozen past its lease has its context cancelled as soon as it
	// runs again (the safe-deadline timer is overdue), within one extend
	// interval at most.
	require.LessOrEqual(t, s.MaxResumeToLoss, ttl/3)
}

func TestAnalyzeCountsOverlapsStaleWritesAndLostUpdates(t *testing.T) {
	// Name "a": holder 1 (fence 1) is paused past its lease; holder 2
	// (fence 2) acquires at 150, before 1's loss signal at 160 and its
	// release at 300; 2 writes first, then 1's late write is rejected.
	// Name "b": holder 3 (fence 3) is late too, but writes before holder 4
	// (fence 4), which had read earlier: accepted late, and its update is
	// lost.
	holds := []hold{
		{Proc: 0, Name: "a", Fence: 1, Acquired: 100, Released: 300, Lost: 160, LostReason: "expired",
			WriteSent: 250, WriteDone: 260, Accepted: false},
		{Proc: 1, Name: "a", Fence: 2, Acquired: 150, Released: 220, WriteSent: 200, WriteDone: 210, Accepted: true},
		{Proc: 0, Name: "b", Fence: 3, Acquired: 100, Released: 300, WriteSent: 240, WriteDone: 245, Accepted: true},
		{Proc: 1, Name: "b", Fence: 4, Acquired: 200, Released: 320, WriteSent: 250, WriteDone: 260, Accepted: true},
		{Proc: 1, Name: "c", Fence: 7, Acquired: 10, Released: 20, WriteSent: 15, WriteDone: 16, Accepted: true},
		{Proc: 2, Name: "c", Fence: 8, Acquired: 20, Released: 30},
	}
	resource := map[string]resourceState{
		"a": {Value: 1, Log: []int64{2, -1}},
		"b": {Value: 1, Log: []int64{3, 4}},
		"c": {Value: 1, Log: []int64{7}},
	}
	s := analyze(holds, []pause{{Proc: 0, Stopped: 110, Resumed: 240}}, resource, 5, 1)
	require.Equal(t, 6, s.Acquisitions)
	require.Equal(t, 2, s.Overlaps, "a and b each have one hold beginning inside another; c's touch at 20 is not one")
	require.Equal(t, 2, s.UnsignalledOverlaps, "a's second holder began before the first was told (150 < 160)")
	require.Equal(t, 2, s.StaleWritesAttempted)
	require.Equal(t, 1, s.StaleWritesRejected)
	require.Equal(t, 1, s.LateWritesAccepted)
	require.Zero(t, s.StaleWritesAccepted)
	require.Equal(t, 1, s.LostUpdates, "b: two accepted increments, counter 1")
	require.Equal(t, map[string]int{"expired": 1}, s.Lost)
	require.Equal(t, 2, s.PausedHolders)
	require.Equal(t, time.Duration(0), s.MaxResumeToLoss, "lost (160) before the resume (240)")
	require.Equal(t, 5, s.NotAcquired)
	require.Equal(t, 1, s.AcquireErrs)
	s.verdict()
	require.Empty(t, s.Failures, "with a fault injected, overlaps and late writes are expected")

	t.Run("a resource that accepts an older fence after a newer one is caught", func(t *testing.T) {
		broken := map[string]resourceState{"a": {Value: 2, Log: []int64{2, 1}}}
		hs := []hold{holds[0], holds[1]}
		hs[0].Accepted = true
		s := analyze(hs, nil, broken, 0, 0)
		require.Equal(t, 1, s.StaleWritesAccepted, "found in the resource's log and from the stamps, counted once")
		s.verdict()
		require.Contains(t, strings.Join(s.Failures, ";"), "stale writes accepted")
	})

	t.Run("overlaps without a fault fail the run", func(t *testing.T) {
		s := analyze(holds[:2], nil, resource, 0, 0)
		s.verdict()
		require.Contains(t, strings.Join(s.Failures, ";"), "overlaps with no fault injected")
	})

	t.Run("a run without acquisitions fails", func(t *testing.T) {
		s := analyze(nil, nil, nil, 3, 0)
		s.verdict()
		require.Equal(t, []string{"no acquisition at all"}, s.Failures)
	})
}

func TestFlagsRejectBadInput(t *testing.T) {
	for _, args := range [][]string{
		{"-resource", ""},
		{"-resource", "127.0.0.1:1", "-procs", "0"},
		{"-resource", "127.0.0.1:1", "-duration", "0s"},
		{"-resource", "127.0.0.1:1", "-ttl", "1ms"},
		{"-resource", "127.0.0.1:1", "-pause", "-1s"},
		{"-resource", "127.0.0.1:1", "-unfenced", "-pause", "1s"},
		{"-resource", "127.0.0.1:1", "extra"},
		{"-no-such-flag"},
	} {
		_, err := parseFlags(args, io.Discard)
		require.Error(t, err, "%q", args)
	}
	cfg, err := parseFlags([]string{"-resource", "127.0.0.1:1", "-ttl", "400ms"}, io.Discard)
	require.NoError(t, err)
	require.Equal(t, 800*time.Millisecond, cfg.PauseFor, "pauses last twice the TTL by default")
}

func TestRunReportsAnUnreachableServer(t *testing.T) {
	cfg := config{Redis: "127.0.0.1:" + strconv.Itoa(redistest.FreePort(t)), Resource: "127.0.0.1:" + strconv.Itoa(redistest.FreePort(t)),
		Procs: 1, Goroutines: 1, Names: 1, Duration: time.Second, TTL: time.Second}
	_, err := run(cfg, os.Args[0])
	require.ErrorContains(t, err, "redis at")
}
