//go:build unix

// Command redislock runs a command while holding a distributed lock on
// Redis: flock(1) across machines, for Kubernetes CronJobs and shell
// scripts.
//
//	redislock run [flags] NAME -- COMMAND [ARGS...]
//	redislock status [flags] NAME
//	redislock ls [flags] [PREFIX]
//	redislock break [flags] NAME
//	redislock doctor [flags]
//	redislock version
//
// run acquires the lock NAME, runs COMMAND as a child in its own process
// group while the watchdog extends the lock, releases the lock when the
// command exits, and exits with the command's exit code. When the lock is
// held by someone else it skips (exit 75 by default) without running
// anything. When the lock is lost while the command runs, the command's
// process group gets SIGTERM, then SIGKILL after --grace, and redislock exits
// with 70. SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1 and SIGUSR2 sent to
// redislock are forwarded to the command's process group, and redislock
// exits only after the command has. status shows who holds a lock and who
// waits; ls lists the locks held; break ends a stuck one (or one stuck
// holder), for operators. doctor checks a Redis deployment for
// locking (eviction policy, persistence, replication, latency, clock, the
// user's rights) and prints one line per check.
//
// Flags go anywhere before "--", also after NAME; everything after "--" is
// COMMAND's. Run "redislock help" for the flags and every exit code.
package main

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
)

// Exit codes of redislock itself. Every other code of "run" is the
// command's own. The sysexits.h values (64-78) are used because ordinary
// commands seldom return them: they return 0, 1 or 2, a shell's 126/127, or
// 128+N after a signal.
const (
	// exitUsage (EX_USAGE): bad flags or arguments; nothing was sent.
	exitUsage = 64
	// exitNotALock (EX_DATAERR): NAME's key holds something that is not
	// the lock asked for: data of another type, or a lock of another kind
	// (a semaphore where run wants a lock, or the other way round). Redis
	// answered, so --fail-open does not apply; nothing was run or changed.
	exitNotALock = 65
	// exitUnavailable (EX_UNAVAILABLE): Redis could not be reached, or
	// refused the lock's commands (NOPERM, a wrong password), and
	// --fail-open was not given (or Redis answered and refused): nothing
	// was run.
	exitUnavailable = 69
	// exitLost (EX_SOFTWARE): the lock was lost while the command ran and
	// redislock terminated the command.
	exitLost = 70
	// exitOSError (EX_OSERR): the command's exit status could not be read.
	exitOSError = 71
	// defaultSkipCode (EX_TEMPFAIL, "try again later"): the lock was held by
	// another holder, so the command was not run. --skip-exit-code changes it
	// (0 makes a skip count as success).
	defaultSkipCode = 75
	// exitCannotExecute and exitNotFound are the codes shells (and env,
	// nice, timeout) use for a command that cannot be run.
	exitCannotExecute = 126
	exitNotFound      = 127
	// exitSignalBase + N: the command (or redislock, before it started the
	// command) was killed by signal N, as in shells.
	exitSignalBase = 128
)

const mainUsage = `redislock: run a command while holding a distributed lock on Redis

Usage:
  redislock run [flags] NAME -- COMMAND [ARGS...]
  redislock status [flags] NAME
  redislock ls [flags] [PREFIX]
  redislock break [flags] NAME
  redislock doctor [flags]
  redislock version
  redislock help [run|status|ls|break|doctor]

Flags go anywhere before --, also after NAME (status NAME --json); everything
after -- is COMMAND's, flags included.

run acquires the lock NAME, runs COMMAND while a watchdog extends the lock,
releases the lock when COMMAND exits, and exits with COMMAND's exit code.
If another holder has NAME, COMMAND is not run (exit 75, see --wait).
status shows whether NAME is held and by what (a lock, shared holders, a
semaphore), its remaining TTL, each holder's metadata, its fence counter and
its waiters. ls lists the locks held, one line each (--watch redraws).
break ends NAME whatever its holder, or one holder of it
(--holder ID), for operators, after asking (see --yes).
doctor checks a Redis deployment for locking, one line per check.

Exit codes of run:
  0-255  COMMAND's own exit code
  64     usage error: bad flags or arguments (nothing was run)
  65     NAME's key holds something else: data that is no lock, or a lock of
         another kind (a semaphore without --limit, a lock with it)
  69     Redis could not be reached or refused the lock, without --fail-open
         (fail closed: nothing was run)
  70     the lock was lost while COMMAND ran; redislock sent it SIGTERM, and
         SIGKILL after --grace
  71     COMMAND's exit status could not be read
  75     skipped: another holder had NAME (until --wait ran out); change
         with --skip-exit-code
  126    COMMAND could not be executed
  127    COMMAND was not found
  128+N  COMMAND was killed by signal N (130 SIGINT, 143 SIGTERM), or
         redislock got signal N while waiting for the lock
status exits 0 (held or not), 64 on a usage error, 65 when NAME's key
holds no lock, 69 when Redis fails. ls exits 0, 64 on a usage error, 69
when Redis fails.
break exits 0 (broken, or not held), 1 when not confirmed (a whole semaphore
or shared lock: without --yes) or no hold has the --holder ID, 64 on a usage
error, 65 when NAME's key holds no lock, 69 when Redis fails.
doctor exits 0 when no check is broken, 1 when one is, 64 on a usage
error, 69 when Redis cannot be reached.

Run "redislock help run", "redislock help status", "redislock help ls",
"redislock help break" or "redislock help doctor" for the flags.
`

func main() {
	os.Exit(realMain(os.Args[1:], os.Stdout, os.Stderr))
}

// realMain runs the command line args (without the program name) and returns
// the exit code.
func realMain(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, mainUsage)
		return exitUsage
	}
	switch args[0] {
	case "run":
		return cmdRun(args[1:], stdout, stderr)
	case "status":
		return cmdStatus(args[1:], stdout, stderr)
	case "ls":
		return cmdLs(args[1:], stdout, stderr)
	case "break":
		return cmdBreak(args[1:], os.Stdin, stdout, stderr)
	case "doctor":
		return cmdDoctor(args[1:], stdout, stderr)
	case "version", "--version", "-version":
		if len(args) > 1 {
			return usageError(stderr, "version takes no arguments")
		}
		fmt.Fprintln(stdout, versionString(debug.ReadBuildInfo()))
		return 0
	case "help", "--help", "-help", "-h":
		if len(args) > 2 {
			return usageError(stderr, "help takes at most one command")
		}
		if len(args) == 2 {
			switch args[1] {
			case "run":
				return cmdRun([]string{"-h"}, stdout, stderr)
			case "status":
				return cmdStatus([]string{"-h"}, stdout, stderr)
			case "ls":
				return cmdLs([]string{"-h"}, stdout, stderr)
			case "break":
				return cmdBreak([]string{"-h"}, os.Stdin, stdout, stderr)
			case "doctor":
				return cmdDoctor([]string{"-h"}, stdout, stderr)
			case "version", "help":
				fmt.Fprint(stdout, mainUsage)
				return 0
			}
			return usageError(stderr, "unknown command %q", args[1])
		}
		fmt.Fprint(stdout, mainUsage)
		return 0
	}
	return usageError(stderr, "unknown command %q", args[0])
}

// usageError prints a usage error, on one line, and returns exitUsage.
func usageError(stderr io.Writer, format string, args ...any) int {
	msg := strings.ReplaceAll(fmt.Sprintf(format, args...), "\n", "; ")
	fmt.Fprintf(stderr, "redislock: %s (usage: see \"redislock help\")\n", msg)
	return exitUsage
}

// versionString returns "redislock" and the version of the module it was
// built from, read from the build information: the release a go install
// ...@vX.Y.Z fetched, or the version go build stamped from the git checkout
// (v0.1.1-0.20261204...-abcdef+dirty); then the Go version and platform.
// A build without either (go build with -buildvcs=false, or outside git)
// says so rather than printing a bare "devel".
func versionString(info *debug.BuildInfo, ok bool) string {
	if !ok {
		return "redislock (unknown version: built without module information)"
	}
	platform := fmt.Sprintf(" (%s %s/%s)", info.GoVersion, runtime.GOOS, runtime.GOARCH)
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return "redislock " + v + platform
	}
	var revision, dirty string
	for _, setting := range info.Settings {
		switch {
		case setting.Key == "vcs.revision":
			revision = setting.Value
		case setting.Key == "vcs.modified" && setting.Value == "true":
			dirty = "+dirty"
		}
	}
	if revision == "" {
		return "redislock (devel: built from a source tree without version control information)" + platform
	}
	return "redislock (devel: built from revision " + revision[:min(12, len(revision))] + dirty + ")" + platform
}
