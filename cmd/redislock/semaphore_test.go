//go:build unix

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/redislock/redislock/internal/redistest"
)

func TestRunLimit(t *testing.T) {
	t.Parallel()

	t.Run("--limit 2: two copies run, a third skips, another limit is a usage error", func(t *testing.T) {
		t.Parallel()
		srv, dir := redistest.Start(t), t.TempDir()
		environ := serverEnv(srv, dir)
		first := startCLI(t, environ, "run", "--limit", "2", "job", "--", "sh", "-c", untilStopped)
		second := startCLI(t, environ, "run", "--limit", "2", "job", "--", "sh", "-c", untilStopped)
		started := filepath.Join(dir, "started")
		eventually(t, "both copies to start", func() bool {
			data, _ := os.ReadFile(started)
			return strings.Count(string(data), "\n") == 2
		})

		code, _, stderr := runCLI(t, environ, "run", "--limit", "2", "job", "--", "sh", "-c", untilStopped)
		require.Equal(t, defaultSkipCode, code, stderr)
		require.Contains(t, stderr, `"job" has all 2 slots held: skipped (exit 75)`)

		code, _, stderr = runCLI(t, environ, "run", "--limit", "3", "job", "--", "true")
		require.Equal(t, 64, code, stderr)
		require.Contains(t, stderr, "asked with limit 3, its holders use 2")

		require.NoError(t, os.WriteFile(filepath.Join(dir, "stop"), nil, 0o644))
		require.Equal(t, 0, first.wait(t), first.Stderr(t))
		require.Equal(t, 0, second.wait(t), second.Stderr(t))
		require.Equal(t, 2, strings.Count(readFile(t, started), "\n"), "exactly two copies ran")
		require.False(t, keyExists(t, srv.Client(t), "lock:{job}"), "every slot is released after the commands")
	})

	t.Run("a bad --limit is a usage error", func(t *testing.T) {
		t.Parallel()
		for _, limit := range []string{"0", "-1", "100001", "two"} {
			code, _, stderr := runCLI(t, env(), "run", "--limit", limit, "job", "--", "true")
			require.Equal(t, 64, code, "--limit %s: %s", limit, stderr)
			require.Contains(t, stderr, "limit", "--limit %s", limit)
		}
	})
}
