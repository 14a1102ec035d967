//go:build unix

package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/redislock/redislock"
)

const breakUsage = `Usage: redislock break [flags] NAME

For operators: ends the lock NAME whatever its holder, when the holder is
stuck and cannot be stopped otherwise. It prints the lock's status (see
"redislock status": the holder's metadata says which process it is), asks
for confirmation on stdin unless --yes, then breaks it: the lock goes to the
first waiter queued for it, as the holder's release would hand it on, or is
deleted when nobody waits. What it broke is logged on stderr.

With --holder ID it ends that one hold only (IDs are in "redislock status"):
one semaphore slot or one shared hold, while the others keep theirs, or an
exclusive lock; the hold goes on as its own release would (the slot or lock
to the next waiter). Shared holders and a semaphore are otherwise broken
whole, every share or slot at once: then it prints what that risks and
breaks only with --yes (it does not ask).

The holder is not stopped: it learns at its next extension (within a third
of its TTL with the defaults) that the lock is lost ("redislock run" then
sends SIGTERM to its command and exits 70). Until then two holders may
work at once (a semaphore's limit may be exceeded); fencing tokens keep the
old one's writes out, since its fence is below the next holder's.

Exits 0 when the lock was broken or was not held, 1 when the confirmation
was not given (or --yes, for a whole semaphore or shared lock) or no running
hold has the --holder ID, 64 on a usage error, 65 when the key holds
something that is not a lock (it is left alone), 69 when Redis fails.

Flags:
`

// exitDeclined: break asked for confirmation and did not get it.
const exitDeclined = 1

func cmdBreak(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	var (
		conn    redisFlags
		yes     bool
		holder  string
		timeout time.Duration
	)
	flags := newFlags("break", &conn)
	flags.BoolVar(&yes, "yes", false, "break without asking for confirmation")
	flags.StringVar(&holder, "holder", "", "break only the hold with this `ID` (see status)")
	durationVar(flags, &timeout, "timeout", 5*time.Second, "give up on Redis after this `DURATION` (each of the two round trips)")
	names, exit, ok := parseCommand(flags, "break", breakUsage, args, stdout, stderr)
	if !ok {
		return exit
	}
	// (names holds a NAME given after "--", which may start with a dash.)
	if len(names) != 1 {
		return usageError(stderr, "break: want exactly one NAME, got %d", len(names))
	}
	if timeout <= 0 {
		return usageError(stderr, "break: --timeout %v must be positive", timeout)
	}
	name := names[0]
	if _, err := lockKey(conn.prefix, name); err != nil {
		return usageError(stderr, "break: %v", err)
	}
	if holder != "" && (len(holder) != 16 || strings.Trim(holder, "0123456789abcdef") != "") {
		return usageError(stderr, "break: --holder %q is no holder ID (16 lowercase hex digits, as status shows them)", holder)
	}
	rdb, err := conn.connect()
	if err != nil {
		return usageError(stderr, "break: %v", err)
	}
	defer rdb.Close()
	logger := newLogger(stderr, false)
	locker := redislock.New(rdb, redislock.WithLogger(logger), redislock.WithKeyPrefix(conn.prefix))

	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	info, err := locker.Inspect(ctx, name)
	cancel()
	if err != nil {
		fmt.Fprintf(stderr, "redislock: break %q: %s\n", name, libraryCause(err, "inspect", name))
		return inspectFailure(err)
	}
	fmt.Fprint(stdout, statusOf(info).text())
	if !info.Held {
		fmt.Fprintf(stdout, "%q is not held: nothing to break\n", name)
		return 0
	}
	if holder != "" {
		return breakHolder(locker, stdin, stdout, stderr, name, holder, yes, timeout)
	}
	if wholeRisk(stderr, info) && !yes {
		fmt.Fprintf(stderr, "redislock: %q not broken (--yes breaks it)\n", name)
		return exitDeclined
	}
	if !yes && !confirm(stdin, stderr, fmt.Sprintf("%q", name), info.Count) {
		fmt.Fprintf(stderr, "redislock: %q not broken\n", name)
		return exitDeclined
	}
	return breakWhole(locker, stdout, stderr, name, timeout)
}

// breakWhole breaks name, every holder of it, and says what it broke.
func breakWhole(locker *redislock.Client, stdout, stderr io.Writer, name string, timeout time.Duration) int {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	broken, err := locker.Break(ctx, name) // logs what it broke at Warn
	cancel()
	if err != nil {
		fmt.Fprintf(stderr, "redislock: break %q: %s\n", name, libraryCause(err, "break", name))
		return inspectFailure(err)
	}
	if !broken.Held {
		// Released (or expired) between the look and the break.
		fmt.Fprintf(stdout, "%q was released meanwhile: nothing broken\n", name)
		return 0
	}
	switch broken.Kind {
	case "semaphore":
		fmt.Fprintf(stdout, "broke %q: its %s (of %d slots) lost their slots\n", name, count(broken.Count, "holder"), broken.Limit)
	case "shared":
		fmt.Fprintf(stdout, "broke %q: its %s lost their shares\n", name, count(broken.Count, "shared holder"))
	default:
		fmt.Fprintf(stdout, "broke %q, held by %s\n", name, holderOf(broken))
	}
	return 0
}

// wholeRisk says on stderr what breaking a whole semaphore or shared lock
// risks, and whether it does (not for an exclusive lock).
func wholeRisk(stderr io.Writer, info redislock.Info) bool {
	switch info.Kind {
	case "semaphore":
		fmt.Fprintf(stderr, "redislock: breaking %q ends all %s at once, but each keeps working until its next extension: meanwhile up to %d more than its limit may work. Break one stuck holder with --holder ID.\n",
			info.Name, count(info.Count, "slot"), info.Count)
	case "shared":
		fmt.Fprintf(stderr, "redislock: breaking %q ends all %s at once, but each keeps working until its next extension: meanwhile a writer may work while they still read. Break one stuck holder with --holder ID.\n",
			info.Name, count(info.Count, "share"))
	default:
		return false
	}
	return true
}

// breakHolder is break --holder: it ends the hold whose ID is id, after
// asking unless yes.
func breakHolder(locker *redislock.Client, stdin io.Reader, stdout, stderr io.Writer, name, id string, yes bool, timeout time.Duration) int {
	if !yes && !confirm(stdin, stderr, fmt.Sprintf("holder %s of %q", id, name), 1) {
		fmt.Fprintf(stderr, "redislock: holder %s of %q not broken\n", id, name)
		return exitDeclined
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	broken, err := locker.BreakHolder(ctx, name, id) // logs what it broke at Warn
	cancel()
	switch {
	case errors.Is(err, redislock.ErrNotHeld):
		fmt.Fprintf(stderr, "redislock: no running hold of %q has the ID %s (released meanwhile, or another ID): nothing broken\n", name, id)
		return exitDeclined
	case err != nil:
		fmt.Fprintf(stderr, "redislock: break holder %s of %q: %s\n", id, name, libraryCause(err, "break holder "+id+" of", name))
		return inspectFailure(err)
	}
	fmt.Fprintf(stdout, "broke holder %s of %q (%s, %s)\n", id, name, broken.Kind, count(broken.Count, "holder"))
	return 0
}

// confirm asks on stderr whether to break what (a quoted name, or a holder
// of one), held by holders, and reads the answer from stdin: "y" or "yes",
// in any case, confirms.
func confirm(stdin io.Reader, stderr io.Writer, what string, holders int) bool {
	keeps := "Its holder keeps running until its next extension."
	if holders > 1 {
		keeps = fmt.Sprintf("Its %d holders keep running until their next extension.", holders)
	}
	fmt.Fprintf(stderr, "Break %s? %s [y/N] ", what, keeps)
	answer, err := bufio.NewReader(stdin).ReadString('\n')
	if !isTerminal(stdin) {
		// Nobody typed it: show it, and end the prompt's line.
		fmt.Fprintln(stderr, strings.TrimSpace(answer))
	}
	if err != nil && answer == "" {
		return false
	}
	switch strings.ToLower(strings.TrimSpace(answer)) {
	case "y", "yes":
		return true
	}
	return false
}

// isTerminal tells whether r is a terminal (a character device).
func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	info, err := f.Stat()
	return err == nil && info.Mode()&os.ModeCharDevice != 0
}

// holderOf describes a holder for a message: its metadata, or that it set
// none.
func holderOf(info redislock.Info) string {
	if info.Metadata == "" {
		return "a holder without metadata"
	}
	return info.Metadata
}
