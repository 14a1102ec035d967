// Command semtorture is a multi-process safety checker for redislock's
// semaphores (Client.AcquireSemaphore).
//
// It runs -procs separate OS processes (itself, re-executed) with
// -goroutines goroutines each, all contending for one semaphore of -limit
// slots on the lock server (-redis), with fencing on. Inside a hold a
// goroutine makes -writes writes to a shared resource, each after -work and
// each only after Lock.Valid said the slot is still ours (a write refused
// by Valid is a stale write rejected). It records, with the machine's
// shared monotonic clock, the stretch it certainly held the slot: from
// AcquireSemaphore's return (the slot was taken before) to the moment just
// before the last Valid that said yes.
//
// With -pause, the parent stops (SIGSTOP) a random child every -pause for
// -pause-for (default twice the TTL), then resumes it: its holders' slots
// expire and are taken by others while it is frozen.
//
// It prints the holds, the most holders ever inside at once, violations
// (moments when more than -limit were certainly inside), fences handed out
// twice, and stale writes rejected; it exits 1 on any violation or
// repeated fence.
//
//	semtorture -redis 127.0.0.1:6379 -procs 4 -goroutines 4 -limit 3 -duration 30s -pause 1s
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/redislock/redislock/internal/monoclock"
)

// config is the parent's flags; children get it as JSON in childEnv.
type config struct {
	Redis      string        `json:"redis"`
	Procs      int           `json:"procs"`
	Goroutines int           `json:"goroutines"`
	Limit      int           `json:"limit"`
	Duration   time.Duration `json:"duration"`
	TTL        time.Duration `json:"ttl"`
	Work       time.Duration `json:"work"`
	Writes     int           `json:"writes"`
	Pause      time.Duration `json:"pause"`
	PauseFor   time.Duration `json:"pause_for"`
	Name       string        `json:"name"`
	End        int64         `json:"end"` // children: monoclock.Now() after which no acquisition starts
	// Mode is "semaphore" (the default), "shared" (see shared.go) or
	// "multi" (see multi.go); Names, for -mode multi, how many names the
	// subsets are drawn from.
	Mode  string `json:"mode"`
	Names int    `json:"names"`
}

func main() {
	if runChildFromEnv() {
		return
	}
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "semtorture:", err)
		os.Exit(2)
	}
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "semtorture:", err)
		os.Exit(2)
	}
	s, err := run(cfg, exe)
	if err != nil {
		fmt.Fprintln(os.Stderr, "semtorture:", err)
		os.Exit(2)
	}
	s.print(os.Stdout, cfg)
	if !s.ok() {
		os.Exit(1)
	}
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var cfg config
	fs := flag.NewFlagSet("semtorture", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.Redis, "redis", "127.0.0.1:6379", "the lock server")
	fs.IntVar(&cfg.Procs, "procs", 3, "processes")
	fs.IntVar(&cfg.Goroutines, "goroutines", 3, "goroutines per process")
	fs.IntVar(&cfg.Limit, "limit", 2, "the semaphore's slots")
	fs.DurationVar(&cfg.Duration, "duration", 5*time.Second, "how long acquisitions start")
	fs.DurationVar(&cfg.TTL, "ttl", 500*time.Millisecond, "lease of each slot")
	fs.DurationVar(&cfg.Work, "work", 2*time.Millisecond, "time before each write")
	fs.IntVar(&cfg.Writes, "writes", 3, "writes per hold")
	fs.DurationVar(&cfg.Pause, "pause", 0, "SIGSTOP a random child every this often (0: no fault)")
	fs.DurationVar(&cfg.PauseFor, "pause-for", 0, "how long each pause lasts (0: twice the TTL)")
	fs.StringVar(&cfg.Name, "name", fmt.Sprintf("semtorture-%d", os.Getpid()), "the semaphore's name")
	fs.StringVar(&cfg.Mode, "mode", "semaphore", "what to check: semaphore; shared (exclusive and shared holds of one lock; -limit unused); multi (AcquireMulti of random subsets of -names names)")
	fs.IntVar(&cfg.Names, "names", 5, "-mode multi: the names the subsets are drawn from")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if cfg.PauseFor == 0 {
		cfg.PauseFor = 2 * cfg.TTL
	}
	switch {
	case cfg.Procs < 1 || cfg.Goroutines < 1 || cfg.Writes < 1:
		return cfg, errors.New("-procs, -goroutines and -writes must be at least 1")
	case cfg.Limit < 1:
		return cfg, errors.New("-limit must be at least 1")
	case cfg.Mode != "semaphore" && cfg.Mode != "shared" && cfg.Mode != "multi":
		return cfg, fmt.Errorf("-mode %q: want semaphore, shared or multi", cfg.Mode)
	case cfg.Mode == "multi" && cfg.Names < 1:
		return cfg, errors.New("-names must be at least 1")
	case cfg.Duration <= 0 || cfg.TTL < 10*time.Millisecond || cfg.Work < 0 || cfg.Pause < 0 || cfg.PauseFor < 0:
		return cfg, errors.New("-duration must be positive, -ttl at least 10ms, -work, -pause and -pause-for not negative")
	}
	return cfg, nil
}

// run starts the children, pauses them as asked, and analyses their holds.
func run(cfg config, exe string) (summary, error) {
	cfg.End = monoclock.Now() + cfg.Duration.Nanoseconds()
	env, err := json.Marshal(cfg)
	if err != nil {
		return summary{}, err
	}
	var (
		mu       sync.Mutex
		holds    []hold
		children []*exec.Cmd
		wg       sync.WaitGroup
	)
	for range cfg.Procs {
		cmd := exec.Command(exe)
		cmd.Env = append(os.Environ(), childEnv+"="+string(env))
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			return summary{}, err
		}
		if err := cmd.Start(); err != nil {
			return summary{}, err
		}
		children = append(children, cmd)
		wg.Add(1)
		go func() {
			defer wg.Done()
			lines := bufio.NewScanner(out)
			for lines.Scan() {
				var h hold
				if json.Unmarshal(lines.Bytes(), &h) == nil {
					mu.Lock()
					holds = append(holds, h)
					mu.Unlock()
				}
			}
		}()
	}
	pauses := 0
	if cfg.Pause > 0 {
		pauses = pauseChildren(cfg, children)
	}
	wg.Wait()
	var failed error
	for _, cmd := range children {
		if err := cmd.Wait(); err != nil {
			failed = errors.Join(failed, fmt.Errorf("child %d: %w", cmd.Process.Pid, err))
		}
	}
	var s summary
	switch cfg.Mode {
	case "shared":
		s = analyzeShared(holds)
	case "multi":
		s = analyzeMulti(holds)
	default:
		s = analyze(holds, cfg.Limit)
	}
	s.Pauses = pauses
	return s, failed
}

// pauseChildren stops a random child every cfg.Pause for cfg.PauseFor
// until the run's end.
func pauseChildren(cfg config, children []*exec.Cmd) int {
	pauses := 0
	for monoclock.Now()+(cfg.Pause+cfg.PauseFor).Nanoseconds() < cfg.End {
		time.Sleep(cfg.Pause) // normal running between faults
		child := children[rand.IntN(len(children))]
		if child.Process.Signal(syscall.SIGSTOP) != nil {
			continue
		}
		time.Sleep(cfg.PauseFor) // the fault itself: frozen this long
		_ = child.Process.Signal(syscall.SIGCONT)
		pauses++
	}
	return pauses
}

// hold is one child's record of one hold.
type hold struct {
	Proc  int   `json:"proc"`
	Fence int64 `json:"fence"`
	// From, To: the stretch of the shared monotonic clock during which
	// the slot was certainly held (To <= From: never confirmed).
	From, To int64
	Writes   int `json:"writes"`
	Stale    int `json:"stale"` // writes refused because Valid said no
	Lost     bool
	Shared   bool `json:"shared"` // -mode shared: a shared hold
	// -mode multi: the names held, their fences, and the writes the
	// resource turned away for a fence below one it accepted.
	Names    []string `json:"names,omitempty"`
	Fences   []int64  `json:"fences,omitempty"`
	Rejected int      `json:"rejected,omitempty"`
}

type summary struct {
	Holds, Writes, Stale, Lost, Pauses int
	MaxInside                          int
	Violations                         int // moments with more than limit certainly inside
	RepeatedFences                     int
	Shared                             int // -mode shared: shared holds among Holds
	FenceInversions                    int // -mode shared: see analyzeShared
	Rejected                           int // -mode multi: stale fenced writes the resource turned away
}

func (s summary) ok() bool {
	return s.Violations == 0 && s.RepeatedFences == 0 && s.FenceInversions == 0 && s.Holds > 0
}

// analyze sweeps the holds' stretches in clock order: at every start, the
// number of stretches open must not exceed limit.
func analyze(holds []hold, limit int) summary {
	type edge struct {
		at    int64
		delta int
	}
	var s summary
	var edges []edge
	fences := map[int64]bool{}
	for _, h := range holds {
		s.Holds++
		s.Writes += h.Writes
		s.Stale += h.Stale
		if h.Lost {
			s.Lost++
		}
		if fences[h.Fence] && h.Fence != 0 { // (0: an unfenced hold, see holdOnce)
			s.RepeatedFences++
		}
		fences[h.Fence] = true
		if h.To > h.From {
			edges = append(edges, edge{h.From, 1}, edge{h.To, -1})
		}
	}
	// Ends before starts at one instant: touching stretches do not overlap.
	sort.Slice(edges, func(i, j int) bool {
		return edges[i].at < edges[j].at || edges[i].at == edges[j].at && edges[i].delta < edges[j].delta
	})
	inside := 0
	for _, e := range edges {
		inside += e.delta
		s.MaxInside = max(s.MaxInside, inside)
		if e.delta > 0 && inside > limit {
			s.Violations++
		}
	}
	return s
}

func (s summary) print(w io.Writer, cfg config) {
	if cfg.Mode == "multi" {
		s.printMulti(w, cfg)
		return
	}
	verdict := "OK"
	if !s.ok() {
		verdict = "FAILED"
	}
	if cfg.Mode == "shared" {
		s.printShared(w, cfg, verdict)
		return
	}
	fmt.Fprintf(w, "semtorture: %d procs x %d goroutines, limit %d, %v, TTL %v, %d pauses of %v (%s)\n",
		cfg.Procs, cfg.Goroutines, cfg.Limit, cfg.Duration, cfg.TTL, s.Pauses, cfg.PauseFor, monoclock.Name)
	fmt.Fprintf(w, "holds %d, writes %d, most inside at once %d, violations %d, repeated fences %d, stale writes rejected %d, slots lost %d: %s\n",
		s.Holds, s.Writes, s.MaxInside, s.Violations, s.RepeatedFences, s.Stale, s.Lost, verdict)
}
