//go:build unix

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/internal/redistest"
)

// runCLIWithInput runs redislock with stdin, and returns its exit code and
// output.
func runCLIWithInput(t *testing.T, environ []string, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := exec.Command(binary, args...)
	cmd.Env, cmd.Stdin, cmd.Stdout, cmd.Stderr = environ, strings.NewReader(stdin), &out, &errOut
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	cmd.WaitDelay = testTimeout
	err := cmd.Start()
	require.NoError(t, err)
	go func() { <-ctx.Done(); _ = cmd.Process.Kill() }()
	err = cmd.Wait()
	requireOnePrefix(t, errOut.String())
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode(), out.String(), errOut.String()
	}
	require.NoError(t, err)
	return 0, out.String(), errOut.String()
}

func TestRunStoresWhoHoldsTheLock(t *testing.T) {
	t.Parallel()
	srv, dir := redistest.Start(t), t.TempDir()
	environ := serverEnv(srv, dir)
	host, err := os.Hostname()
	require.NoError(t, err)

	t.Run("by default: host, pid and command", func(t *testing.T) {
		p := startCLI(t, environ, "run", "job", "--", "sh", "-c", untilStopped)
		eventually(t, "the command to start", func() bool { return exists(filepath.Join(dir, "started")) })
		code, stdout, stderr := runCLI(t, environ, "status", "job")
		require.Equal(t, 0, code, stderr)
		require.Regexp(t, fmt.Sprintf(`\nholder:   [0-9a-f]{16} host=%s pid=%d cmd=sh \(lease \S+\)\n`, regexp.QuoteMeta(host), p.cmd.Process.Pid), stdout)
		require.NoError(t, os.WriteFile(filepath.Join(dir, "stop"), nil, 0o644))
		require.Equal(t, 0, p.wait(t), p.Stderr(t))
		require.NoError(t, os.Remove(filepath.Join(dir, "stop")))
		require.NoError(t, os.Remove(filepath.Join(dir, "started")))
	})

	t.Run("--metadata sets it; empty sets none", func(t *testing.T) {
		for metadata, want := range map[string]string{"ticket=OPS-12": "ticket=OPS-12", "": "no metadata"} {
			p := startCLI(t, environ, "run", "--metadata", metadata, "job", "--", "sh", "-c", untilStopped)
			eventually(t, "the command to start", func() bool { return exists(filepath.Join(dir, "started")) })
			code, stdout, stderr := runCLI(t, environ, "status", "--json", "job")
			require.Equal(t, 0, code, stderr)
			require.Contains(t, stdout, `"metadata":"`+strings.TrimPrefix(want, "no metadata")+`"`)
			code, stdout, stderr = runCLI(t, environ, "status", "job")
			require.Equal(t, 0, code, stderr)
			require.Regexp(t, `\nholder:   [0-9a-f]{16} `+want+` \(lease \S+\)\n`, stdout)
			require.NoError(t, os.WriteFile(filepath.Join(dir, "stop"), nil, 0o644))
			require.Equal(t, 0, p.wait(t), p.Stderr(t))
			require.NoError(t, os.Remove(filepath.Join(dir, "stop")))
			require.NoError(t, os.Remove(filepath.Join(dir, "started")))
		}
	})

	t.Run("metadata the library refuses is a usage error", func(t *testing.T) {
		code, _, stderr := runCLI(t, environ, "run", "--metadata", "two\nlines", "job", "--", "true")
		require.Equal(t, exitUsage, code, stderr)
		require.Contains(t, stderr, "control character")
	})
}

func TestBreakCommand(t *testing.T) {
	t.Parallel()
	srv, dir := redistest.Start(t), t.TempDir()
	rdb := srv.Client(t)
	environ := serverEnv(srv, dir)
	ctx := context.Background()

	t.Run("a free lock: nothing to break", func(t *testing.T) {
		code, stdout, stderr := runCLIWithInput(t, environ, "", "break", "free")
		require.Equal(t, 0, code, stderr)
		require.Contains(t, stdout, `"free" is not held: nothing to break`)
	})

	t.Run("asks first, and breaks only on yes", func(t *testing.T) {
		held := holdLock(t, rdb, "stuck", redislock.WithMetadata("host=web-9 pid=77"), redislock.WithFencing())
		for _, answer := range []string{"", "n\n", "no\n", "yes please\n"} {
			code, stdout, stderr := runCLIWithInput(t, environ, answer, "break", "stuck")
			require.Equal(t, exitDeclined, code, "answer %q: %s", answer, stderr)
			require.Regexp(t, `\nholder:   [0-9a-f]{16} host=web-9 pid=77 \(lease \S+\)\n`, stdout)
			require.Contains(t, stdout, "fence:    "+strconv.FormatInt(held.Fence(), 10)+"\n")
			require.Contains(t, stderr, `Break "stuck"?`)
			require.Contains(t, stderr, `"stuck" not broken`)
			require.True(t, keyExists(t, rdb, "lock:{stuck}"), "answer %q", answer)
		}
		code, stdout, stderr := runCLIWithInput(t, environ, "Y\n", "break", "stuck")
		require.Equal(t, 0, code, stderr)
		require.Contains(t, stdout, `broke "stuck", held by host=web-9 pid=77`)
		require.Regexp(t, `level=WARN msg="redislock: lock broken" name=stuck holder=[0-9a-f]{16} metadata="host=web-9 pid=77"`, stderr)
		require.NotContains(t, stdout+stderr, held.Token())
		require.False(t, keyExists(t, rdb, "lock:{stuck}"))
		require.ErrorIs(t, held.Release(ctx), redislock.ErrNotHeld)
	})

	t.Run("--yes breaks without asking; the holder's run is told and exits 70", func(t *testing.T) {
		p := startCLI(t, environ, "run", "--ttl", "2s", "--grace", "5s", "--metadata", "job=report", "report", "--", "sh", "-c", untilStopped)
		eventually(t, "the command to start", func() bool { return exists(filepath.Join(dir, "started")) })
		code, stdout, stderr := runCLIWithInput(t, environ, "", "break", "--yes", "report")
		require.Equal(t, 0, code, stderr)
		require.Regexp(t, `\nholder:   [0-9a-f]{16} job=report \(lease \S+\)\n`, stdout)
		require.Contains(t, stdout, `broke "report", held by job=report`)
		require.NotContains(t, stderr, "[y/N]")
		require.Equal(t, exitLost, p.wait(t), p.Stderr(t))
		require.Contains(t, p.Stderr(t), "expired")
	})

	t.Run("a key of another type is left alone", func(t *testing.T) {
		require.NoError(t, rdb.HSet(ctx, "lock:{profile}", "f", "v").Err())
		code, stdout, stderr := runCLIWithInput(t, environ, "", "break", "--yes", "profile")
		require.Equal(t, exitNotALock, code, stderr)
		require.Empty(t, stdout)
		require.Contains(t, stderr, "lock:{profile} holds a hash, not a lock")
		require.True(t, keyExists(t, rdb, "lock:{profile}"))
	})

	t.Run("status shows the waiters queued", func(t *testing.T) {
		holdLock(t, rdb, "busy")
		waitCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		waiting := make(chan error, 1)
		go func() {
			_, err := quietLocker(rdb).Acquire(waitCtx, "busy", redislock.WithRetry(redislock.LinearBackoff(50*time.Millisecond)))
			waiting <- err
		}()
		eventually(t, "a waiter in the queue", func() bool {
			_, stdout, _ := runCLI(t, environ, "status", "busy")
			return strings.Contains(stdout, "waiters:  1\n")
		})
		cancel()
		require.ErrorIs(t, <-waiting, context.Canceled)
	})
}
