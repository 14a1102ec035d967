//go:build unix

// Command settlement runs the daily-settlement scenario from the redislock
// README with three pods, each a process of its own. The scheduler fires on
// all three at once: one takes the lock "settlement:<date>" with fence 1,
// the other two skip and retry. The winner is then frozen for real
// (SIGSTOP, as a long GC pause or a frozen VM would freeze it: every thread,
// its watchdog included) just before it writes. Its lease expires; another
// pod takes over with fence 2 and settles; the third finds the work done.
// Only then is the frozen pod woken (SIGCONT): it writes with fence 1, and
// the SQLite table rejects it: each pod first fences the row in (writes its
// fence, if the day is not done and no newer fence is there), and its final
// write needs the row to still carry its fence.
//
// By default it runs on an embedded in-memory Redis; -redis uses a real
// server, given as redislock's CLI takes it (redis://host:port, rediss://
// for TLS) or as host:port. The database is a real SQLite file in a temporary directory,
// shared by the three processes.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"
)

// The schema and the two writes every pod makes: the WHERE clauses are the
// resource protecting itself. fenceInSQL claims the day for a fence, once:
// not when it is done (a pod that comes after the settlement does nothing),
// nor when a newer fence claimed it. settleSQL marks it done only while the
// row still carries the pod's fence, so a holder that lost the lock (a
// newer one fenced the row in) writes nothing, even if it had read the row
// before the newer one came.
const (
	schema = `CREATE TABLE settlement (
		settle_date TEXT PRIMARY KEY,
		status      TEXT NOT NULL,
		settled_by  TEXT,
		fence       INTEGER NOT NULL DEFAULT 0)`
	fenceInSQL = `UPDATE settlement SET fence = ? WHERE settle_date = ? AND status <> 'done' AND fence < ?`
	settleSQL  = `UPDATE settlement SET status = 'done', settled_by = ? WHERE settle_date = ? AND fence = ?`
)

// Environment of a pod process: the demo runs itself once per pod.
const (
	envPod   = "SETTLEMENT_POD"   // the pod's name; set only in pod processes
	envRedis = "SETTLEMENT_REDIS" // -redis: host:port or a redis:// URL
	envDB    = "SETTLEMENT_DB"    // path of the SQLite file
	envTTL   = "SETTLEMENT_TTL"
	envDate  = "SETTLEMENT_DATE"
	envStart = "SETTLEMENT_START" // the demo's start, Unix nanoseconds, for the timeline
)

func main() {
	if name := os.Getenv(envPod); name != "" {
		os.Exit(podMain(name))
	}
	redisAddr := flag.String("redis", "", "a Redis server: `redis://host:port` (rediss:// for TLS) or host:port (default: an embedded in-memory Redis)")
	ttl := flag.Duration("ttl", 2*time.Second, "lock `TTL` (the watchdog extends every TTL/3)")
	date := flag.String("date", time.Now().Format("2006-01-02"), "the settlement `date`")
	flag.Parse()
	exe, err := os.Executable()
	if err == nil {
		_, err = run(os.Stdout, exe, *redisAddr, *ttl, *date)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "settlement:", err)
		os.Exit(1)
	}
}
