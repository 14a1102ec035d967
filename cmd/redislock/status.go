//go:build unix

package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/redislock/redislock"
)

const statusUsage = `Usage: redislock status [flags] NAME

Shows whether the lock NAME is held, its remaining TTL, the holder's
metadata (what "redislock run" sets: host, pid and command), the fence
counter (the last fencing token handed out; "none" before the first fenced
acquisition) and the waiters queued for it. It reads them in one round trip
(the library's Client.Inspect, a script that only reads) and never shows the
holder's token. Exits 0 whether or not the lock is held, 64 on a usage
error, 69 when Redis fails or a key holds a value of another type.

Text output, one "field: value" per line:
  name:     NAME
  key:      lock:{NAME}
  held:     yes | no
  ttl:      1.5s | - (not held) | none (the key has no expiry)
  holder:   host=web-1 pid=4242 cmd=report | - (not held) | none (no metadata)
  fence:    12 | none
  waiters:  0
With --json, one object: {"name","key","held","ttl_ms","metadata","fence",
"waiters"}, where ttl_ms is null when not held and -1 when the key has no
expiry, metadata is null when not held, and fence is null when there is no
counter. When Redis fails, --json prints {"name","key","error"} on stdout
(and the error on stderr) and exits 69.

Flags:
`

// lockStatus is what status reports; its JSON form is part of the CLI's
// stable output.
type lockStatus struct {
	Name string `json:"name"`
	Key  string `json:"key"`
	Held bool   `json:"held"`
	// TTLMillis is the remaining lease in ms, nil when not held, -1 when the
	// key has no expiry.
	TTLMillis *int64 `json:"ttl_ms"`
	// Metadata is the holder's metadata, nil when not held, "" when the
	// holder set none.
	Metadata *string `json:"metadata"`
	// Fence is the fence counter, nil when it does not exist.
	Fence *int64 `json:"fence"`
	// Waiters counts the waiters queued on the server.
	Waiters int `json:"waiters"`
}

// statusError is status --json's output when Redis fails.
type statusError struct {
	Name  string `json:"name"`
	Key   string `json:"key"`
	Error string `json:"error"`
}

func cmdStatus(args []string, stdout, stderr io.Writer) int {
	var (
		conn    redisFlags
		asJSON  bool
		timeout time.Duration
	)
	flags := flag.NewFlagSet("redislock status", flag.ContinueOnError)
	flags.SetOutput(io.Discard)
	conn.register(flags)
	flags.BoolVar(&asJSON, "json", false, "print one JSON object instead of text")
	durationVar(flags, &timeout, "timeout", 5*time.Second, "give up on Redis after this `DURATION`")
	names, rest, _, err := parseArgs(flags, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, statusUsage+flagDefaults(flags))
			return 0
		}
		return usageError(stderr, "status: %s", doubleDash(err))
	}
	// After "--", a NAME that starts with a dash.
	if names = append(names, rest...); len(names) != 1 {
		return usageError(stderr, "status: want exactly one NAME, got %d", len(names))
	}
	if timeout <= 0 {
		return usageError(stderr, "status: --timeout %v must be positive", timeout)
	}
	name := names[0]
	key, err := lockKey(conn.prefix, name)
	if err != nil {
		return usageError(stderr, "status: %v", err)
	}
	rdb, err := conn.connect()
	if err != nil {
		return usageError(stderr, "status: %v", err)
	}
	logger := newLogger(stderr, false)
	defer rdb.Close()

	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	locker := redislock.New(rdb, redislock.WithLogger(logger), redislock.WithKeyPrefix(conn.prefix))
	info, err := locker.Inspect(ctx, name)
	if err != nil {
		msg := libraryCause(err, "inspect", name)
		fmt.Fprintf(stderr, "redislock: status of %q: %s\n", name, msg)
		if asJSON {
			out, _ := json.Marshal(statusError{Name: name, Key: key, Error: msg})
			fmt.Fprintf(stdout, "%s\n", out)
		}
		return exitUnavailable
	}
	st := statusOf(info)
	if asJSON {
		out, _ := json.Marshal(st) // plain strings, bools and integers: cannot fail
		fmt.Fprintf(stdout, "%s\n", out)
		return 0
	}
	fmt.Fprint(stdout, st.text())
	return 0
}

// libraryCause is line(err) without the library's "redislock: op "name": "
// in front, which the command says in its own words.
func libraryCause(err error, op, name string) string {
	return strings.TrimPrefix(line(err), fmt.Sprintf("redislock: %s %q: ", op, name))
}

// statusOf converts the library's Info.
func statusOf(info redislock.Info) lockStatus {
	st := lockStatus{Name: info.Name, Key: info.Key, Held: info.Held, Waiters: info.Waiters}
	if info.Held {
		ttl := int64(-1)
		if info.TTL >= 0 {
			ttl = info.TTL.Milliseconds()
		}
		st.TTLMillis, st.Metadata = &ttl, &info.Metadata
	}
	if info.Fence != 0 {
		st.Fence = &info.Fence
	}
	return st
}

// text formats st as aligned "field: value" lines.
func (st lockStatus) text() string {
	held, ttl, holder, fence := "no", "-", "-", "none"
	if st.Held {
		held = "yes"
		if *st.TTLMillis < 0 {
			ttl = "none (the key has no expiry)"
		} else {
			ttl = (time.Duration(*st.TTLMillis) * time.Millisecond).String()
		}
		holder = *st.Metadata
		if holder == "" {
			holder = "none (no metadata)"
		}
	}
	if st.Fence != nil {
		fence = strconv.FormatInt(*st.Fence, 10)
	}
	return fmt.Sprintf("name:     %s\nkey:      %s\nheld:     %s\nttl:      %s\nholder:   %s\nfence:    %s\nwaiters:  %d\n",
		st.Name, st.Key, held, ttl, holder, fence, st.Waiters)
}
