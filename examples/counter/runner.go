//go:build unix

package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/redislock/redislock/examples/internal/podproc"
)

// outcome is what one run of the scenario left in the database.
type outcome struct {
	check    string
	accepted int   // increments the database accepted
	value    int64 // the counter at the end
	lines    []string
}

// lost is how many accepted increments the counter does not show.
func (o outcome) lost() int { return o.accepted - int(o.value) }

// run plays the scenario once per check in order, starting each pod as a
// process of exe (which must call podMain when COUNTER_POD is set), and
// prints the timeline on out.
func run(out io.Writer, exe, redisURL string, ttl time.Duration, order []string) ([]outcome, error) {
	tl := podproc.NewTimeline(out, time.Now())
	if redisURL == "" {
		addr, stop, err := podproc.EmbeddedRedis()
		if err != nil {
			return nil, err
		}
		defer stop()
		redisURL = "redis://" + addr
		tl.Say("setup", "embedded Redis at %s (-redis redis://host:port for a real one); lock TTL %v", addr, ttl)
	} else {
		tl.Say("setup", "Redis at %s; lock TTL %v", redisURL, ttl)
	}
	dir, err := os.MkdirTemp("", "counter")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)

	var outcomes []outcome
	for _, name := range order {
		first := len(tl.Lines())
		o, err := scenario(tl, exe, redisURL, dir+"/"+name+".db", ttl, name)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		o.lines = tl.Lines()[first:]
		outcomes = append(outcomes, o)
	}
	return outcomes, nil
}

// scenario runs the three pods once with one check, on a fresh database.
func scenario(tl *podproc.Timeline, exe, redisURL, dbPath string, ttl time.Duration, name string) (outcome, error) {
	c := checks[name]
	o := outcome{check: name}
	db, err := podproc.OpenDB(dbPath)
	if err != nil {
		return o, err
	}
	defer db.Close()
	for _, stmt := range []string{schema, logSchema, `INSERT INTO counter (id, value) VALUES (1, 0)`} {
		if _, err := db.Exec(stmt); err != nil {
			return o, err
		}
	}
	tl.Say("setup", "--- %s: SQLite table counter, value 0, fence 0", c.name)
	for _, stmt := range []struct{ what, sql string }{{"fence in", c.fenceIn}, {"read", c.read}, {"write", c.write}} {
		if stmt.sql != "" {
			tl.Say("setup", "%-9s %s", stmt.what+":", stmt.sql)
		}
	}

	start := func(pod, pause string) (*podProc, error) {
		return startPod(tl, exe, pod,
			envPause+"="+pause, envCheck+"="+name, envRedis+"="+redisURL, envDB+"="+dbPath,
			envTTL+"="+ttl.String(), fmt.Sprintf("%s=%d", envStart, tl.Start().UnixNano()))
	}
	// pod-1 reads and freezes before it writes.
	frozen, err := start("pod-1", pauseFreeze)
	if err != nil {
		return o, err
	}
	defer frozen.Kill()
	if err := frozen.waitFor(frozenMark, 10*ttl); err != nil {
		return o, err
	}
	// pod-2 takes the lock once pod-1's lease has run out, and reads.
	slow, err := start("pod-2", pauseGate)
	if err != nil {
		return o, err
	}
	defer slow.Kill()
	if err := slow.waitFor(workingMark, 10*ttl); err != nil {
		return o, err
	}
	// pod-1 wakes between pod-2's read and its write.
	tl.Say("runner", "SIGCONT to pod-1, frozen since before pod-2 took the lock")
	if err := frozen.Continue(); err != nil {
		return o, err
	}
	if err := frozen.Wait(); err != nil {
		return o, err
	}
	tl.Say("runner", "pod-1 is done; pod-2's work ends: it writes")
	if _, err := io.WriteString(slow.Stdin, "go\n"); err != nil {
		return o, err
	}
	if err := slow.Wait(); err != nil {
		return o, err
	}
	// pod-3 adds 1 after both.
	last, err := start("pod-3", "")
	if err != nil {
		return o, err
	}
	defer last.Kill()
	if err := last.Wait(); err != nil {
		return o, err
	}

	if err := db.QueryRow(`SELECT value FROM counter WHERE id = 1`).Scan(&o.value); err != nil {
		return o, err
	}
	if err := db.QueryRow(`SELECT count(*) FROM increments`).Scan(&o.accepted); err != nil {
		return o, err
	}
	verdict := "no update lost"
	if o.lost() > 0 {
		verdict = fmt.Sprintf("%d update LOST", o.lost())
	}
	tl.Say("result", "%s: %d increments accepted, counter = %d: %s", c.name, o.accepted, o.value, verdict)
	return o, nil
}

// podProc is a running pod process and the marks it printed, in order.
type podProc struct {
	*podproc.Pod
	marks chan string
}

// startPod starts exe as the pod called name, with env added to the
// runner's environment, and relays its output to tl.
func startPod(tl *podproc.Timeline, exe, name string, env ...string) (*podProc, error) {
	marks := make(chan string, 2)
	pod, err := podproc.StartPod(tl, exe, envPod, name, env, []string{frozenMark, workingMark}, func(mark string) { marks <- mark })
	if err != nil {
		return nil, err
	}
	return &podProc{Pod: pod, marks: marks}, nil
}

// waitFor waits until the pod prints mark, or fails after timeout.
func (p *podProc) waitFor(mark string, timeout time.Duration) error {
	select {
	case got := <-p.marks:
		if got != mark {
			return fmt.Errorf("%s printed %s, want %s", p.Name, got, mark)
		}
		return nil
	case <-p.Relayed():
		return fmt.Errorf("%s ended before it printed %s", p.Name, mark)
	case <-time.After(timeout):
		return fmt.Errorf("%s did not print %s within %v", p.Name, mark, timeout)
	}
}
