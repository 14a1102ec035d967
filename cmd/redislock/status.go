//go:build unix

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/redislock/redislock"
)

const statusUsage = `Usage: redislock status [flags] NAME

Shows whether NAME is held and by what: an exclusive lock ("redislock run"),
shared holders (readers, the library's AcquireShared) or a semaphore
("redislock run --limit N"); its remaining TTL; each holder's metadata (what
"redislock run" sets: host, pid and command) and, for shared holders and a
semaphore's, each one's lease left; the fence counter (the last fencing
token handed out; "none" before the first fenced acquisition) and the
waiters queued for it, each with its metadata and how long it has waited.
It reads them in one round trip (the library's
Client.Inspect, a script that only reads) and never shows a token. Exits 0
whether or not NAME is held, 64 on a usage error, 65 when NAME's key holds
something that is not a lock, 69 when Redis fails.

Text output, one "field: value" per line:
  name:     NAME
  key:      lock:{NAME}
  held:     yes | no | yes, shared by 3 holders | yes, a semaphore: 2 of 5 slots
  ttl:      1.5s | - (not held) | none (the key has no expiry)
  holder:   host=web-1 pid=4242 cmd=report | - (not held) | none (no metadata)
  fence:    12 | none
  waiters:  0
For shared holders and a semaphore, one holder line each (the lease that
ends first first; at most 100, then "... and N more"):
  holder:   host=web-1 pid=4242 cmd=report (lease 1.5s) | no metadata (lease 1.5s)
After "waiters", one line per waiter in line (the first in line first; at
most 100, then "... and N more"), with the metadata it gave:
  waiter:   host=web-2 pid=77 cmd=report (waited 2.5s) | no metadata (waited 2.5s)
With --json, one object: {"name","key","held","ttl_ms","metadata","fence",
"waiters","kind","count","limit","holders","queue"}: ttl_ms is null when not
held and -1 when the key has no expiry (for shared holders and a semaphore, the
latest lease); metadata is the exclusive holder's, null when not held or
held by shared holders or a semaphore; fence is null when there is no
counter; kind is "lock", "shared" or "semaphore", null when not held; count
is how many hold NAME; limit is a semaphore's, else null; holders is null
for an exclusive lock, else [{"metadata","ttl_ms"}...]; queue is the
waiters in line, [{"metadata","waited_ms"}...] ([] when none). When Redis fails,
--json prints {"name","key","error"} on stdout (and the error on stderr)
and exits 65 or 69.

Flags:
`

// lockStatus is what status reports; its JSON form is part of the CLI's
// stable output (fields are only ever added, at the end).
type lockStatus struct {
	Name string `json:"name"`
	Key  string `json:"key"`
	Held bool   `json:"held"`
	// TTLMillis is the remaining lease in ms, nil when not held, -1 when the
	// key has no expiry.
	TTLMillis *int64 `json:"ttl_ms"`
	// Metadata is the exclusive holder's metadata, nil when not held (or
	// held by shared holders or a semaphore: see Holders), "" when the
	// holder set none.
	Metadata *string `json:"metadata"`
	// Fence is the fence counter, nil when it does not exist.
	Fence *int64 `json:"fence"`
	// Waiters counts the waiters queued on the server.
	Waiters int `json:"waiters"`
	// Kind is "lock", "shared" or "semaphore", nil when not held.
	Kind *string `json:"kind"`
	// Count is how many hold the name.
	Count int `json:"count"`
	// Limit is a semaphore's limit, nil for the other kinds.
	Limit *int `json:"limit"`
	// Holders are every holder: an exclusive lock's one, the shared
	// holders or a semaphore's (at most 100); nil when not held.
	Holders []holderStatus `json:"holders"`
	// Queue are the waiters in line, first in line first (at most 100:
	// Waiters counts them all); empty, not nil, when none.
	Queue []waiterStatus `json:"queue"`
}

// waiterStatus is one of lockStatus.Queue.
type waiterStatus struct {
	Metadata     string `json:"metadata"`
	WaitedMillis int64  `json:"waited_ms"`
}

// holderStatus is one of lockStatus.Holders.
type holderStatus struct {
	Metadata  string `json:"metadata"`
	TTLMillis int64  `json:"ttl_ms"` // -1: no expiry
	ID        string `json:"id"`     // the library's HolderInfo.ID, as its log lines say holder=ID
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
	flags := newFlags("status", &conn)
	flags.BoolVar(&asJSON, "json", false, "print one JSON object instead of text")
	durationVar(flags, &timeout, "timeout", 5*time.Second, "give up on Redis after this `DURATION`")
	names, exit, ok := parseCommand(flags, "status", statusUsage, args, stdout, stderr)
	if !ok {
		return exit
	}
	// (names holds a NAME given after "--", which may start with a dash.)
	if len(names) != 1 {
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
		return inspectFailure(err)
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

// inspectFailure is the exit code of an Inspect or Break that failed:
// exitNotALock when the name's keys hold something else, exitUnavailable
// otherwise.
func inspectFailure(err error) int {
	if errors.Is(err, redislock.ErrNotALock) {
		return exitNotALock
	}
	return exitUnavailable
}

// statusOf converts the library's Info.
func statusOf(info redislock.Info) lockStatus {
	st := lockStatus{Name: info.Name, Key: info.Key, Held: info.Held, Waiters: info.Waiters, Count: info.Count}
	if info.Held {
		ttl := int64(-1)
		if info.TTL >= 0 {
			ttl = info.TTL.Milliseconds()
		}
		kind := info.Kind
		st.TTLMillis, st.Kind = &ttl, &kind
		st.Holders = holdersOf(info)
		switch kind {
		case "semaphore":
			limit := info.Limit
			st.Limit = &limit
		case "lock":
			st.Metadata = &info.Metadata
		}
	}
	if info.Fence != 0 {
		st.Fence = &info.Fence
	}
	st.Queue = queueStatus(info.Queue)
	return st
}

// queueStatus converts the library's Info.Queue.
func queueStatus(queue []redislock.WaiterInfo) []waiterStatus {
	out := make([]waiterStatus, len(queue))
	for i, w := range queue {
		out[i] = waiterStatus{Metadata: w.Metadata, WaitedMillis: w.Waited.Milliseconds()}
	}
	return out
}

// queueLines writes one "waiter:" line per waiter in line, as text does for
// the holders.
func (st lockStatus) queueLines(field func(name, format string, args ...any)) {
	for _, w := range st.Queue {
		metadata := w.Metadata
		if metadata == "" {
			metadata = "no metadata"
		}
		field("waiter", "%s (waited %v)", metadata, time.Duration(w.WaitedMillis)*time.Millisecond)
	}
	if more := st.Waiters - len(st.Queue); len(st.Queue) == maxQueue && more > 0 {
		field("waiter", "... and %d more", more)
	}
}

// maxQueue: Info.Queue lists at most this many waiters.
const maxQueue = 100

// text formats st as aligned "field: value" lines.
func (st lockStatus) text() string {
	var b strings.Builder
	field := func(name, format string, args ...any) {
		fmt.Fprintf(&b, "%-10s"+format+"\n", append([]any{name + ":"}, args...)...)
	}
	field("name", "%s", st.Name)
	field("key", "%s", st.Key)
	held, ttl := "no", "-"
	if st.Held {
		held = "yes"
		switch {
		case *st.Kind == "shared":
			held = "yes, shared by " + count(st.Count, "holder")
		case *st.Kind == "semaphore" && st.Limit != nil && *st.Limit > 0:
			held = fmt.Sprintf("yes, a semaphore: %d of %d slots", st.Count, *st.Limit)
		case *st.Kind == "semaphore":
			held = fmt.Sprintf("yes, a semaphore: %d slots held", st.Count)
		}
		if *st.TTLMillis < 0 {
			ttl = "none (the key has no expiry)"
		} else {
			ttl = (time.Duration(*st.TTLMillis) * time.Millisecond).String()
		}
	}
	field("held", "%s", held)
	field("ttl", "%s", ttl)
	st.holderLines(field)
	fence := "none"
	if st.Fence != nil {
		fence = strconv.FormatInt(*st.Fence, 10)
	}
	field("fence", "%s", fence)
	field("waiters", "%d", st.Waiters)
	st.queueLines(field)
	return b.String()
}

// holdersOf lists every holder of info, each with its ID.
func holdersOf(info redislock.Info) []holderStatus {
	var out []holderStatus
	for _, h := range info.Holders {
		ttl := int64(-1)
		if h.TTL >= 0 {
			ttl = h.TTL.Milliseconds()
		}
		out = append(out, holderStatus{Metadata: h.Metadata, TTLMillis: ttl, ID: h.ID})
	}
	return out
}

// holderLines writes one holder line per holder, the lease that ends first
// first: "holder:   ID METADATA (lease 1.5s)"; "-" when not held.
func (st lockStatus) holderLines(field func(name, format string, args ...any)) {
	if !st.Held {
		field("holder", "-")
		return
	}
	for _, h := range st.Holders {
		metadata, lease := h.Metadata, "no expiry"
		if metadata == "" {
			metadata = "no metadata"
		}
		if h.TTLMillis >= 0 {
			lease = "lease " + (time.Duration(h.TTLMillis) * time.Millisecond).String()
		}
		field("holder", "%s %s (%s)", h.ID, metadata, lease)
	}
	if more := st.Count - len(st.Holders); more > 0 {
		field("holder", "... and %d more", more)
	}
}

// count writes n things, "1 holder" or "3 holders".
func count(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return strconv.Itoa(n) + " " + thing + "s"
}
