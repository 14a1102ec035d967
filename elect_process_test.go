//go:build linux

package redislock_test

// Elect across processes (issue 15, part 3): three campaigner processes
// (this test binary, re-executed) on a real redis-server. The leader is
// frozen with SIGSTOP past its TTL, or shut down cleanly, and another
// takes over. Every trial asserts the order of events and the fences; the
// times are measured and logged on lines starting with FIGURE, which
// docs/RELIABILITY.md collects:
//
//	REDISLOCK_ELECT_TRIALS=20 go test -count=1 -run 'TestElectAcrossProcesses' -v . | grep FIGURE

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/internal/redistest"
)

const (
	electHelperEnv = "REDISLOCK_ELECT_HELPER"
	// electTrialsEnv sets how many trials of each kind run (default 2,
	// to keep CI short).
	electTrialsEnv = "REDISLOCK_ELECT_TRIALS"
	// electTrialTTL is long enough that a leader on an overloaded
	// machine (the whole suite under -race) does not lose its term to a
	// late extension, which would read as a second leader losing.
	electTrialTTL = 2 * time.Second
)

// electEvent is what a campaigner process reports, on lines starting with
// "ELECT ". Times are CLOCK_MONOTONIC readings, shared by every process.
type electEvent struct {
	Who    int    `json:"who"`
	Event  string `json:"event"` // "lead", "lost" (lead's ctx ended), "stopping", "err"
	Fence  int64  `json:"fence,omitempty"`
	Mono   int64  `json:"mono"`
	Reason string `json:"reason,omitempty"`
	Err    string `json:"err,omitempty"`
}

// TestElectHelperProcess is not a test of its own: it is a campaigner
// process that TestElectAcrossProcesses starts. It campaigns; on "stop"
// from stdin it ends its campaign (a clean shutdown: Elect's ctx is
// cancelled) and begins a new one; on "close" it closes its Client (a
// pod's shutdown) and campaigns again with a new one on the next line.
// Without the environment variable it does nothing.
func TestElectHelperProcess(t *testing.T) {
	raw := os.Getenv(electHelperEnv)
	if raw == "" {
		return
	}
	var cfg struct {
		Addr, Name string
		Who        int
	}
	require.NoError(t, json.Unmarshal([]byte(raw), &cfg))
	var out sync.Mutex
	report := func(e electEvent) {
		e.Who = cfg.Who
		line, _ := json.Marshal(e)
		out.Lock()
		defer out.Unlock()
		fmt.Printf("ELECT %s\n", line)
	}
	c := redislock.New(newRedisClient(t, cfg.Addr), quiet, redislock.WithTTL(electTrialTTL), redislock.WithFencing())
	lead := func(ctx context.Context) error {
		fence, _ := redislock.FenceFromContext(ctx)
		report(electEvent{Event: "lead", Fence: fence, Mono: monoNow()})
		<-ctx.Done()
		lostMono := monoNow()
		var lost *redislock.LostError
		reason := "ctx"
		if errors.As(context.Cause(ctx), &lost) {
			reason = lost.Reason.String()
		}
		report(electEvent{Event: "lost", Fence: fence, Mono: lostMono, Reason: reason})
		return ctx.Err()
	}
	stdin := bufio.NewScanner(os.Stdin)
	for {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- c.Elect(ctx, cfg.Name, lead) }()
		if !stdin.Scan() { // the parent closed stdin: the end
			cancel()
			<-done
			return
		}
		report(electEvent{Event: "stopping", Mono: monoNow()})
		want, closing := context.Canceled, stdin.Text() == "close"
		if closing {
			// A pod's shutdown by Client.Close: its Elect ends with
			// ErrClosed.
			want = redislock.ErrClosed
			if err := c.Close(context.Background()); err != nil {
				cancel()
				report(electEvent{Event: "err", Err: fmt.Sprint(err)})
				return
			}
		}
		if !closing {
			cancel()
		}
		// After Close, Elect ends by itself (ErrClosed); cancelling
		// first would race it to ctx's error.
		err := <-done
		cancel()
		if !errors.Is(err, want) {
			report(electEvent{Event: "err", Err: fmt.Sprint(err)})
			return
		}
		if closing {
			// The pod is gone; a new one (a new Client) campaigns when
			// the parent says so, once the handover is measured.
			if !stdin.Scan() {
				return
			}
			c = redislock.New(newRedisClient(t, cfg.Addr), quiet, redislock.WithTTL(electTrialTTL), redislock.WithFencing())
		}
	}
}

// electProcess is one campaigner process.
type electProcess struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

func startCampaigners(t *testing.T, addr, name string, n int) ([]*electProcess, <-chan electEvent) {
	t.Helper()
	events := make(chan electEvent, 64)
	var reading sync.WaitGroup
	var procs []*electProcess
	for who := range n {
		raw, err := json.Marshal(map[string]any{"Addr": addr, "Name": name, "Who": who})
		require.NoError(t, err)
		cmd := exec.Command(os.Args[0], "-test.run=^TestElectHelperProcess$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), electHelperEnv+"="+string(raw))
		stdin, err := cmd.StdinPipe()
		require.NoError(t, err)
		stdout, err := cmd.StdoutPipe()
		require.NoError(t, err)
		cmd.Stderr = os.Stderr
		require.NoError(t, cmd.Start())
		procs = append(procs, &electProcess{cmd: cmd, stdin: stdin})
		reading.Go(func() {
			scanner := bufio.NewScanner(stdout)
			for scanner.Scan() {
				if rest, ok := cutPrefix(scanner.Text(), "ELECT "); ok {
					var e electEvent
					if json.Unmarshal([]byte(rest), &e) == nil {
						events <- e
					}
				}
			}
		})
	}
	t.Cleanup(func() {
		for _, p := range procs {
			_ = p.cmd.Process.Signal(syscall.SIGCONT)
			_ = p.stdin.Close()
		}
		for _, p := range procs {
			exited := make(chan struct{})
			go func() { _ = p.cmd.Wait(); close(exited) }()
			select {
			case <-exited:
			case <-time.After(10 * time.Second):
				_ = p.cmd.Process.Kill()
				<-exited
			}
		}
		reading.Wait()
	})
	return procs, events
}

// eventLog reads the processes' events in order; nextEvent takes the
// first of a kind, and keeps the others for later calls.
type eventLog struct {
	events  <-chan electEvent
	pending []electEvent
}

// nextEvent waits for the next event of kind from any process.
func (l *eventLog) nextEvent(t *testing.T, kind string) electEvent {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		if i := slices.IndexFunc(l.pending, func(e electEvent) bool { return e.Event == kind }); i >= 0 {
			e := l.pending[i]
			l.pending = slices.Delete(l.pending, i, i+1)
			return e
		}
		select {
		case e := <-l.events:
			require.NotEqual(t, "err", e.Event, "process %d: %s", e.Who, e.Err)
			l.pending = append(l.pending, e)
		case <-timeout:
			t.Fatalf("no %q event within 30s; pending %+v", kind, l.pending)
		}
	}
}

func TestElectAcrossProcesses(t *testing.T) {
	t.Parallel()
	trials := 2
	if v := os.Getenv(electTrialsEnv); v != "" {
		var err error
		trials, err = strconv.Atoi(v)
		require.NoError(t, err)
	}
	server := redistest.Start(t)
	procs, events := startCampaigners(t, server.Addr(), "leader", 3)
	log := &eventLog{events: events}
	leader := log.nextEvent(t, "lead")
	fences := []int64{leader.Fence}
	var takeovers, pastTTL, resumedToLoss []time.Duration

	// A frozen leader: another takes over once its lease has run out, and
	// its lead ctx ends when it resumes. It is frozen as soon as it
	// reports its term, before its first extension: its lease has a whole
	// TTL left, the longest wait there can be.
	for range trials {
		frozen := procs[leader.Who]
		require.NoError(t, frozen.cmd.Process.Signal(syscall.SIGSTOP))
		stoppedMono := monoNow()
		next := log.nextEvent(t, "lead")
		require.NotEqual(t, leader.Who, next.Who, "the frozen process cannot lead")
		takeovers = append(takeovers, time.Duration(next.Mono-stoppedMono))
		pastTTL = append(pastTTL, time.Duration(next.Mono-stoppedMono)-electTrialTTL)
		resumedMono := monoNow()
		require.NoError(t, frozen.cmd.Process.Signal(syscall.SIGCONT))
		lost := log.nextEvent(t, "lost")
		require.Equal(t, leader.Who, lost.Who, "only the frozen leader lost a term: %+v", lost)
		require.Equal(t, leader.Fence, lost.Fence)
		// Told by its own clock (the safe deadline had passed while it was
		// frozen), not by an extension's reply, which takes a round trip.
		require.Equal(t, redislock.Unreachable.String(), lost.Reason)
		require.GreaterOrEqual(t, lost.Mono, resumedMono, "told while frozen?")
		resumedToLoss = append(resumedToLoss, time.Duration(lost.Mono-resumedMono))
		fences = append(fences, next.Fence)
		leader = next
	}

	// A clean shutdown: the leader's Elect ctx is cancelled ("stop") or
	// its Client closed ("close"); it releases, and the first in the queue
	// leads.
	// A standby is one that campaigns: each trial begins once both
	// others wait in the lock's queue. (A pod closed in the trial before
	// rejoins with a new Client, which dials first: a shutdown in that
	// moment finds nobody waiting, and the next leader is whoever comes
	// first, which measures a cold start, not a handover.)
	admin := newRedisClient(t, server.Addr())
	handovers := map[string][]time.Duration{}
	for _, how := range []string{"stop", "close"} {
		for range trials {
			eventually(t, 10*time.Second, func() bool { return queueLen(t, admin, "leader") == 2 }, "the two standbys are not both waiting")
			_, err := io.WriteString(procs[leader.Who].stdin, how+"\n")
			require.NoError(t, err)
			stopping := log.nextEvent(t, "stopping")
			require.Equal(t, leader.Who, stopping.Who)
			next := log.nextEvent(t, "lead")
			require.NotEqual(t, leader.Who, next.Who)
			handovers[how] = append(handovers[how], time.Duration(next.Mono-stopping.Mono))
			t.Logf("%s trial %d: handover %v, process %d to %d", how, len(handovers[how]), time.Duration(next.Mono-stopping.Mono), leader.Who, next.Who)
			if how == "close" {
				_, err := io.WriteString(procs[leader.Who].stdin, "rejoin\n")
				require.NoError(t, err)
			}
			fences = append(fences, next.Fence)
			leader = next
		}
	}
	for i := 1; i < len(fences); i++ {
		require.Greater(t, fences[i], fences[i-1], "term %d's fence is not above the last: %v", i, fences)
	}
	t.Logf("FIGURE elect: 3 campaigner processes, redis-server on loopback, TTL %v (extend interval TTL/3), %d trials each", electTrialTTL, trials)
	t.Logf("FIGURE | event | p50 | p99 | max |")
	t.Logf("FIGURE |---|---|---|---|")
	t.Logf("FIGURE | leader frozen (SIGSTOP): new leader's lead called, after the SIGSTOP | %s |", quantiles(takeovers))
	t.Logf("FIGURE | the same, minus the TTL (the lease began at the server, a little before the SIGSTOP: this can be below zero) | %s |", quantiles(pastTTL))
	t.Logf("FIGURE | frozen leader resumed (SIGCONT): its lead ctx cancelled, after the SIGCONT | %s |", quantiles(resumedToLoss))
	t.Logf("FIGURE | clean shutdown (Elect's ctx cancelled): new leader's lead called, after the cancel | %s |", quantiles(handovers["stop"]))
	t.Logf("FIGURE | clean shutdown (Client.Close): new leader's lead called, after Close was called | %s |", quantiles(handovers["close"]))
}

// quantiles formats the p50, p99 and max of ds (nearest rank) as table
// cells.
func quantiles(ds []time.Duration) string {
	if len(ds) == 0 {
		return "- | - | -"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := func(p float64) time.Duration {
		i := int(p*float64(len(s))+0.999999) - 1
		return s[max(0, min(i, len(s)-1))]
	}
	round := func(d time.Duration) time.Duration {
		if d > 10*time.Millisecond {
			return d.Round(time.Millisecond)
		}
		return d.Round(10 * time.Microsecond) // a negative d reads as such
	}
	return fmt.Sprintf("%v | %v | %v", round(rank(0.5)), round(rank(0.99)), round(s[len(s)-1]))
}
