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

// result is what run observed, for tests.
type result struct {
	frozenPod         string
	frozenAt, wokenAt time.Duration // since the start, on the runner's clock
	lines             []string      // every line printed, in order
}

// run plays the scenario, starting each pod as a process of exe (which must
// call podMain when SETTLEMENT_POD is set), and prints the timeline on out.
func run(out io.Writer, exe, redisAddr string, ttl time.Duration, date string) (*result, error) {
	res := &result{}
	tl := podproc.NewTimeline(out, time.Now())

	if redisAddr == "" {
		addr, stop, err := podproc.EmbeddedRedis()
		if err != nil {
			return nil, err
		}
		defer stop()
		redisAddr = addr
		tl.Say("setup", "embedded Redis at %s (-redis host:port for a real one)", redisAddr)
	} else {
		opts, err := redisOptions(redisAddr)
		if err != nil {
			return nil, err
		}
		if err := checkRedis(opts); err != nil {
			return nil, err
		}
		tl.Say("setup", "Redis at %s", opts.Addr) // not the URL: it may hold a password
	}

	dir, err := os.MkdirTemp("", "settlement")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	dbPath := dir + "/settlement.db"
	db, err := openDB(dbPath)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	if _, err := db.Exec(schema); err != nil {
		return nil, err
	}
	if _, err := db.Exec(`INSERT INTO settlement (settle_date, status) VALUES (?, 'pending')`, date); err != nil {
		return nil, err
	}
	tl.Say("setup", "SQLite table settlement: %s pending, fence 0; lock TTL %v, extended every %v", date, ttl, (ttl / 3).Round(time.Millisecond))
	tl.Say("setup", "first, fence in: %s", fenceInSQL)
	tl.Say("setup", "then, settle:    %s", settleSQL)

	tl.Say("cron", "00:05 - the scheduler fires on all three pods (three processes)")
	pods := make(map[string]*podproc.Pod)
	defer func() { // on an early return, leave no pod behind, stopped or not
		for _, pod := range pods {
			pod.Kill()
		}
	}()
	frozen := make(chan string, 1)
	for i := 1; i <= 3; i++ {
		name := fmt.Sprintf("pod-%d", i)
		pod, err := podproc.StartPod(tl, exe, envPod, name, []string{
			envRedis + "=" + redisAddr, envDB + "=" + dbPath,
			envTTL + "=" + ttl.String(), envDate + "=" + date,
			fmt.Sprintf("%s=%d", envStart, tl.Start().UnixNano())}, func(line string) {
			if strings.Contains(line, frozenMark) {
				res.frozenAt = time.Since(tl.Start())
				frozen <- name
			}
		})
		if err != nil {
			return nil, err
		}
		pods[name] = pod
	}

	// The worst case for the frozen pod: it sleeps through the others'
	// whole turn, and wakes only when they are done.
	var frozenPod string
	select {
	case frozenPod = <-frozen:
	case <-time.After(10 * ttl):
		return nil, fmt.Errorf("no pod froze within %v", 10*ttl)
	}
	res.frozenPod = frozenPod
	for name := range pods {
		if name != frozenPod {
			if err := pods[name].Wait(); err != nil {
				return nil, err
			}
		}
	}
	res.wokenAt = time.Since(tl.Start())
	tl.Say("cluster", "the other pods are done; SIGCONT to %s, frozen for %.2fs", frozenPod, (res.wokenAt - res.frozenAt).Seconds())
	if err := pods[frozenPod].Continue(); err != nil {
		return nil, err
	}
	if err := pods[frozenPod].Wait(); err != nil {
		return nil, err
	}

	var status, by string
	var fence int64
	if err := db.QueryRow(`SELECT status, settled_by, fence FROM settlement WHERE settle_date = ?`, date).Scan(&status, &by, &fence); err != nil {
		return nil, err
	}
	tl.Say("result", "settlement %s: status=%s by %s with fence %d; the frozen pod's stale write was rejected", date, status, by, fence)
	res.lines = tl.Lines()
	return res, nil
}

// openDB opens the SQLite file shared by the demo's processes. A writer
// waits for another's transaction (busy_timeout) instead of failing.
func openDB(path string) (*sql.DB, error) {
	return sql.Open("sqlite3", "file:"+path+"?_pragma=busy_timeout(10000)")
}
