//go:build unix

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/internal/lockrules"
)

const runUsage = `Usage: redislock run [flags] NAME -- COMMAND [ARGS...]

Flags may also follow NAME; everything after -- is COMMAND's, flags included.

Acquires the lock NAME on Redis, runs COMMAND in its own process group while
a watchdog extends the lock every TTL/3, releases the lock when COMMAND exits,
and exits with COMMAND's exit code.

With --limit N, NAME is a semaphore instead: at most N copies of COMMAND run
at once across machines (every copy must use the same N; another N is a usage
error, exit 64, while copies with the old one run). Waiters with --wait are
served in arrival order.

COMMAND gets REDISLOCK_NAME, REDISLOCK_TOKEN (empty when it runs without the
lock under --fail-open) and, with --fencing, REDISLOCK_FENCE in its
environment.

When the lock is lost (its key expired or was deleted or taken, or Redis was
unreachable until the lease could have ended), COMMAND's process group gets
SIGTERM, then SIGKILL after --grace, and redislock exits 70.
SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1 and SIGUSR2 sent to redislock are
forwarded to COMMAND's process group; redislock exits after COMMAND, with its
code. Processes COMMAND leaves behind in its process group are killed when it
exits: nothing runs outside the lock.

Exit codes: COMMAND's own; 64 usage error; 65 NAME's key holds no lock of
this kind; 69 Redis unreachable or refused (fail closed); 70 lock lost; 71
exit status unreadable; 75 skipped (see --skip-exit-code); 126 cannot
execute; 127 not found; 128+N killed by signal N.

Flags:
`

// runConfig is the parsed command line of run.
type runConfig struct {
	redis    redisFlags
	name     string
	command  []string
	ttl      time.Duration
	wait     time.Duration
	grace    time.Duration
	fencing  bool
	failOpen bool
	skipCode int
	verbose  bool
	metadata string
	limit    int // --limit: a semaphore of this many slots; 0: a lock
}

// parseRun parses run's arguments. It returns ok=false with the exit code
// when the command line was bad (the error is printed) or asked for help.
func parseRun(args []string, stdout, stderr io.Writer) (cfg runConfig, code int, ok bool) {
	flags := flag.NewFlagSet("redislock run", flag.ContinueOnError)
	flags.SetOutput(io.Discard) // errors and help are printed below, help on stdout
	cfg.redis.register(flags)
	durationVar(flags, &cfg.ttl, "ttl", redislock.DefaultTTL, "lease of the lock on Redis, a `DURATION`: how long it outlives a crashed redislock ("+
		lockrules.Duration(redislock.MinTTL)+" to "+lockrules.Duration(redislock.MaxTTL)+")")
	durationVar(flags, &cfg.wait, "wait", 0, "how long to wait for a lock held by another holder, a `DURATION`; 0 skips at once")
	durationVar(flags, &cfg.grace, "grace", 10*time.Second, "after the lock is lost, how long (a `DURATION`) COMMAND has between SIGTERM and SIGKILL")
	flags.BoolVar(&cfg.fencing, "fencing", false, "take a fencing token (a number that grows with every acquisition) into REDISLOCK_FENCE")
	flags.BoolVar(&cfg.failOpen, "fail-open", false, "run COMMAND without the lock when Redis cannot be reached (default: fail closed, exit 69)")
	flags.IntVar(&cfg.skipCode, "skip-exit-code", defaultSkipCode, "exit `CODE` (0-255) when another holder has the lock")
	flags.BoolVar(&cfg.verbose, "verbose", false, "log at Debug level (acquisition and release, with the token) instead of Warn")
	flags.IntVar(&cfg.limit, "limit", 0, "run at most `N` copies of COMMAND at once across machines (a semaphore of N slots; 1 to "+strconv.Itoa(redislock.MaxSemaphoreLimit)+") instead of one (default: an exclusive lock)")
	flags.StringVar(&cfg.metadata, "metadata", "", "`TEXT` stored with the lock for \"redislock status\" to show (at most 4096 bytes, one line; \"\" for none) (default \"host=HOSTNAME pid=PID cmd=COMMAND\")")

	names, command, dashed, err := parseArgs(flags, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, runUsage+flagDefaults(flags))
			return cfg, 0, false
		}
		return cfg, usageError(stderr, "run: %s", doubleDash(err)), false
	}
	switch {
	case len(names) == 0:
		return cfg, usageError(stderr, "run: missing NAME"), false
	case !dashed:
		return cfg, usageError(stderr, "run: want NAME -- COMMAND [ARGS...]"), false
	case len(names) > 1:
		return cfg, usageError(stderr, "run: want one NAME before --, got %d: %q", len(names), names), false
	case len(command) == 0:
		return cfg, usageError(stderr, "run: missing COMMAND after --"), false
	}
	cfg.name, cfg.command = names[0], command
	metadataSet, limitSet := false, false
	flags.Visit(func(f *flag.Flag) {
		metadataSet = metadataSet || f.Name == "metadata"
		limitSet = limitSet || f.Name == "limit"
	})
	if !metadataSet {
		cfg.metadata = defaultMetadata(cfg.command[0])
	}

	if _, err := lockKey(cfg.redis.prefix, cfg.name); err != nil {
		return cfg, usageError(stderr, "run: %v", err), false
	}
	switch {
	case lockrules.TTLOutOfRange(cfg.ttl) != "":
		return cfg, usageError(stderr, "run: --ttl %s %s", lockrules.Duration(cfg.ttl), lockrules.TTLOutOfRange(cfg.ttl)), false
	case cfg.wait < 0:
		return cfg, usageError(stderr, "run: negative --wait %v", cfg.wait), false
	case cfg.grace < 0:
		return cfg, usageError(stderr, "run: negative --grace %v", cfg.grace), false
	case limitSet && (cfg.limit < 1 || cfg.limit > redislock.MaxSemaphoreLimit):
		return cfg, usageError(stderr, "run: --limit %d is not in 1-%d", cfg.limit, redislock.MaxSemaphoreLimit), false
	case cfg.skipCode < 0 || cfg.skipCode > 255:
		return cfg, usageError(stderr, "run: --skip-exit-code %d is not in 0-255", cfg.skipCode), false
	}
	return cfg, 0, true
}

// defaultMetadata is run's metadata without --metadata: where the holder
// runs, "host=web-1 pid=4242 cmd=report", with redislock's own pid (the
// process that holds the lock; COMMAND is its child). Bytes the library
// refuses in metadata (control characters, line separators, bidirectional
// controls, invalid UTF-8; see redislock.WithMetadata) are replaced, so
// that an odd host or command name cannot stop the run.
func defaultMetadata(command string) string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	s := fmt.Sprintf("host=%s pid=%d cmd=%s", host, os.Getpid(), command)
	s = strings.Map(func(r rune) rune {
		if r == utf8.RuneError || unicode.IsControl(r) || unicode.In(r, unicode.Zl, unicode.Zp, unicode.Bidi_Control) {
			return '?'
		}
		return r
	}, strings.ToValidUTF8(s, "?"))
	for len(s) > redislock.MaxMetadata {
		_, size := utf8.DecodeLastRuneInString(s)
		s = s[:len(s)-size]
	}
	return s
}

// terminating are the signals that end redislock while it waits for the
// lock; forwarded are the signals passed on to the command once it runs.
var (
	terminating = []os.Signal{syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTERM}
	forwarded   = append(append([]os.Signal{}, terminating...), syscall.SIGUSR1, syscall.SIGUSR2)
)

func cmdRun(args []string, stdout, stderr io.Writer) int {
	cfg, code, ok := parseRun(args, stdout, stderr)
	if !ok {
		return code
	}
	// Look the command up before touching the lock: a typo should not take
	// (and so block) the lock, however briefly.
	if _, err := exec.LookPath(cfg.command[0]); err != nil {
		fmt.Fprintf(stderr, "redislock: %v\n", err)
		return execFailureCode(err)
	}
	rdb, err := cfg.redis.connect()
	if err != nil {
		return usageError(stderr, "run: %v", err)
	}
	defer rdb.Close()

	logger := newLogger(stderr, cfg.verbose)

	// Signals are caught from here on, so that one arriving while the lock
	// is being acquired cannot kill redislock between the acquisition and
	// the command's start, leaving the lock to its TTL.
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, forwarded...)
	defer signal.Stop(signals)

	locker := redislock.New(rdb,
		redislock.WithLogger(logger),
		redislock.WithKeyPrefix(cfg.redis.prefix),
		redislock.WithTTL(cfg.ttl),
		redislock.WithMetadata(cfg.metadata))
	start := time.Now()
	lock, sig, err := acquire(locker, cfg, signals)
	waited := ""
	if cfg.wait > 0 {
		waited = fmt.Sprintf(" after waiting %v", time.Since(start).Round(time.Millisecond))
	}
	switch {
	case sig != nil:
		fmt.Fprintf(stderr, "redislock: %v while acquiring %q%s: COMMAND was not run\n", sig, cfg.name, waited)
		return exitSignalBase + int(sig.(syscall.Signal))
	case err == nil:
	case errors.Is(err, redislock.ErrInvalidArgument) || errors.Is(err, redislock.ErrLimitMismatch):
		return usageError(stderr, "run: %s", cause(err))
	case errors.Is(err, redislock.ErrNotALock):
		// Redis answered: --fail-open does not apply.
		fmt.Fprintf(stderr, "redislock: %s; COMMAND was not run (exit %d)\n", notALock(locker, cfg, err), exitNotALock)
		return exitNotALock
	case errors.Is(err, redislock.ErrNotAcquired) && cfg.wait > 0:
		// The library's error says why the wait ended (still held, or the
		// deadline came during an attempt that Redis never answered).
		fmt.Fprintf(stderr, "redislock: %q not acquired%s: %s: skipped (exit %d)\n", cfg.name, waited, whyNotAcquired(err, cfg.name), cfg.skipCode)
		return cfg.skipCode
	case errors.Is(err, redislock.ErrNotAcquired):
		held := "is held by another holder"
		if cfg.limit > 0 {
			held = fmt.Sprintf("has all %d slots held", cfg.limit)
		}
		fmt.Fprintf(stderr, "redislock: %q %s: skipped (exit %d)\n", cfg.name, held, cfg.skipCode)
		return cfg.skipCode
	case cfg.failOpen && isUnreachable(err):
		logger.Warn("redislock: redis unreachable, running WITHOUT the lock (fail open)", "name", cfg.name, "error", line(err))
	default:
		fmt.Fprintf(stderr, "%s%s: COMMAND was not run (fail closed; see --fail-open)\n", line(err), waited)
		return exitUnavailable
	}
	return supervise(cfg, lock, signals, logger, stderr)
}

// notALock says what holds cfg.name instead of the lock run asked for,
// from one more look (Inspect): a semaphore where a lock was asked for (or
// the other way round), or data that is no lock. err is the acquisition's
// error, said when the look fails too.
func notALock(locker *redislock.Client, cfg runConfig, err error) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, inspectErr := locker.Inspect(ctx, cfg.name)
	switch {
	case errors.Is(inspectErr, redislock.ErrNotALock):
		return libraryCause(inspectErr, "inspect", cfg.name)
	case inspectErr != nil || !info.Held:
		return cause(err) // gone, or Redis failed meanwhile
	case info.Kind == "semaphore" && info.Limit > 0:
		return fmt.Sprintf("%q is a semaphore of %d slots: use --limit %d", cfg.name, info.Limit, info.Limit)
	case info.Kind == "semaphore":
		return fmt.Sprintf("%q is a semaphore: use --limit", cfg.name)
	case cfg.limit > 0:
		kind := map[string]string{"lock": "an exclusive lock", "shared": "a shared lock"}[info.Kind]
		return fmt.Sprintf("%q is held as %s, not a semaphore: run it without --limit", cfg.name, kind)
	}
	return cause(err)
}

// whyNotAcquired is the library's ErrNotAcquired error without what the
// command's own message says already: "redislock: not acquired: "job": "
// ("semaphore "job": " for --limit).
func whyNotAcquired(err error, name string) string {
	why := strings.TrimPrefix(cause(err), strings.TrimPrefix(redislock.ErrNotAcquired.Error(), "redislock: ")+": ")
	for _, subject := range []string{strconv.Quote(name), "semaphore " + strconv.Quote(name)} {
		why = strings.TrimPrefix(why, subject+": ")
	}
	return why
}

// acquire takes the lock, waiting up to cfg.wait. A terminating signal ends
// the wait: then it returns the signal and holds nothing.
func acquire(locker *redislock.Client, cfg runConfig, signals <-chan os.Signal) (*redislock.Lock, os.Signal, error) {
	var opts []redislock.Option
	if cfg.fencing {
		opts = append(opts, redislock.WithFencing())
	}
	ctx, cancel := context.WithCancel(context.Background())
	if cfg.wait > 0 {
		cancel()
		ctx, cancel = context.WithTimeout(context.Background(), cfg.wait)
		// Jittered backoff so that many waiting jobs do not retry in step;
		// the library never sleeps past the holder's TTL or the deadline.
		opts = append(opts, redislock.WithRetry(redislock.ExponentialBackoff(10*time.Millisecond, 500*time.Millisecond)))
	}
	defer cancel()

	type result struct {
		lock *redislock.Lock
		err  error
	}
	done := make(chan result, 1)
	go func() {
		var lock *redislock.Lock
		var err error
		if cfg.limit > 0 {
			lock, err = locker.AcquireSemaphore(ctx, cfg.name, cfg.limit, opts...)
		} else {
			lock, err = locker.Acquire(ctx, cfg.name, opts...)
		}
		done <- result{lock, err}
	}()
	for {
		select {
		case r := <-done:
			return r.lock, nil, r.err
		case sig := <-signals:
			if !isTerminating(sig) {
				continue // SIGUSR1/2 before the command exists: nobody to tell
			}
			cancel()
			if r := <-done; r.lock != nil {
				releaseLock(r.lock, nil)
			}
			return nil, sig, nil
		}
	}
}

func isTerminating(sig os.Signal) bool {
	for _, s := range terminating {
		if s == sig {
			return true
		}
	}
	return false
}

// supervise runs the command under lock (nil when running fail-open), and
// returns redislock's exit code once the command and every process left in
// its process group are gone and the lock is released.
func supervise(cfg runConfig, lock *redislock.Lock, signals <-chan os.Signal, logger *slog.Logger, stderr io.Writer) int {
	// Pdeathsig (Linux) fires when the thread that started the child exits:
	// keep this goroutine on its thread until the child is reaped.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	cmd := exec.Command(cfg.command[0], cfg.command[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = childEnv(os.Environ(), cfg.name, lock)
	cmd.SysProcAttr = childSysProcAttr()
	if err := cmd.Start(); err != nil {
		releaseLock(lock, logger)
		fmt.Fprintf(stderr, "redislock: %v\n", err)
		return execFailureCode(err)
	}
	// The child leads its own process group (Setpgid), so a signal sent to
	// -pgid reaches everything it started.
	pgid := cmd.Process.Pid
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	var lost <-chan struct{}
	if lock != nil {
		lost = lock.Context().Done()
	}
	var (
		killAfterGrace <-chan time.Time
		killedForLoss  bool
		waitErr        error
	)
wait:
	for {
		select {
		case waitErr = <-exited:
			break wait
		case sig := <-signals:
			_ = syscall.Kill(-pgid, sig.(syscall.Signal))
		case <-lost:
			lost = nil
			killedForLoss = true
			fmt.Fprintf(stderr, "%s: sending SIGTERM to COMMAND, SIGKILL in %v\n", line(context.Cause(lock.Context())), cfg.grace)
			_ = syscall.Kill(-pgid, syscall.SIGTERM)
			timer := time.NewTimer(cfg.grace)
			defer timer.Stop()
			killAfterGrace = timer.C
		case <-killAfterGrace:
			killAfterGrace = nil
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}
	}
	// Whatever COMMAND left running in its group would run unlocked once
	// the lock is released: end it first. ESRCH (none left) is the usual case.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	releaseLock(lock, logger)

	if killedForLoss {
		return exitLost
	}
	return exitCode(cmd.ProcessState, waitErr, stderr)
}

// exitCode maps the command's end to redislock's exit code, as a shell
// would: its exit status, or 128+N when signal N killed it.
func exitCode(state *os.ProcessState, waitErr error, stderr io.Writer) int {
	if state == nil {
		fmt.Fprintf(stderr, "redislock: waiting for COMMAND: %v\n", waitErr)
		return exitOSError
	}
	if status, ok := state.Sys().(syscall.WaitStatus); ok && status.Signaled() {
		return exitSignalBase + int(status.Signal())
	}
	return state.ExitCode()
}

// execFailureCode is 127 for a command that does not exist, 126 for one that
// cannot be executed.
func execFailureCode(err error) int {
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
		return exitNotFound
	}
	return exitCannotExecute
}

// releaseLock releases lock (nil: fail-open, nothing to release), bounded by
// redislock.ReleaseTimeout. A failure is logged: the command has finished
// either way, and the lock expires after its TTL.
func releaseLock(lock *redislock.Lock, logger *slog.Logger) {
	if lock == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), redislock.ReleaseTimeout)
	defer cancel()
	err := lock.Release(ctx)
	if err == nil || logger == nil {
		return
	}
	if errors.Is(err, redislock.ErrNotHeld) {
		if cause := context.Cause(lock.Context()); errors.Is(cause, redislock.ErrLockLost) {
			return // already reported when it was lost
		}
		logger.Warn("redislock: the lock was no longer held when COMMAND ended", "name", lock.Name(), "error", err)
		return
	}
	logger.Warn("redislock: release failed; the lock expires after its TTL", "name", lock.Name(), "error", err)
}

// Environment variables given to the command.
const (
	envName  = "REDISLOCK_NAME"
	envToken = "REDISLOCK_TOKEN"
	envFence = "REDISLOCK_FENCE"
)

// childEnv returns base without any inherited REDISLOCK_* variables of ours
// (an outer redislock's fence must not pass for this lock's), plus this
// lock's name, token and fence.
func childEnv(base []string, name string, lock *redislock.Lock) []string {
	env := make([]string, 0, len(base)+3)
	for _, kv := range base {
		key, _, _ := strings.Cut(kv, "=")
		if key == envName || key == envToken || key == envFence {
			continue
		}
		env = append(env, kv)
	}
	var token string
	var fence int64
	if lock != nil {
		token, fence = lock.Token(), lock.Fence()
	}
	env = append(env, envName+"="+name, envToken+"="+token)
	if fence > 0 {
		env = append(env, envFence+"="+strconv.FormatInt(fence, 10))
	}
	return env
}
