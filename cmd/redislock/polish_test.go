//go:build unix

package main

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redislock/redislock/internal/redistest"
)

func TestVersionString(t *testing.T) {
	t.Run("a release reports its module version and the Go that built it", func(t *testing.T) {
		info := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/redislock/redislock", Version: "v0.1.0"}}
		require.Regexp(t, `^redislock v0\.1\.0 \(go1\.26\.8 \w+/\w+\)$`, versionString(info, true))
	})
	t.Run("a build from a checkout reports its revision", func(t *testing.T) {
		info := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "true"},
		}}
		require.Regexp(t, `^redislock \(devel: built from revision 0123456789ab\+dirty\) \(go1\.26\.8 `, versionString(info, true))
	})
	t.Run("a build without version information says so", func(t *testing.T) {
		info := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}}
		require.Contains(t, versionString(info, true), "without version control information")
		require.Contains(t, versionString(nil, false), "unknown version")
	})
}

func TestErrorsAreOneLine(t *testing.T) {
	t.Run("joined errors are joined with semicolons", func(t *testing.T) {
		err := errors.Join(errors.New("redislock: not acquired"), errors.New("context deadline exceeded"))
		require.Equal(t, "redislock: not acquired; context deadline exceeded", line(err))
	})
	t.Run("package flag's -name is written --name", func(t *testing.T) {
		require.Equal(t, `invalid value "soon" for flag --ttl: parse error`, doubleDash(errors.New(`invalid value "soon" for flag -ttl: parse error`)))
		require.Equal(t, "flag provided but not defined: --nope", doubleDash(errors.New("flag provided but not defined: -nope")))
	})
}

// ourFlags are the flags of run, status, break and doctor.
var ourFlags = []string{"redis", "redis-mode", "prefix", "ttl", "wait", "grace", "fencing", "fail-open", "skip-exit-code", "verbose", "json", "timeout", "metadata", "yes"}

func TestOneFlagStyleInHelpAndDocs(t *testing.T) {
	t.Parallel()
	flagLine := regexp.MustCompile(`^  --[a-z-]+( [A-Z]+)?$`)
	for _, cmd := range []string{"run", "status", "break", "doctor"} {
		_, stdout, _ := runCLI(t, env(), "help", cmd)
		var flags int
		for _, l := range strings.Split(stdout, "\n") {
			if strings.HasPrefix(l, "  -") {
				require.Regexp(t, flagLine, l, "help %s: a flag is --name and an upper-case placeholder", cmd)
				flags++
			}
		}
		require.NotZero(t, flags, "help %s lists no flags:\n%s", cmd, stdout)
	}

	docs, err := os.ReadFile("../../docs/cli.md")
	require.NoError(t, err)
	singleDashFlag := regexp.MustCompile(`(^|[\s\x60"\[,])-(` + strings.Join(ourFlags, "|") + `)\b`)
	for i, l := range strings.Split(string(docs), "\n") {
		require.NotRegexp(t, singleDashFlag, l, "docs/cli.md:%d names a flag with one dash", i+1)
	}
	for _, f := range ourFlags {
		require.Contains(t, string(docs), "--"+f, "docs/cli.md does not document --%s", f)
	}
}

func TestARedisURLWithoutAScheme(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		environ []string
		args    []string
		want    string
	}{
		{"from REDIS_URL", env("REDIS_URL=127.0.0.1:6379"), []string{"run", "job", "--", "true"}, "REDIS_URL must look like redis://host:port"},
		{"from --redis", env("REDIS_URL=redis://127.0.0.1:1"), []string{"status", "--redis", "127.0.0.1:6379", "job"}, "--redis must look like redis://host:port"},
	} {
		t.Run("names where it came from: "+tc.name, func(t *testing.T) {
			code, _, stderr := runCLI(t, tc.environ, tc.args...)
			require.Equal(t, exitUsage, code, stderr)
			require.Contains(t, stderr, tc.want)
			require.NotContains(t, stderr, "first path segment")
			require.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)
		})
	}
}

func TestWaitSaysHowLongItWaited(t *testing.T) {
	t.Parallel()
	waited := regexp.MustCompile(`after waiting (\S+?)[ :]`)
	waitedAtLeast := func(t *testing.T, stderr string, wait time.Duration) {
		t.Helper()
		m := waited.FindStringSubmatch(stderr)
		require.NotNil(t, m, "no 'after waiting' in %q", stderr)
		d, err := time.ParseDuration(m[1])
		require.NoError(t, err)
		require.GreaterOrEqual(t, d, wait, "it reports the time it waited, at least --wait")
		require.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)
	}
	t.Run("a skip after waiting", func(t *testing.T) {
		t.Parallel()
		srv, dir := redistest.Start(t), t.TempDir()
		holdLock(t, srv.Client(t), "job")
		const wait = 300 * time.Millisecond
		code, _, stderr := runCLI(t, serverEnv(srv, dir), "run", "--wait", wait.String(), "job", "--", "true")
		require.Equal(t, defaultSkipCode, code, stderr)
		require.Contains(t, stderr, `"job" not acquired after waiting`)
		require.Contains(t, stderr, "(exit 75)")
		waitedAtLeast(t, stderr, wait)
	})
	t.Run("Redis unreachable until the wait ended: no holder is claimed, on one line", func(t *testing.T) {
		t.Parallel()
		code, _, stderr := runCLI(t, env("REDIS_URL=redis://127.0.0.1:1"), "run", "--wait", "200ms", "job", "--", "true")
		// go-redis redials with a backoff: the deadline usually comes
		// during the first attempt (a skip that shows the library's
		// reason), else the attempt fails first (fail closed).
		switch code {
		case defaultSkipCode:
			require.Contains(t, stderr, `"job" not acquired after waiting`)
		case exitUnavailable:
			require.Contains(t, stderr, "COMMAND was not run")
		default:
			t.Fatalf("exit %d: %s", code, stderr)
		}
		require.NotContains(t, stderr, "held by another holder")
		require.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)
	})
}

func TestStatusOfAKeyThatIsNotALock(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	environ := serverEnv(srv, t.TempDir())
	ctx := t.Context()
	require.NoError(t, rdb.HSet(ctx, "lock:{profile}", "field", "value").Err())
	require.NoError(t, rdb.RPush(ctx, "lock:{queue}:fence", "x").Err())
	for _, tc := range []struct{ name, want string }{
		{"profile", "lock:{profile} holds a hash, not a lock"},
		{"queue", "lock:{queue}:fence holds a list, not a fence counter"},
	} {
		t.Run(fmt.Sprintf("%s: %s", tc.name, tc.want), func(t *testing.T) {
			code, stdout, stderr := runCLI(t, environ, "status", tc.name)
			require.Equal(t, exitNotALock, code, stderr)
			require.Empty(t, stdout)
			require.Contains(t, stderr, tc.want)
			require.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)
		})
	}
}
