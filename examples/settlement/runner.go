//go:build unix

package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/redislock/redislock/examples/internal/podproc"
)

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
	db, err := podproc.OpenDB(dbPath)
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
			fmt.Sprintf("%s=%d", envStart, tl.Start().UnixNano())}, []string{frozenMark}, func(string) {
			res.frozenAt = time.Since(tl.Start())
			frozen <- name
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
