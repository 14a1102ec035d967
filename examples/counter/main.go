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
	"os"
	"strings"
	"time"
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
