// Command locktorture is a multi-process safety checker for redislock.
//
// It runs -procs separate OS processes (itself, re-executed) with
// -goroutines goroutines each, all contending for -names lock names on the
// lock server (-redis) with fencing on. Inside each critical section a
// goroutine reads a counter from the protected resource (a hash on a second
// redis-server, -resource), works for -work, and writes counter+1 with a
// fenced Lua script that accepts the write only if its fence is above the
// highest one the resource has accepted (the README's WHERE fence < :fence)
// and logs every attempt. Every hold is recorded with stamps of the
// machine's shared monotonic clock.
//
// With -pause, the parent stops (SIGSTOP) a random child that holds a lock,
// every -pause, for -pause-for (default twice the TTL), then resumes it.
//
// With -unfenced, the locks are taken without fences and nothing is
// written: the holders' overlaps are the whole check (a waiter takes a lock
// handed over to it without claiming it only when it is not fenced).
//
// It prints acquisitions, overlaps between holders of one name, stale
// writes attempted, rejected and accepted, lost updates and lost-lock
// signals by reason, and exits 1 when a stale write was accepted (or, with
// no fault injected, when holders overlapped or an update was lost).
//
//	locktorture -redis 127.0.0.1:6379 -resource 127.0.0.1:6380 -procs 3 -goroutines 2 -duration 10s -pause 1s
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redislock/redislock/internal/monoclock"
)

// config is the parent's flags.
type config struct {
	Redis      string
	Resource   string
	Procs      int
	Goroutines int
	Names      int
	Duration   time.Duration
	TTL        time.Duration
	Work       time.Duration
	Pause      time.Duration // 0: no fault
	PauseFor   time.Duration // 0: 2*TTL
	JSON       string        // "" none, "-" stdout, else a file
	Unfenced   bool          // locks without fences, no writes: overlaps are the check
}

func main() {
	if runChildFromEnv() {
		return
	}
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "locktorture:", err)
		os.Exit(2)
	}
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "locktorture:", err)
		os.Exit(2)
	}
	summary, err := run(cfg, exe)
	if err != nil {
		fmt.Fprintln(os.Stderr, "locktorture:", err)
		os.Exit(2)
	}
	summary.printTable(os.Stdout)
	if err := writeJSON(cfg.JSON, summary); err != nil {
		fmt.Fprintln(os.Stderr, "locktorture:", err)
		os.Exit(2)
	}
	if len(summary.Failures) > 0 {
		os.Exit(1)
	}
}

func parseFlags(args []string, errOut io.Writer) (config, error) {
	var cfg config
	fs := flag.NewFlagSet("locktorture", flag.ContinueOnError)
	fs.SetOutput(errOut)
	fs.StringVar(&cfg.Redis, "redis", "127.0.0.1:6379", "lock server address")
	fs.StringVar(&cfg.Resource, "resource", "", "protected resource's redis-server address (required; use another server than -redis)")
	fs.IntVar(&cfg.Procs, "procs", 3, "OS processes")
	fs.IntVar(&cfg.Goroutines, "goroutines", 2, "goroutines per process")
	fs.IntVar(&cfg.Names, "names", 2, "lock names contended for")
	fs.DurationVar(&cfg.Duration, "duration", 5*time.Second, "how long acquisitions start (use minutes for a soak)")
	fs.DurationVar(&cfg.TTL, "ttl", time.Second, "lock TTL")
	fs.DurationVar(&cfg.Work, "work", 2*time.Millisecond, "time between the read and the write in a critical section")
	fs.DurationVar(&cfg.Pause, "pause", 0, "SIGSTOP a random holder process every this often (0: no fault)")
	fs.DurationVar(&cfg.PauseFor, "pause-for", 0, "how long each pause lasts (0: twice the TTL)")
	fs.StringVar(&cfg.JSON, "json", "", `also write the summary as JSON to this file ("-": stdout)`)
	fs.BoolVar(&cfg.Unfenced, "unfenced", false, "take the locks without fences (a waiter then takes a lock handed over to it without claiming it) and write nothing: the overlaps are the check; not with -pause")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return cfg, cfg.validate()
}

func (cfg *config) validate() error {
	switch {
	case cfg.Redis == "":
		return errors.New("-redis is required")
	case cfg.Resource == "":
		return errors.New("-resource is required: the protected resource's redis-server (a different one from -redis, so a lock-server fault does not also stop the resource)")
	case cfg.Procs < 1 || cfg.Goroutines < 1 || cfg.Names < 1:
		return errors.New("-procs, -goroutines and -names must be at least 1")
	case cfg.Duration <= 0:
		return errors.New("-duration must be positive")
	case cfg.TTL < 10*time.Millisecond:
		return errors.New("-ttl must be at least 10ms")
	case cfg.Work < 0 || cfg.Pause < 0 || cfg.PauseFor < 0:
		return errors.New("-work, -pause and -pause-for must not be negative")
	case cfg.Unfenced && cfg.Pause > 0:
		return errors.New("-unfenced checks that holders never overlap, which a paused holder does by design (fences are for that): use it without -pause")
	}
	if cfg.PauseFor == 0 {
		cfg.PauseFor = 2 * cfg.TTL
	}
	return nil
}

func writeJSON(dest string, s Summary) error {
	if dest == "" {
		return nil
	}
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	data = append(data, '\n')
	if dest == "-" {
		_, err = os.Stdout.Write(data)
		return err
	}
	return os.WriteFile(dest, data, 0o644)
}

// child is one running child process and what the parent knows of it.
type child struct {
	proc    int
	cmd     *exec.Cmd
	holding int // holds started minus holds ended
}

// collector gathers the children's records.
type collector struct {
	mu          sync.Mutex
	children    []*child
	holds       []hold
	notAcquired int
	acquireErrs int
}

func (c *collector) add(ch *child, e event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch e.Kind {
	case "start":
		ch.holding++
	case "hold":
		ch.holding--
		c.holds = append(c.holds, *e.Hold)
	case "miss":
		if e.NotAcquired {
			c.notAcquired++
		} else {
			c.acquireErrs++
		}
	}
}

// holder returns a random child that holds a lock, or nil.
func (c *collector) holder(rng *rand.Rand) *child {
	c.mu.Lock()
	defer c.mu.Unlock()
	var holding []*child
	for _, ch := range c.children {
		if ch.holding > 0 {
			holding = append(holding, ch)
		}
	}
	if len(holding) == 0 {
		return nil
	}
	return holding[rng.IntN(len(holding))]
}

// run starts cfg.Procs children from exe, injects the faults, waits for
// the children, and checks what they recorded.
func run(cfg config, exe string) (Summary, error) {
	if err := cfg.validate(); err != nil {
		return Summary{}, err
	}
	ctx := context.Background()
	resource := redis.NewClient(&redis.Options{Addr: cfg.Resource})
	defer resource.Close()
	for _, addr := range []string{cfg.Redis, cfg.Resource} {
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		err := rdb.Ping(ctx).Err()
		_ = rdb.Close()
		if err != nil {
			return Summary{}, fmt.Errorf("redis at %s: %w", addr, err)
		}
	}

	runID := "torture-" + strconv.Itoa(os.Getpid()) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	names := make([]string, cfg.Names)
	for i := range names {
		names[i] = runID + ":" + strconv.Itoa(i)
	}
	end := monoclock.Now() + int64(cfg.Duration)

	col := &collector{}
	var readers sync.WaitGroup
	for proc := range cfg.Procs {
		raw, err := json.Marshal(childConfig{Proc: proc, Redis: cfg.Redis, Resource: cfg.Resource,
			Goroutines: cfg.Goroutines, Names: names, End: end, TTL: cfg.TTL, Work: cfg.Work, Unfenced: cfg.Unfenced})
		if err != nil {
			return Summary{}, err
		}
		cmd := exec.Command(exe)
		cmd.Env = append(os.Environ(), childEnv+"="+string(raw))
		cmd.Stderr = os.Stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return Summary{}, err
		}
		if err := cmd.Start(); err != nil {
			killAll(col)
			return Summary{}, fmt.Errorf("starting child %d: %w", proc, err)
		}
		ch := &child{proc: proc, cmd: cmd}
		col.mu.Lock()
		col.children = append(col.children, ch)
		col.mu.Unlock()
		readers.Go(func() {
			scanner := bufio.NewScanner(stdout)
			scanner.Buffer(make([]byte, 64*1024), 1024*1024)
			for scanner.Scan() {
				var e event
				if json.Unmarshal(scanner.Bytes(), &e) == nil {
					col.add(ch, e)
				}
			}
		})
	}

	var pauses []pause
	if cfg.Pause > 0 {
		pauses = injectPauses(cfg, col, end)
	}

	// Children stop starting holds at end; give the last ones (and any
	// waiting acquisition) time to finish before killing them.
	killTimer := time.AfterFunc(cfg.Duration+cfg.PauseFor+4*cfg.TTL+30*time.Second, func() { killAll(col) })
	defer killTimer.Stop()
	readers.Wait()
	var failed []error
	for _, ch := range col.children {
		if err := ch.cmd.Wait(); err != nil {
			failed = append(failed, fmt.Errorf("child %d: %w", ch.proc, err))
		}
	}
	if len(failed) > 0 {
		return Summary{}, errors.Join(failed...)
	}

	state := map[string]resourceState{}
	for _, name := range names {
		value, err := resource.HGet(ctx, resourceKey(name), "value").Int64()
		if err != nil && !errors.Is(err, redis.Nil) {
			return Summary{}, fmt.Errorf("reading the resource: %w", err)
		}
		log, err := resource.LRange(ctx, resourceLogKey(name), 0, -1).Result()
		if err != nil {
			return Summary{}, fmt.Errorf("reading the resource's log: %w", err)
		}
		st := resourceState{Value: value}
		for _, entry := range log {
			f, err := strconv.ParseInt(entry, 10, 64)
			if err != nil {
				return Summary{}, fmt.Errorf("resource log entry %q: %w", entry, err)
			}
			st.Log = append(st.Log, f)
		}
		state[name] = st
	}

	s := analyze(col.holds, pauses, state, col.notAcquired, col.acquireErrs)
	s.Procs, s.Goroutines, s.Names, s.TTL, s.Duration = cfg.Procs, cfg.Goroutines, cfg.Names, cfg.TTL, cfg.Duration
	s.verdict()
	return s, nil
}

// injectPauses stops a random holder every cfg.Pause for cfg.PauseFor
// until end, and returns what it did. Every child it stopped is resumed.
func injectPauses(cfg config, col *collector, end int64) []pause {
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0))
	var pauses []pause
	ticker := time.NewTicker(cfg.Pause)
	defer ticker.Stop()
	for range ticker.C {
		if monoclock.Now()+int64(cfg.PauseFor) >= end {
			return pauses
		}
		ch := col.holder(rng)
		if ch == nil {
			continue
		}
		p := pause{Proc: ch.proc, Stopped: monoclock.Now()}
		if err := ch.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			continue // it exited
		}
		time.Sleep(cfg.PauseFor) // the fault itself: the process is frozen this long
		p.Resumed = monoclock.Now()
		_ = ch.cmd.Process.Signal(syscall.SIGCONT)
		pauses = append(pauses, p)
		ticker.Reset(cfg.Pause) // a full period of normal running before the next pause
	}
	return pauses
}

func killAll(col *collector) {
	col.mu.Lock()
	defer col.mu.Unlock()
	for _, ch := range col.children {
		_ = ch.cmd.Process.Signal(syscall.SIGCONT)
		_ = ch.cmd.Process.Kill()
	}
}
