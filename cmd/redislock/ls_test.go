//go:build unix

package main

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/internal/redistest"
)

// lsHoldEveryKind holds a lock of each kind on rdb's deployment, and a
// name with a fence counter alone; it returns ls's lines for them (the
// columns that do not move), by name.
func lsHoldEveryKind(t *testing.T, c *redislock.Client) []string {
	t.Helper()
	ctx := context.Background()
	hold := func(l *redislock.Lock, err error) *redislock.Lock {
		t.Helper()
		require.NoError(t, err)
		t.Cleanup(func() { _ = l.Release(context.Background()) })
		return l
	}
	hold(c.Acquire(ctx, "report", redislock.WithFencing()))
	hold(c.Acquire(ctx, "a*b"))
	hold(c.AcquireShared(ctx, "prices"))
	hold(c.AcquireShared(ctx, "prices"))
	hold(c.AcquireSemaphore(ctx, "uploads", 3))
	l := hold(c.Acquire(ctx, "fenced", redislock.WithFencing()))
	require.NoError(t, l.Release(ctx))
	return []string{"a*b lock 1", "prices shared 2", "report lock 1", "uploads semaphore 1/3"}
}

// lsRows returns ls's text rows without the header, each as its first
// three columns, and checks the header and the other columns' form.
func lsRows(t *testing.T, stdout string) []string {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	require.Regexp(t, `^NAME +KIND +HOLDERS +LEASE +FENCE +WAITERS +LONGEST WAIT$`, lines[0])
	var rows []string
	for _, line := range lines[1:] {
		f := strings.Fields(line)
		require.Len(t, f, 7, line)
		lease, err := time.ParseDuration(f[3])
		require.NoError(t, err, line)
		require.Positive(t, lease)
		require.Regexp(t, `^(-|\d+)$`, f[4])
		require.Equal(t, "0", f[5], "nobody waits")
		require.Equal(t, "-", f[6], "nobody waits")
		rows = append(rows, strings.Join(f[:3], " "))
	}
	return rows
}

func TestLs(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	environ := serverEnv(srv, t.TempDir())
	want := lsHoldEveryKind(t, quietLocker(srv.Client(t)))

	t.Run("one line per lock held, by name; a fence counter alone is no lock", func(t *testing.T) {
		code, stdout, stderr := runCLI(t, environ, "ls")
		require.Equal(t, 0, code, stderr)
		require.Equal(t, want, lsRows(t, stdout))
		require.Regexp(t, `\nreport +lock +1 +\S+ +\d+ `, stdout, "its fence")
	})

	t.Run("PREFIX is literal", func(t *testing.T) {
		for prefix, rows := range map[string][]string{"a*": {"a*b lock 1"}, "*": nil, "up": {"uploads semaphore 1/3"}, "nothing": nil} {
			code, stdout, stderr := runCLI(t, environ, "ls", prefix)
			require.Equal(t, 0, code, stderr)
			require.Equal(t, rows, lsRows(t, stdout), "prefix %q", prefix)
		}
	})

	t.Run("--json prints the Info objects", func(t *testing.T) {
		code, stdout, stderr := runCLI(t, environ, "ls", "--json")
		require.Equal(t, 0, code, stderr)
		var infos []redislock.Info
		require.NoError(t, json.Unmarshal([]byte(stdout), &infos), stdout)
		var names []string
		for _, info := range infos {
			names = append(names, info.Name)
			require.True(t, info.Held)
			require.NotEmpty(t, info.Holders)
			require.Len(t, info.Holders[0].ID, 16)
		}
		require.Equal(t, []string{"a*b", "prices", "report", "uploads"}, names)
		require.Equal(t, 3, infos[3].Limit)
		code, stdout, stderr = runCLI(t, environ, "ls", "--json", "nothing")
		require.Equal(t, 0, code, stderr)
		require.Equal(t, "[]\n", stdout)
	})

	t.Run("--watch draws again until SIGINT, then exits 0", func(t *testing.T) {
		p := startCLI(t, environ, "ls", "--watch", "--json", "up")
		// Each draw is one line: wait for two (a second apart), however loaded.
		eventually(t, "two draws", func() bool { return strings.Count(p.Stdout(t), "\n") >= 2 })
		require.NoError(t, p.cmd.Process.Signal(syscall.SIGINT))
		require.Equal(t, 0, p.wait(t), p.Stderr(t))
		for _, line := range strings.Split(strings.TrimSuffix(p.Stdout(t), "\n"), "\n") {
			var infos []redislock.Info
			require.NoError(t, json.Unmarshal([]byte(line), &infos), line)
			require.Len(t, infos, 1)
		}
	})

	t.Run("usage errors and a dead Redis", func(t *testing.T) {
		code, _, stderr := runCLI(t, environ, "ls", "a", "b")
		require.Equal(t, exitUsage, code)
		require.Contains(t, stderr, "at most one PREFIX")
		code, _, stderr = runCLI(t, environ, "ls", "}")
		require.Equal(t, exitUsage, code)
		require.Contains(t, stderr, "no lock name starts with '}'")
		code, _, stderr = runCLI(t, env("REDIS_URL=redis://127.0.0.1:"+strconv.Itoa(redistest.FreePort(t))), "ls")
		require.Equal(t, exitUnavailable, code, stderr)
		require.Contains(t, stderr, "connection refused")
	})
}

// ls finds the locks on every primary of a Cluster, each once.
func TestLsOnACluster(t *testing.T) {
	if testing.Short() {
		t.Skip("a Cluster of 6 servers; run without -short")
	}
	t.Parallel()
	cluster := redistest.StartCluster(t)
	cluster.WaitHealthy(t)
	want := lsHoldEveryKind(t, quietLocker(cluster.Client(t)))
	code, stdout, stderr := runCLI(t, env("REDIS_URL=redis://"+cluster.Nodes[0].Addr()), "ls", "--redis-mode", "cluster")
	require.Equal(t, 0, code, stderr)
	require.Equal(t, want, lsRows(t, stdout))
}

func TestLsLineAndRedraw(t *testing.T) {
	t.Run("the longest wait is the first waiter's", func(t *testing.T) {
		info := redislock.Info{Name: "job", Held: true, Kind: "lock", Count: 1, TTL: 1500 * time.Millisecond, Waiters: 2,
			Queue: []redislock.WaiterInfo{{Waited: 2500 * time.Millisecond}, {Waited: time.Second}}}
		require.Equal(t, "job\tlock\t1\t1.5s\t-\t2\t2.5s", lsLine(info))
		info.TTL, info.Fence, info.Queue = -1, 7, nil
		require.Equal(t, "job\tlock\t1\tnone\t7\t2\t-", lsLine(info), "waiters of another Client's Inspect: no Queue")
	})
	t.Run("redraw draws at once, then every interval, until ctx ends", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		draws := 0
		redraw(ctx, time.Millisecond, func() {
			if draws++; draws == 3 {
				cancel()
			}
		})
		require.Equal(t, 3, draws)
	})
}
