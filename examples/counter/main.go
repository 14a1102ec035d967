//go:build unix

// Command counter shows why a fence checked on the write alone does not
// protect a read-modify-write, and the pattern that does. Three pods, each
// a process of its own, add 1 to a counter in SQLite under the lock
// "counter:1", taken with a fencing token:
//
//   - pod-1 reads the counter and is frozen (SIGSTOP) before it writes, past
//     its lease, as a long GC pause or a frozen VM would freeze it;
//   - pod-2 takes the lock and reads; its write waits until pod-1 has been
//     woken (SIGCONT) and has written: the worst moment for pod-1 to wake;
//   - pod-3 adds 1 after both.
//
// With the fence checked on the write only, pod-1's late write is accepted
// (no newer fence has been written yet) and pod-2 overwrites it with a
// value computed before it: an update is lost. Fenced in first (the fence
// written before the read, and every statement after it checking it), the
// late write matches no row and nothing is lost.
//
// The interleaving is arranged by the freeze and by the runner, not left
// to chance: every run ends the same way.
package main

import (
	"database/sql"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	_ "github.com/ncruces/go-sqlite3/driver" // SQLite, compiled to Go: no cgo

	"github.com/redislock/redislock/examples/internal/podproc"
)

// A check is how an increment guards itself with its fence: the statements
// it runs, in order. Named parameters: :fence, :value.
type check struct {
	name    string
	fenceIn string // first, and it must change exactly 1 row; "" for none
	read    string
	write   string // must change exactly 1 row
}

var checks = map[string]check{
	"write": {
		name:  "the fence checked on the write only",
		read:  `SELECT value FROM counter WHERE id = 1`,
		write: `UPDATE counter SET value = :value, fence = :fence WHERE id = 1 AND fence < :fence`,
	},
	"fence-in": {
		name:    "fenced in first",
		fenceIn: `UPDATE counter SET fence = :fence WHERE id = 1 AND fence < :fence`,
		read:    `SELECT value FROM counter WHERE id = 1 AND fence = :fence`,
		write:   `UPDATE counter SET value = :value WHERE id = 1 AND fence = :fence`,
	},
}

const (
	schema = `CREATE TABLE counter (
		id    INTEGER PRIMARY KEY,
		value INTEGER NOT NULL,
		fence INTEGER NOT NULL DEFAULT 0)`
	// Every accepted write is logged in the same transaction: the log
	// counts the increments the database accepted.
	logSchema = `CREATE TABLE increments (pod TEXT NOT NULL, fence INTEGER NOT NULL, value INTEGER NOT NULL)`
)

// Environment of a pod process: the example runs itself once per pod.
const (
	envPod   = "COUNTER_POD"   // the pod's name; set only in pod processes
	envPause = "COUNTER_PAUSE" // where the pod stops between read and write: pauseFreeze, pauseGate or ""
	envCheck = "COUNTER_CHECK" // a key of checks
	envRedis = "COUNTER_REDIS" // redis:// URL
	envDB    = "COUNTER_DB"    // path of the SQLite file
	envTTL   = "COUNTER_TTL"
	envStart = "COUNTER_START" // the run's start, Unix nanoseconds, for the timeline
)

const (
	pauseFreeze = "freeze" // SIGSTOP itself after the read
	pauseGate   = "gate"   // wait after the read until the runner writes a line on stdin

	frozenMark  = "FROZEN"  // in the line a pod prints just before it stops itself
	workingMark = "WORKING" // in the line a gated pod prints before it waits
	lockName    = "counter:1"
)

func main() {
	if name := os.Getenv(envPod); name != "" {
		os.Exit(podMain(name))
	}
	redisURL := flag.String("redis", "", "`URL` of a Redis server, redis://host:port (default: an embedded in-memory Redis)")
	ttl := flag.Duration("ttl", time.Second, "lock `TTL` (the watchdog extends every TTL/3)")
	only := flag.String("check", "", "run one `check` only: write or fence-in (default: both)")
	flag.Parse()
	order := []string{"write", "fence-in"}
	if *only != "" {
		if _, ok := checks[*only]; !ok {
			fmt.Fprintf(os.Stderr, "counter: -check %q: want write or fence-in\n", *only)
			os.Exit(2)
		}
		order = []string{*only}
	}
	exe, err := os.Executable()
	if err == nil {
		_, err = run(os.Stdout, exe, *redisURL, *ttl, order)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "counter:", err)
		os.Exit(1)
	}
}

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
	db, err := openDB(dbPath)
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
	pod, err := podproc.StartPod(tl, exe, envPod, name, env, func(line string) {
		for _, mark := range []string{frozenMark, workingMark} {
			if strings.Contains(line, mark) {
				marks <- mark
			}
		}
	})
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

// openDB opens the SQLite file shared by the example's processes. A writer
// waits for another's transaction (busy_timeout) instead of failing.
func openDB(path string) (*sql.DB, error) {
	return sql.Open("sqlite3", "file:"+path+"?_pragma=busy_timeout(10000)")
}

// named returns the named arguments stmt uses.
func named(stmt string, fence, value int64) []any {
	var args []any
	if strings.Contains(stmt, ":fence") {
		args = append(args, sql.Named("fence", fence))
	}
	if strings.Contains(stmt, ":value") {
		args = append(args, sql.Named("value", value))
	}
	return args
}
