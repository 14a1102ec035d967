//go:build unix

package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/internal/redistest"
)

// Operators type flags where kubectl, etcdctl and git take them: anywhere
// before "--". What follows "--" is the command's, flags included.
func TestFlagsGoAnywhereBeforeTheDoubleDash(t *testing.T) {
	t.Parallel()
	srv, dir := redistest.Start(t), t.TempDir()
	rdb := srv.Client(t)
	environ := serverEnv(srv, dir)
	ctx := context.Background()

	t.Run("run NAME --ttl 3s --fencing -- COMMAND", func(t *testing.T) {
		p := startCLI(t, environ, "run", "job", "--ttl", "3s", "--fencing", "--", "sh", "-c", `echo "$REDISLOCK_FENCE" > "$D/fence"; `+untilStopped)
		eventually(t, "the command to start", func() bool { return exists(filepath.Join(dir, "started")) })
		ttl, err := rdb.PTTL(ctx, "lock:{job}").Result()
		require.NoError(t, err)
		require.Greater(t, ttl, time.Duration(0))
		require.LessOrEqual(t, ttl, 3*time.Second, "--ttl after NAME counts")
		require.NotEqual(t, "\n", readFile(t, filepath.Join(dir, "fence")), "--fencing after NAME counts")

		code, stdout, stderr := runCLI(t, environ, "status", "job", "--json")
		require.Equal(t, 0, code, stderr)
		var st map[string]any
		require.NoError(t, json.Unmarshal([]byte(stdout), &st), stdout)
		require.Equal(t, true, st["held"])

		code, stdout, stderr = runCLIWithInput(t, environ, "", "break", "job", "--yes")
		require.Equal(t, 0, code, stderr)
		require.Contains(t, stdout, `broke "job"`)
		require.NotContains(t, stderr, "[y/N]", "--yes after NAME counts")
		require.Equal(t, exitLost, p.wait(t), p.Stderr(t))
		require.NoError(t, os.Remove(filepath.Join(dir, "started")))
	})

	t.Run("flags after -- are the command's", func(t *testing.T) {
		dir := t.TempDir()
		p := startCLI(t, serverEnv(srv, dir), "run", "--fencing", "args", "--", "sh", "-c", `echo "$*" > "$D/args"; `+untilStopped, "sh", "--ttl", "3s", "--yes")
		eventually(t, "the command to start", func() bool { return exists(filepath.Join(dir, "started")) })
		require.Equal(t, "--ttl 3s --yes\n", readFile(t, filepath.Join(dir, "args")))
		ttl, err := rdb.PTTL(ctx, "lock:{args}").Result()
		require.NoError(t, err)
		require.Greater(t, ttl, 3*time.Second, "the default TTL (30s), not the command's --ttl 3s")
		require.NoError(t, os.WriteFile(filepath.Join(dir, "stop"), nil, 0o644))
		require.Equal(t, 0, p.wait(t), p.Stderr(t))
	})

	t.Run("a status or break NAME that starts with a dash goes after --", func(t *testing.T) {
		holdLock(t, rdb, "-odd")
		code, stdout, stderr := runCLI(t, environ, "status", "--json", "--", "-odd")
		require.Equal(t, 0, code, stderr)
		require.Contains(t, stdout, `"name":"-odd"`)
		require.Contains(t, stdout, `"held":true`)
	})

	t.Run("still usage errors", func(t *testing.T) {
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"run", "job", "--ttl", "3s"}, "want NAME -- COMMAND"},
			{[]string{"run", "job", "true", "--", "true"}, "want one NAME before --, got 2"},
			{[]string{"run", "job", "--ttl"}, "flag needs an argument: --ttl"},
			{[]string{"run", "job", "--nope", "--", "true"}, "flag provided but not defined: --nope"},
			{[]string{"status", "job", "--nope"}, "flag provided but not defined: --nope"},
			{[]string{"status", "a", "--json", "b"}, "want exactly one NAME, got 2"},
			{[]string{"break", "job", "--yes", "other"}, "want exactly one NAME, got 2"},
		} {
			code, stdout, stderr := runCLI(t, env("REDIS_URL=redis://127.0.0.1:1"), tc.args...)
			require.Equal(t, exitUsage, code, "%q: %s", tc.args, stderr)
			require.Empty(t, stdout)
			require.Contains(t, stderr, tc.want, tc.args)
			require.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)
		}
	})
}

// A TTL is said the same way by the command and the library: a number
// without a unit is a mistake to point out, and the bounds are the
// library's, in its words.
func TestTTLMessages(t *testing.T) {
	t.Parallel()
	environ := env("REDIS_URL=redis://127.0.0.1:1") // never reached
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--ttl", "30", "job", "--", "true"}, `invalid value "30" for flag --ttl: missing a unit, as in 30s`},
		{[]string{"run", "job", "--wait", "5", "--", "true"}, `invalid value "5" for flag --wait: missing a unit, as in 5s`},
		{[]string{"status", "--timeout", "2.5", "job"}, `invalid value "2.5" for flag --timeout: missing a unit, as in 2.5s`},
		{[]string{"doctor", "--ttl", "30"}, `invalid value "30" for flag --ttl: missing a unit, as in 30s`},
		{[]string{"run", "--ttl", "0", "job", "--", "true"}, "--ttl 0s is below the 10ms minimum"},
		{[]string{"run", "--ttl", "1ms", "job", "--", "true"}, "--ttl 1ms is below the 10ms minimum"},
		{[]string{"run", "--ttl", "25h", "job", "--", "true"}, "--ttl 25h is above the 24h maximum"},
	} {
		code, stdout, stderr := runCLI(t, environ, tc.args...)
		require.Equal(t, exitUsage, code, "%q: %s", tc.args, stderr)
		require.Empty(t, stdout)
		require.Contains(t, stderr, tc.want, tc.args)
		require.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)
	}
	require.Equal(t, "is below the 10ms minimum", "is below the "+redislock.MinTTL.String()+" minimum", "the library's minimum")
}
