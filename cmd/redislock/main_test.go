//go:build unix

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/internal/redistest"
)

// binary is the redislock command built once by TestMain.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "redislock-cli-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "redislock")
	args := []string{"build", "-o", binary}
	if raceEnabled {
		args = append(args, "-race") // the command's own races fail its exit code (66)
	}
	build := exec.Command("go", append(args, ".")...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "building redislock: %v\n", err)
		_ = os.RemoveAll(dir)
		os.Exit(1)
	}
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		_ = os.RemoveAll(dir)
		os.Exit(code)
	}))
}

// testTimeout bounds every wait of these tests, so that a bug shows up as a
// failure rather than a hung test binary.
const testTimeout = 30 * time.Second

// cliProc is one redislock process started by a test. Its output goes to
// files, not pipes, so that its end is seen when it exits even if a
// descendant it failed to kill still holds the output open.
type cliProc struct {
	cmd            *exec.Cmd
	stdout, stderr string // file paths
	done           chan struct{}
}

// env returns the environment for redislock: ours without REDIS_URL and
// REDISLOCK_*, plus extra ("KEY=value").
func env(extra ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "REDIS_URL=") || strings.HasPrefix(kv, "REDISLOCK_") {
			continue
		}
		out = append(out, kv)
	}
	return append(out, extra...)
}

// serverEnv returns the environment that points redislock at srv, with D set
// to dir for the child scripts.
func serverEnv(srv *redistest.Server, dir string, extra ...string) []string {
	return env(append([]string{"REDIS_URL=redis://" + srv.Addr(), "D=" + dir}, extra...)...)
}

func startCLI(t *testing.T, environ []string, args ...string) *cliProc {
	t.Helper()
	out := t.TempDir()
	p := &cliProc{
		stdout: filepath.Join(out, "stdout"), stderr: filepath.Join(out, "stderr"),
		done: make(chan struct{}),
	}
	stdout, err := os.Create(p.stdout)
	require.NoError(t, err)
	defer stdout.Close()
	stderr, err := os.Create(p.stderr)
	require.NoError(t, err)
	defer stderr.Close()

	p.cmd = exec.Command(binary, args...)
	p.cmd.Env = environ
	p.cmd.Stdout, p.cmd.Stderr = stdout, stderr
	require.NoError(t, p.cmd.Start())
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill() // its child dies with it (Pdeathsig)
			<-p.done
		}
	})
	return p
}

// wait waits for the process to exit and returns its exit code.
func (p *cliProc) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(testTimeout):
		t.Fatalf("redislock %v still running after %v; stderr:\n%s", p.cmd.Args[1:], testTimeout, p.Stderr(t))
	}
	return p.cmd.ProcessState.ExitCode()
}

func (p *cliProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *cliProc) Stdout(t *testing.T) string { return readFile(t, p.stdout) }
func (p *cliProc) Stderr(t *testing.T) string { return readFile(t, p.stderr) }

// runCLI runs redislock to completion and returns its exit code and output.
// Every message of its own on stderr says "redislock:" once.
func runCLI(t *testing.T, environ []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	p := startCLI(t, environ, args...)
	code = p.wait(t)
	stdout, stderr = p.Stdout(t), p.Stderr(t)
	requireOnePrefix(t, stderr)
	return code, stdout, stderr
}

// requireOnePrefix fails when a line of redislock's stderr repeats its
// "redislock:" prefix ("redislock: run: redislock: invalid argument: ..."),
// the slog records aside (their msg and error attributes are apart).
func requireOnePrefix(t *testing.T, stderr string) {
	t.Helper()
	for _, l := range strings.Split(stderr, "\n") {
		if !strings.HasPrefix(l, "time=") {
			require.LessOrEqual(t, strings.Count(l, "redislock:"), 1, "a message repeats its prefix: %q", l)
		}
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(data)
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// eventually polls cond until it holds, failing the test after testTimeout.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", testTimeout, what)
		}
		time.Sleep(5 * time.Millisecond) // polling interval, not a synchronisation
	}
}

// readPID waits for a child script to write its pid ("echo $$ > file").
func readPID(t *testing.T, path string) int {
	t.Helper()
	var pid int
	eventually(t, "the pid file "+filepath.Base(path), func() bool {
		data, err := os.ReadFile(path)
		if err != nil || !bytes.HasSuffix(data, []byte("\n")) {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(data)))
		return err == nil
	})
	return pid
}

// processGone reports whether pid has exited: no such process, or a zombie
// waiting for a reaper (an orphan whose new parent has not reaped it yet).
func processGone(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if errors.Is(err, fs.ErrNotExist) {
		if _, statErr := os.Stat("/proc/self/stat"); statErr == nil {
			return true
		}
		// No procfs: ask the kernel.
		return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
	}
	if err != nil {
		return false
	}
	// The state is the first field after the parenthesised command name.
	end := bytes.LastIndexByte(stat, ')')
	return end >= 0 && end+2 < len(stat) && stat[end+2] == 'Z'
}

func quietLocker(rdb redis.UniversalClient) *redislock.Client {
	return redislock.New(rdb, redislock.WithLogger(slog.New(slog.DiscardHandler)))
}

// holdLock takes name from the test process for a minute, without watchdog,
// and releases it at cleanup unless released before.
func holdLock(t *testing.T, rdb redis.UniversalClient, name string, opts ...redislock.Option) *redislock.Lock {
	t.Helper()
	opts = append([]redislock.Option{redislock.WithTTL(time.Minute), redislock.WithWatchdog(false)}, opts...)
	lock, err := quietLocker(rdb).Acquire(context.Background(), name, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = lock.Release(context.Background()) })
	return lock
}

// evalshaCalls returns how many EVALSHA commands the server has run: every
// acquire attempt is one once the script is cached.
func evalshaCalls(t *testing.T, rdb *redis.Client) int {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	require.NoError(t, err)
	m := regexp.MustCompile(`cmdstat_evalsha:calls=(\d+)`).FindStringSubmatch(info)
	if m == nil {
		return 0
	}
	n, err := strconv.Atoi(m[1])
	require.NoError(t, err)
	return n
}

func keyExists(t *testing.T, rdb *redis.Client, key string) bool {
	t.Helper()
	n, err := rdb.Exists(context.Background(), key).Result()
	require.NoError(t, err)
	return n == 1
}

// untilStopped is a child script that records that it started and runs
// until the test creates $D/stop.
const untilStopped = `echo $$ >> "$D/started"; while [ ! -e "$D/stop" ]; do sleep 0.01; done`

func TestRun(t *testing.T) {
	t.Parallel()

	t.Run("two concurrent runs of one name: one runs, the other skips with the skip code", func(t *testing.T) {
		t.Parallel()
		srv, dir := redistest.Start(t), t.TempDir()
		environ := serverEnv(srv, dir)
		first := startCLI(t, environ, "run", "job", "--", "sh", "-c", untilStopped)
		second := startCLI(t, environ, "run", "job", "--", "sh", "-c", untilStopped)

		eventually(t, "one of the two runs to exit", func() bool { return first.exited() || second.exited() })
		skipper, runner := first, second
		if second.exited() {
			skipper, runner = second, first
		}
		require.Equal(t, defaultSkipCode, skipper.wait(t), skipper.Stderr(t))
		require.Contains(t, skipper.Stderr(t), `"job" is held by another holder: skipped (exit 75)`)
		require.False(t, runner.exited(), "the holder must still be running")
		// The holder took the lock before the skipper looked, but its
		// command may not have started yet (nor written its line: the file
		// exists from the shell's >> on).
		eventually(t, "the holder's command to start", func() bool {
			data, err := os.ReadFile(filepath.Join(dir, "started"))
			return err == nil && strings.Contains(string(data), "\n")
		})
		require.Equal(t, 1, strings.Count(readFile(t, filepath.Join(dir, "started")), "\n"), "exactly one command ran")

		require.NoError(t, os.WriteFile(filepath.Join(dir, "stop"), nil, 0o644))
		require.Equal(t, 0, runner.wait(t), runner.Stderr(t))
		require.False(t, keyExists(t, srv.Client(t), "lock:{job}"), "the lock is released after the command")
	})

	t.Run("the command's exit code is redislock's, 128+N after signal N, and the lock is released", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t)
		rdb := srv.Client(t)
		for script, want := range map[string]int{
			"exit 0":           0,
			"exit 7":           7,
			"kill -USR1 $$":    128 + int(syscall.SIGUSR1),
			"kill -KILL $$":    128 + int(syscall.SIGKILL),
			"exit 75":          75, // the command's own 75 passes through untouched
			"echo out; exit 3": 3,
		} {
			code, stdout, stderr := runCLI(t, serverEnv(srv, t.TempDir()), "run", "job", "--", "sh", "-c", script)
			require.Equal(t, want, code, "%s: %s", script, stderr)
			if script == "echo out; exit 3" {
				require.Equal(t, "out\n", stdout, "the command's output is passed through")
			}
			require.False(t, keyExists(t, rdb, "lock:{job}"), script)
		}
	})

	t.Run("the command gets the lock's name, token and, with --fencing, a growing fence", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t)
		script := `printf '%s|%s|%s\n' "$REDISLOCK_NAME" "$REDISLOCK_TOKEN" "${REDISLOCK_FENCE-unset}"`
		// An inherited fence (an outer redislock) must not pass for ours.
		environ := serverEnv(srv, t.TempDir(), "REDISLOCK_FENCE=99", "REDISLOCK_TOKEN=outer")

		var tokens []string
		var last int64
		for range 2 {
			code, stdout, stderr := runCLI(t, environ, "run", "--fencing", "nightly-report", "--", "sh", "-c", script)
			require.Equal(t, 0, code, stderr)
			fields := strings.Split(strings.TrimSuffix(stdout, "\n"), "|")
			require.Len(t, fields, 3, stdout)
			require.Equal(t, "nightly-report", fields[0])
			require.Regexp(t, `^[A-Z2-7]{26}$`, fields[1], "a fresh 130-bit token")
			fence, err := strconv.ParseInt(fields[2], 10, 64)
			require.NoError(t, err, "the fence, not the inherited one: %q", fields[2])
			require.Greater(t, fence, last, "fences grow")
			last = fence
			tokens = append(tokens, fields[1])
		}
		require.NotEqual(t, tokens[0], tokens[1])

		code, stdout, stderr := runCLI(t, environ, "run", "nightly-report", "--", "sh", "-c", script)
		require.Equal(t, 0, code, stderr)
		require.Regexp(t, `^nightly-report\|[A-Z2-7]{26}\|unset\n$`, stdout, "no fence without --fencing")
	})

	t.Run("--wait waits for the holder to release, then runs", func(t *testing.T) {
		t.Parallel()
		srv, dir := redistest.Start(t), t.TempDir()
		rdb := srv.Client(t)
		held := holdLock(t, rdb, "job")
		attemptsBefore := evalshaCalls(t, rdb)

		p := startCLI(t, serverEnv(srv, dir), "run", "--wait", "25s", "job", "--", "sh", "-c", `touch "$D/ran"`)
		eventually(t, "redislock to try the held lock", func() bool { return evalshaCalls(t, rdb) > attemptsBefore })
		require.False(t, p.exited(), "it waits instead of skipping: %s", p.Stderr(t))
		require.False(t, exists(filepath.Join(dir, "ran")), "the command must not run while the lock is held")

		require.NoError(t, held.Release(context.Background()))
		require.Equal(t, 0, p.wait(t), p.Stderr(t))
		require.True(t, exists(filepath.Join(dir, "ran")))
	})

	t.Run("--wait gives up with the skip code when the holder keeps the lock", func(t *testing.T) {
		t.Parallel()
		srv, dir := redistest.Start(t), t.TempDir()
		holdLock(t, srv.Client(t), "job")
		const wait = 300 * time.Millisecond
		start := time.Now()
		code, _, stderr := runCLI(t, serverEnv(srv, dir), "run", "--wait", wait.String(), "job", "--", "sh", "-c", `touch "$D/ran"`)
		require.Equal(t, defaultSkipCode, code, stderr)
		require.GreaterOrEqual(t, time.Since(start), wait, "it waited --wait before skipping")
		require.False(t, exists(filepath.Join(dir, "ran")))
	})

	t.Run("--skip-exit-code sets the code of a skip", func(t *testing.T) {
		t.Parallel()
		srv, dir := redistest.Start(t), t.TempDir()
		holdLock(t, srv.Client(t), "job")
		for _, skip := range []string{"0", "3"} {
			code, _, stderr := runCLI(t, serverEnv(srv, dir), "run", "--skip-exit-code", skip, "job", "--", "sh", "-c", `touch "$D/ran"`)
			require.Equal(t, skip, strconv.Itoa(code), stderr)
			require.Contains(t, stderr, "skipped (exit "+skip+")")
		}
		require.False(t, exists(filepath.Join(dir, "ran")))
	})

	t.Run("--prefix sets the key, and status with the same prefix finds it", func(t *testing.T) {
		t.Parallel()
		srv, dir := redistest.Start(t), t.TempDir()
		rdb := srv.Client(t)
		p := startCLI(t, serverEnv(srv, dir), "run", "--prefix", "cron:", "job", "--", "sh", "-c", untilStopped)
		eventually(t, "the command to start", func() bool { return exists(filepath.Join(dir, "started")) })
		require.True(t, keyExists(t, rdb, "cron:{job}"))
		require.False(t, keyExists(t, rdb, "lock:{job}"))

		code, stdout, stderr := runCLI(t, serverEnv(srv, dir), "status", "--prefix", "cron:", "job")
		require.Equal(t, 0, code, stderr)
		require.Contains(t, stdout, "key:      cron:{job}\nheld:     yes\n")

		require.NoError(t, os.WriteFile(filepath.Join(dir, "stop"), nil, 0o644))
		require.Equal(t, 0, p.wait(t), p.Stderr(t))
		require.False(t, keyExists(t, rdb, "cron:{job}"))
	})

	t.Run("a command that does not exist exits 127 without taking the lock", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t)
		rdb := srv.Client(t)
		code, _, stderr := runCLI(t, serverEnv(srv, t.TempDir()), "run", "job", "--", "redislock-no-such-command")
		require.Equal(t, exitNotFound, code, stderr)
		require.Contains(t, stderr, "redislock-no-such-command")
		require.Zero(t, evalshaCalls(t, rdb), "nothing was sent")

		notExecutable := filepath.Join(t.TempDir(), "script")
		require.NoError(t, os.WriteFile(notExecutable, []byte("#!/bin/sh\n"), 0o644))
		code, _, stderr = runCLI(t, serverEnv(srv, t.TempDir()), "run", "job", "--", notExecutable)
		require.Equal(t, exitCannotExecute, code, stderr)
	})
}

func TestLockLost(t *testing.T) {
	t.Parallel()

	t.Run("the key deleted mid-run: the command gets SIGTERM and redislock exits with the lost code", func(t *testing.T) {
		t.Parallel()
		srv, dir := redistest.Start(t), t.TempDir()
		rdb := srv.Client(t)
		script := `trap 'echo TERM > "$D/term"; exit 0' TERM; echo $$ > "$D/pid"; while :; do sleep 0.01; done`
		p := startCLI(t, serverEnv(srv, dir), "run", "--ttl", "600ms", "--grace", "20s", "job", "--", "sh", "-c", script)
		pid := readPID(t, filepath.Join(dir, "pid"))

		require.NoError(t, rdb.Del(context.Background(), "lock:{job}").Err())
		require.Equal(t, exitLost, p.wait(t), p.Stderr(t))
		require.Equal(t, "TERM\n", readFile(t, filepath.Join(dir, "term")), "the command was told with SIGTERM")
		require.Contains(t, p.Stderr(t), "lost")
		require.Contains(t, p.Stderr(t), "sending SIGTERM to COMMAND")
		require.True(t, processGone(pid))
	})

	t.Run("a command that ignores SIGTERM is killed after --grace", func(t *testing.T) {
		t.Parallel()
		srv, dir := redistest.Start(t), t.TempDir()
		rdb := srv.Client(t)
		// trap '' is inherited: the sleeps ignore SIGTERM too.
		script := `trap '' TERM; echo $$ > "$D/pid"; while :; do sleep 0.01; done`
		const grace = 300 * time.Millisecond
		p := startCLI(t, serverEnv(srv, dir), "run", "--ttl", "600ms", "--grace", grace.String(), "job", "--", "sh", "-c", script)
		pid := readPID(t, filepath.Join(dir, "pid"))

		// Taking the key is a loss too (reason Taken).
		deleted := time.Now()
		require.NoError(t, rdb.Set(context.Background(), "lock:{job}", "someone-else", time.Minute).Err())
		require.Equal(t, exitLost, p.wait(t), p.Stderr(t))
		require.GreaterOrEqual(t, time.Since(deleted), grace, "SIGKILL comes only after the grace")
		require.True(t, processGone(pid))
		require.Equal(t, "someone-else", rdb.Get(context.Background(), "lock:{job}").Val(), "the new holder's key is left alone")
	})

	t.Run("redis frozen mid-run: the command is terminated when the lease can no longer be trusted", func(t *testing.T) {
		t.Parallel()
		srv, dir := redistest.Start(t), t.TempDir()
		script := `trap 'echo TERM > "$D/term"; exit 0' TERM; echo $$ > "$D/pid"; while :; do sleep 0.01; done`
		p := startCLI(t, serverEnv(srv, dir), "run", "--ttl", "1s", "job", "--", "sh", "-c", script)
		readPID(t, filepath.Join(dir, "pid"))

		srv.Pause(t)
		eventually(t, "the command to get SIGTERM", func() bool { return exists(filepath.Join(dir, "term")) })
		srv.Resume(t) // so that the release is answered
		require.Equal(t, exitLost, p.wait(t), p.Stderr(t))
		require.Contains(t, p.Stderr(t), "unreachable")
	})
}

func TestSignals(t *testing.T) {
	t.Parallel()

	t.Run("SIGTERM to redislock reaches the command; redislock exits after it, with its code", func(t *testing.T) {
		t.Parallel()
		srv, dir := redistest.Start(t), t.TempDir()
		rdb := srv.Client(t)
		script := `trap 'echo TERM > "$D/got"; exit 5' TERM; echo $$ > "$D/pid"; while :; do sleep 0.01; done`
		p := startCLI(t, serverEnv(srv, dir), "run", "job", "--", "sh", "-c", script)
		pid := readPID(t, filepath.Join(dir, "pid"))

		require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
		require.Equal(t, 5, p.wait(t), p.Stderr(t))
		require.Equal(t, "TERM\n", readFile(t, filepath.Join(dir, "got")))
		require.True(t, processGone(pid), "no orphan left")
		require.False(t, keyExists(t, rdb, "lock:{job}"), "the lock is released")
	})

	t.Run("SIGINT to redislock kills a command that does not trap it: exit 130", func(t *testing.T) {
		t.Parallel()
		srv, dir := redistest.Start(t), t.TempDir()
		p := startCLI(t, serverEnv(srv, dir), "run", "job", "--", "sh", "-c", `echo $$ > "$D/pid"; exec sleep 60`)
		pid := readPID(t, filepath.Join(dir, "pid"))

		require.NoError(t, p.cmd.Process.Signal(syscall.SIGINT))
		require.Equal(t, 128+int(syscall.SIGINT), p.wait(t), p.Stderr(t))
		require.True(t, processGone(pid))
	})

	t.Run("a forwarded signal reaches the command's own children too", func(t *testing.T) {
		t.Parallel()
		srv, dir := redistest.Start(t), t.TempDir()
		script := `sleep 60 & echo $! > "$D/grandchild"; echo $$ > "$D/pid"; wait`
		p := startCLI(t, serverEnv(srv, dir), "run", "job", "--", "sh", "-c", script)
		pid := readPID(t, filepath.Join(dir, "pid"))
		grandchild := readPID(t, filepath.Join(dir, "grandchild"))

		require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
		require.Equal(t, 128+int(syscall.SIGTERM), p.wait(t), p.Stderr(t))
		require.True(t, processGone(pid))
		eventually(t, "the grandchild to be gone", func() bool { return processGone(grandchild) })
	})

	t.Run("processes the command leaves behind are killed when it exits", func(t *testing.T) {
		t.Parallel()
		srv, dir := redistest.Start(t), t.TempDir()
		code, _, stderr := runCLI(t, serverEnv(srv, dir), "run", "job", "--", "sh", "-c", `sleep 60 & echo $! > "$D/leftover"`)
		require.Equal(t, 0, code, stderr)
		leftover := readPID(t, filepath.Join(dir, "leftover"))
		eventually(t, "the leftover process to be gone", func() bool { return processGone(leftover) })
	})

	t.Run("a signal while waiting for the lock ends the wait: the command never runs", func(t *testing.T) {
		t.Parallel()
		srv, dir := redistest.Start(t), t.TempDir()
		rdb := srv.Client(t)
		holdLock(t, rdb, "job")
		attemptsBefore := evalshaCalls(t, rdb)
		p := startCLI(t, serverEnv(srv, dir), "run", "--wait", "25s", "job", "--", "sh", "-c", `touch "$D/ran"`)
		eventually(t, "redislock to try the held lock", func() bool { return evalshaCalls(t, rdb) > attemptsBefore })

		require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
		require.Equal(t, 128+int(syscall.SIGTERM), p.wait(t), p.Stderr(t))
		require.Contains(t, p.Stderr(t), "COMMAND was not run")
		require.False(t, exists(filepath.Join(dir, "ran")))
	})
}

func TestRedisDown(t *testing.T) {
	t.Parallel()
	// A port nobody listens on: connections are refused at once. Port 1,
	// not a free ephemeral port: a parallel test's redis-server could take
	// that one meanwhile, and the command then ran (a loaded run saw it).
	down := "REDIS_URL=redis://127.0.0.1:1"
	script := `printf '%s|%s\n' "$REDISLOCK_TOKEN" "${REDISLOCK_FENCE-unset}"; touch "$D/ran"; exit 4`

	t.Run("fail closed by default: the command is not run, exit 69", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		code, _, stderr := runCLI(t, env(down, "D="+dir), "run", "job", "--", "sh", "-c", script)
		require.Equal(t, exitUnavailable, code, stderr)
		require.Contains(t, stderr, "connection refused")
		require.Contains(t, stderr, "COMMAND was not run (fail closed")
		require.False(t, exists(filepath.Join(dir, "ran")))
	})

	t.Run("--fail-open runs the command without the lock, with no token and no fence", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		code, stdout, stderr := runCLI(t, env(down, "D="+dir), "run", "--fail-open", "--fencing", "job", "--", "sh", "-c", script)
		require.Equal(t, 4, code, stderr)
		require.True(t, exists(filepath.Join(dir, "ran")))
		require.Equal(t, "|unset\n", stdout)
		require.Contains(t, stderr, "WITHOUT the lock")
	})

	t.Run("--fail-open does not run the command when the lock is held", func(t *testing.T) {
		t.Parallel()
		srv, dir := redistest.Start(t), t.TempDir()
		holdLock(t, srv.Client(t), "job")
		code, _, stderr := runCLI(t, serverEnv(srv, dir), "run", "--fail-open", "job", "--", "sh", "-c", script)
		require.Equal(t, defaultSkipCode, code, stderr)
		require.False(t, exists(filepath.Join(dir, "ran")))
	})

	t.Run("status fails with 69", func(t *testing.T) {
		t.Parallel()
		code, stdout, stderr := runCLI(t, env(down), "status", "job")
		require.Equal(t, exitUnavailable, code, stderr)
		require.Empty(t, stdout)
	})

	t.Run("status --json still prints one JSON object, with the error", func(t *testing.T) {
		t.Parallel()
		code, stdout, stderr := runCLI(t, env(down), "status", "--json", "job")
		require.Equal(t, exitUnavailable, code, stderr)
		var out map[string]any
		require.NoError(t, json.Unmarshal([]byte(stdout), &out), stdout)
		require.Equal(t, "job", out["name"])
		require.Equal(t, "lock:{job}", out["key"])
		require.Contains(t, out["error"], "connection refused")
		require.Equal(t, 1, strings.Count(stdout, "\n"), "one line: %q", stdout)
	})

	t.Run("break fails with 69", func(t *testing.T) {
		t.Parallel()
		code, stdout, stderr := runCLI(t, env(down), "break", "--yes", "job")
		require.Equal(t, exitUnavailable, code, stderr)
		require.Empty(t, stdout)
		require.Contains(t, stderr, "connection refused")
	})
}

func TestStatus(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	environ := serverEnv(srv, t.TempDir())

	t.Run("a free lock that never had a fence", func(t *testing.T) {
		code, stdout, stderr := runCLI(t, environ, "status", "free-job")
		require.Equal(t, 0, code, stderr)
		require.Equal(t, "name:     free-job\nkey:      lock:{free-job}\nheld:     no\nttl:      -\nholder:   -\nfence:    none\nwaiters:  0\n", stdout)

		code, stdout, stderr = runCLI(t, environ, "status", "--json", "free-job")
		require.Equal(t, 0, code, stderr)
		require.JSONEq(t, `{"name":"free-job","key":"lock:{free-job}","held":false,"ttl_ms":null,"metadata":null,"fence":null,"waiters":0,"kind":null,"count":0,"limit":null,"holders":null,"queue":[]}`, stdout)
	})

	t.Run("a held lock shows its remaining TTL and fence, never the token", func(t *testing.T) {
		held := holdLock(t, rdb, "held-job", redislock.WithFencing())
		lock := holdLock(t, rdb, "other-job", redislock.WithFencing()) // its counter is its own
		require.NoError(t, lock.Release(context.Background()))

		code, stdout, stderr := runCLI(t, environ, "status", "held-job")
		require.Equal(t, 0, code, stderr)
		m := regexp.MustCompile(`^name:     held-job\nkey:      lock:\{held-job\}\nheld:     yes\nttl:      (\S+)\nholder:   ` + idOf(held) + ` no metadata \(lease \S+\)\nfence:    ` + strconv.FormatInt(held.Fence(), 10) + `\nwaiters:  0\n$`).FindStringSubmatch(stdout)
		require.NotNil(t, m, stdout)
		ttl, err := time.ParseDuration(m[1])
		require.NoError(t, err)
		require.Greater(t, ttl, time.Duration(0))
		require.LessOrEqual(t, ttl, time.Minute)
		token, err := rdb.Get(context.Background(), "lock:{held-job}").Result()
		require.NoError(t, err)
		require.NotContains(t, stdout, token)

		code, stdout, stderr = runCLI(t, environ, "status", "--json", "held-job")
		require.Equal(t, 0, code, stderr)
		require.Regexp(t, `^\{"name":"held-job","key":"lock:\{held-job\}","held":true,"ttl_ms":\d+,"metadata":"","fence":`+strconv.FormatInt(held.Fence(), 10)+`,"waiters":0,"kind":"lock","count":1,"limit":null,"holders":\[\{"metadata":"","ttl_ms":\d+,"id":"`+idOf(held)+`"\}\],"queue":\[\]\}\n$`, stdout)

		code, stdout, stderr = runCLI(t, environ, "status", "other-job")
		require.Equal(t, 0, code, stderr)
		require.Contains(t, stdout, "held:     no\nttl:      -\nholder:   -\nfence:    "+strconv.FormatInt(lock.Fence(), 10)+"\n", "released, with its counter kept")
	})

	t.Run("a key without expiry is reported as such", func(t *testing.T) {
		require.NoError(t, rdb.Set(context.Background(), "lock:{stuck}", "x", 0).Err())
		code, stdout, stderr := runCLI(t, environ, "status", "stuck")
		require.Equal(t, 0, code, stderr)
		require.Contains(t, stdout, "held:     yes\nttl:      none (the key has no expiry)\n")
	})

	t.Run("a fence counter that is not a number is an error", func(t *testing.T) {
		require.NoError(t, rdb.Set(context.Background(), "lock:{garbled}:fence", "abc", 0).Err())
		code, stdout, stderr := runCLI(t, environ, "status", "garbled")
		require.Equal(t, exitNotALock, code)
		require.Empty(t, stdout)
		require.Contains(t, stderr, `the fence counter holds "abc", not a number`)
	})
}

func TestUsage(t *testing.T) {
	t.Parallel()
	environ := env("REDIS_URL=redis://127.0.0.1:1") // never reached: usage errors send nothing
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "Usage:"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"help", "frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"version", "extra"}, "version takes no arguments"},
		{[]string{"run"}, "missing NAME"},
		{[]string{"run", "job"}, "want NAME -- COMMAND"},
		{[]string{"run", "job", "true"}, "want NAME -- COMMAND"},
		{[]string{"run", "job", "--"}, "missing COMMAND"},
		{[]string{"run", "--nope", "job", "--", "true"}, "flag provided but not defined: --nope"},
		{[]string{"run", "--ttl", "soon", "job", "--", "true"}, `invalid value "soon" for flag --ttl`},
		{[]string{"run", "--redis", "127.0.0.1:6379", "job", "--", "true"}, "--redis must look like redis://host:port"},
		{[]string{"status", "--redis", "127.0.0.1:6379", "job"}, "--redis must look like redis://host:port"},
		{[]string{"status", "--json=maybe", "job"}, `invalid boolean value "maybe" for --json`},
		{[]string{"run", "--ttl", "0", "job", "--", "true"}, "--ttl 0s is below the 10ms minimum"},
		{[]string{"run", "--wait", "-1s", "job", "--", "true"}, "negative --wait"},
		{[]string{"run", "--grace", "-1s", "job", "--", "true"}, "negative --grace"},
		{[]string{"run", "--skip-exit-code", "256", "job", "--", "true"}, "not in 0-255"},
		{[]string{"run", "--skip-exit-code", "-1", "job", "--", "true"}, "not in 0-255"},
		{[]string{"run", "--redis", "ftp://127.0.0.1", "job", "--", "true"}, "invalid Redis URL"},
		{[]string{"run", "--redis-mode", "mesh", "job", "--", "true"}, `invalid --redis-mode "mesh"`},
		{[]string{"run", "--redis-mode", "sentinel", "job", "--", "true"}, "needs ?master_name="},
		{[]string{"run", "}job", "--", "true"}, "empty hash tag"},
		{[]string{"run", "", "--", "true"}, "empty lock name"},
		{[]string{"status"}, "want exactly one NAME"},
		{[]string{"status", "a", "b"}, "want exactly one NAME"},
		{[]string{"status", "--timeout", "0s", "job"}, "must be positive"},
		{[]string{"status", "}job"}, "empty hash tag"},
		{[]string{"doctor", "job"}, "doctor: takes no arguments"},
		{[]string{"doctor", "--ttl", "0s"}, "must be positive"},
		{[]string{"doctor", "--timeout", "-1s"}, "must be positive"},
		{[]string{"doctor", "--redis", "127.0.0.1:6379"}, "--redis must look like redis://host:port"},
		{[]string{"doctor", "--prefix", "{}"}, "empty hash tag"},
	} {
		t.Run(fmt.Sprintf("%q is a usage error", tc.args), func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := runCLI(t, environ, tc.args...)
			require.Equal(t, exitUsage, code, stderr)
			require.Empty(t, stdout)
			require.Contains(t, stderr, tc.want)
			require.Contains(t, stderr, "usage")
			if tc.args != nil { // no arguments at all prints the whole usage
				require.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)
			}
		})
	}

	t.Run("a bad URL's password is not echoed", func(t *testing.T) {
		t.Parallel()
		code, _, stderr := runCLI(t, environ, "run", "--redis", "redis://user:s3cret@[::1", "job", "--", "true")
		require.Equal(t, exitUsage, code, stderr)
		require.Contains(t, stderr, "invalid Redis URL")
		require.NotContains(t, stderr, "s3cret")
	})

	t.Run("help is printed on stdout with exit 0, exit codes included", func(t *testing.T) {
		t.Parallel()
		for _, args := range [][]string{{"help"}, {"--help"}, {"-h"}, {"help", "run"}, {"run", "--help"}, {"help", "status"}, {"status", "-h"}, {"help", "doctor"}, {"doctor", "--help"}} {
			code, stdout, stderr := runCLI(t, environ, args...)
			require.Equal(t, 0, code, "%q: %s", args, stderr)
			require.Empty(t, stderr, args)
			require.Contains(t, stdout, "Usage", args)
		}
		_, stdout, _ := runCLI(t, environ, "help", "run")
		for _, want := range []string{"-ttl", "-wait", "-fencing", "-fail-open", "-grace", "-skip-exit-code", "-prefix", "-redis", "75 skipped", "70 lock lost", "69 Redis"} {
			require.Contains(t, stdout, want)
		}
		_, stdout, _ = runCLI(t, environ, "help")
		require.Contains(t, stdout, "75     skipped")
	})

	t.Run("version prints the version", func(t *testing.T) {
		t.Parallel()
		code, stdout, stderr := runCLI(t, environ, "version")
		require.Equal(t, 0, code, stderr)
		require.Regexp(t, `^redislock (v\S+|\(devel: [^)]+\)) \(go\S+ \w+/\w+\)\n$`, stdout)
	})
}
