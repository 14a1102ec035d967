//go:build unix

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/redislock/redislock"
)

const lsUsage = `Usage: redislock ls [flags] [PREFIX]

Lists every lock held under --prefix whose name starts with PREFIX (all
without it; taken literally, not as a pattern), one line per lock, by name:
every kind (a lock, shared holders, a semaphore), on every primary of a
Redis Cluster. A name with nothing but a fence counter or waiters is left
out. It reads the names with SCAN, never KEYS (the library's Client.List,
which inspects them in batches and never shows a token). Exits 0, 64 on a
usage error, 69 when Redis fails (what could be read is printed).

Columns: NAME, KIND (lock, shared, semaphore), HOLDERS (a semaphore's as
2/3: of its limit), LEASE (the latest lease left; "none" without expiry),
FENCE ("-" when none), WAITERS, LONGEST WAIT (how long the first in line
has waited; "-" when nobody waits, or when it is not known).

With --json, one JSON array of the library's Info objects (durations in
nanoseconds), [] when none. With --watch, the list is drawn again every
second until interrupted (SIGINT or SIGTERM; exit 0); with --json, one
array per line.

Flags:
`

func cmdLs(args []string, stdout, stderr io.Writer) int {
	var (
		conn    redisFlags
		asJSON  bool
		watch   bool
		timeout time.Duration
	)
	flags := newFlags("ls", &conn)
	flags.BoolVar(&asJSON, "json", false, "print a JSON array of the locks instead of text")
	flags.BoolVar(&watch, "watch", false, "draw the list again every second until interrupted")
	durationVar(flags, &timeout, "timeout", 10*time.Second, "give up on Redis after this `DURATION`, for each listing")
	names, exit, ok := parseCommand(flags, "ls", lsUsage, args, stdout, stderr)
	if !ok {
		return exit
	}
	if len(names) > 1 {
		return usageError(stderr, "ls: want at most one PREFIX, got %d", len(names))
	}
	if timeout <= 0 {
		return usageError(stderr, "ls: --timeout %v must be positive", timeout)
	}
	prefix := strings.Join(names, "")
	if strings.HasPrefix(prefix, "}") {
		return usageError(stderr, "ls: no lock name starts with '}'")
	}
	rdb, err := conn.connect()
	if err != nil {
		return usageError(stderr, "ls: %v", err)
	}
	defer rdb.Close()
	locker := redislock.New(rdb, redislock.WithLogger(newLogger(stderr, false)), redislock.WithKeyPrefix(conn.prefix))
	draw := func(ctx context.Context) int {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		return printLocks(ctx, locker, prefix, asJSON, stdout, stderr)
	}
	if !watch {
		return draw(context.Background())
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	home := "\x1b[H\x1b[2J" // cursor home, clear screen
	if asJSON {
		home = ""
	}
	redraw(ctx, time.Second, func() {
		fmt.Fprint(stdout, home)
		draw(ctx)
	})
	return 0
}

// redraw calls draw at once and then every interval, until ctx ends.
func redraw(ctx context.Context, interval time.Duration, draw func()) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		draw()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// printLocks lists the locks once, by name, and returns the exit code: 0,
// or exitUnavailable when Redis failed (each error on stderr; what was
// read is printed all the same). An interrupted --watch prints nothing more.
func printLocks(ctx context.Context, locker *redislock.Client, prefix string, asJSON bool, stdout, stderr io.Writer) int {
	infos := []redislock.Info{} // [] in JSON, not null
	code := 0
	for info, err := range locker.List(ctx, prefix) {
		if err != nil {
			if ctx.Err() != nil && context.Cause(ctx) == context.Canceled {
				return 0 // interrupted
			}
			fmt.Fprintf(stderr, "redislock: ls: %s\n", cause(err))
			code = exitUnavailable
			continue
		}
		infos = append(infos, info)
	}
	slices.SortFunc(infos, func(a, b redislock.Info) int { return strings.Compare(a.Name, b.Name) })
	if asJSON {
		out, err := json.Marshal(infos)
		if err != nil { // an Info holds strings, numbers and errors only
			fmt.Fprintf(stderr, "redislock: ls: %v\n", err)
			return exitUnavailable
		}
		fmt.Fprintf(stdout, "%s\n", out)
		return code
	}
	w := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "NAME\tKIND\tHOLDERS\tLEASE\tFENCE\tWAITERS\tLONGEST WAIT")
	for _, info := range infos {
		fmt.Fprintln(w, lsLine(info))
	}
	_ = w.Flush()
	return code
}

// lsLine is one lock's line of ls, its columns tab-separated.
func lsLine(info redislock.Info) string {
	holders := strconv.Itoa(info.Count)
	if info.Limit > 0 {
		holders += "/" + strconv.Itoa(info.Limit)
	}
	lease, fence, waited := "none", "-", "-"
	if info.TTL >= 0 {
		lease = info.TTL.Round(time.Millisecond).String()
	}
	if info.Fence != 0 {
		fence = strconv.FormatInt(info.Fence, 10)
	}
	if len(info.Queue) > 0 {
		waited = info.Queue[0].Waited.Round(time.Millisecond).String()
	}
	return strings.Join([]string{info.Name, info.Kind, holders, lease, fence, strconv.Itoa(info.Waiters), waited}, "\t")
}
