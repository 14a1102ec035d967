//go:build unix

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/internal/redistest"
)

// doctorChecks are the checks doctor reports, in its order.
var doctorChecks = []string{"server", "eviction", "persistence", "replication", "latency", "clock", "permissions"}

// runDoctor runs doctor --json with the environment and extra arguments,
// and returns its exit code and its checks by name.
func runDoctor(t *testing.T, environ []string, args ...string) (int, map[string]check) {
	t.Helper()
	code, stdout, stderr := runCLI(t, environ, append([]string{"doctor", "--json"}, args...)...)
	require.Empty(t, stderr)
	var checks []check
	require.NoError(t, json.Unmarshal([]byte(stdout), &checks), stdout)
	byName := map[string]check{}
	var names []string
	for _, c := range checks {
		names = append(names, c.Check)
		require.Contains(t, []string{statusOK, statusRisk, statusBroken, statusUnknown}, c.Status, c)
		require.NotContains(t, c.Detail, "\n", c)
		byName[c.Check] = c
	}
	require.Equal(t, doctorChecks, names, "every check, once, in order")
	return code, byName
}

// urlEnv points redislock at srv as user (with password pw), or as the
// default user when user is "".
func urlEnv(srv *redistest.Server, user string) []string {
	if user == "" {
		return env("REDIS_URL=redis://" + srv.Addr())
	}
	return env("REDIS_URL=redis://" + user + ":pw@" + srv.Addr())
}

// addUser creates user (password pw) with the ACL rules.
func addUser(t *testing.T, srv *redistest.Server, user string, rules ...string) {
	t.Helper()
	args := []any{"ACL", "SETUSER", user, "on", ">pw"}
	for _, r := range rules {
		args = append(args, r)
	}
	require.NoError(t, srv.Client(t).Do(context.Background(), args...).Err())
}

// minimalACL is the smallest user of docs/security.md, with the optional
// queue and wake-up commands.
var minimalACL = strings.Fields("resetkeys ~lock:* resetchannels &lock:* -@all +evalsha +eval +set +get +pexpire +pttl +del +incr +type" +
	" +zcard +zadd +zrange +zrem +zscore +time +publish +subscribe +unsubscribe +zrank +zrangebyscore +zremrangebyscore")

// without returns rules without the rule drop.
func without(rules []string, drop string) []string {
	var out []string
	for _, r := range rules {
		if r != drop {
			out = append(out, r)
		}
	}
	return out
}

// dbsize returns the number of keys on srv.
func dbsize(t *testing.T, srv *redistest.Server) int64 {
	t.Helper()
	n, err := srv.Client(t).DBSize(context.Background()).Result()
	require.NoError(t, err)
	return n
}

func TestDoctor(t *testing.T) {
	t.Parallel()

	t.Run("a good setup has nothing broken and exits 0", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t, "--appendonly", "yes", "--appendfsync", "always", "--maxmemory-policy", "noeviction")
		code, checks := runDoctor(t, urlEnv(srv, ""))
		require.Equal(t, 0, code, checks)
		for _, name := range doctorChecks {
			require.Equal(t, statusOK, checks[name].Status, checks[name])
		}
		require.Regexp(t, `^Redis \d+\.\d+\.\d+, standalone primary$`, checks["server"].Detail)
		require.Contains(t, checks["eviction"].Detail, "maxmemory-policy noeviction with maxmemory 0 (no limit)")
		require.Contains(t, checks["persistence"].Detail, "appendfsync always")
		require.Contains(t, checks["permissions"].Detail, "user default may run every command")
		require.Zero(t, dbsize(t, srv), "doctor leaves no key behind")
	})

	t.Run("allkeys-lru under a memory limit is broken: it evicts fence counters", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t, "--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru")
		code, checks := runDoctor(t, urlEnv(srv, ""))
		require.Equal(t, exitBroken, code)
		require.Equal(t, statusBroken, checks["eviction"].Status, checks["eviction"])
		require.Contains(t, checks["eviction"].Detail, "maxmemory-policy allkeys-lru with maxmemory 67108864 bytes")
		require.Contains(t, checks["eviction"].Detail, "a second holder takes a held lock")
		require.NotContains(t, checks["eviction"].Detail, "go backwards", "fences are raised to the server clock: an evicted counter does not repeat them")
		require.Contains(t, checks["eviction"].Detail, "set noeviction")
	})

	t.Run("a volatile policy under a memory limit is a risk: it evicts lock keys", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t, "--maxmemory", "64mb", "--maxmemory-policy", "volatile-ttl")
		code, checks := runDoctor(t, urlEnv(srv, ""))
		require.Equal(t, 0, code, "a risk is not broken")
		require.Equal(t, statusRisk, checks["eviction"].Status, checks["eviction"])
		require.Contains(t, checks["eviction"].Detail, "evicts lock keys, which carry a TTL")
	})

	t.Run("allkeys-lru without a memory limit evicts nothing yet: a risk that says maxmemory is 0", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t, "--maxmemory", "0", "--maxmemory-policy", "allkeys-lru")
		code, checks := runDoctor(t, urlEnv(srv, ""))
		require.Equal(t, 0, code)
		require.Equal(t, statusRisk, checks["eviction"].Status, checks["eviction"])
		require.Contains(t, checks["eviction"].Detail, "maxmemory 0 (no limit)")
		require.Contains(t, checks["eviction"].Detail, "fence counters")
	})

	for _, tc := range []struct {
		name   string
		config []string
		status string
		want   string
	}{
		{"no persistence is a risk: a restart forgets locks and fences", nil, statusRisk, `none (appendonly no, save "")`},
		{"RDB snapshots alone are a risk: a restart restores an older counter", []string{"--save", "3600 1"}, statusRisk, `RDB snapshots only (save "3600 1")`},
		{"AOF with everysec is a risk: up to 1 s lost", []string{"--appendonly", "yes", "--appendfsync", "everysec"}, statusRisk, "loses up to 1 s"},
		{"AOF with fsync left to the OS is a risk", []string{"--appendonly", "yes", "--appendfsync", "no"}, statusRisk, "AOF with appendfsync no"},
		{"AOF with always is ok, with or without snapshots", []string{"--appendonly", "yes", "--appendfsync", "always", "--save", "60 1"}, statusOK, "AOF with appendfsync always"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t, tc.config...)
			code, checks := runDoctor(t, urlEnv(srv, ""))
			require.Equal(t, 0, code, "persistence is never broken")
			require.Equal(t, tc.status, checks["persistence"].Status, checks["persistence"])
			require.Contains(t, checks["persistence"].Detail, tc.want)
			// Fences are raised to the server clock: a lost or older
			// counter does not repeat them (docs/running-redis.md).
			for _, wrong := range []string{"restart at 1", "fences again", "handed out again"} {
				require.NotContains(t, checks["persistence"].Detail, wrong)
			}
		})
	}

	t.Run("a restricted user without EVALSHA is broken; what it may not read is unknown, not broken", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t)
		addUser(t, srv, "locker", without(minimalACL, "+evalsha")...)
		code, checks := runDoctor(t, urlEnv(srv, "locker"))
		require.Equal(t, exitBroken, code)
		perms := checks["permissions"]
		require.Equal(t, statusBroken, perms.Status, perms)
		require.Regexp(t, `^the current user lacks evalsha: locks fail with NOPERM \(checked with a probe on lock:\{redislock-doctor-\w+\}, deleted afterwards\)$`, perms.Detail)
		for _, name := range []string{"server", "eviction", "persistence", "replication"} {
			require.Equal(t, statusUnknown, checks[name].Status, checks[name])
			require.Contains(t, checks[name].Detail, "unknown (no permission:", checks[name])
		}
		require.Equal(t, statusOK, checks["clock"].Status, "TIME is granted (the queue needs it)")
		require.Zero(t, dbsize(t, srv), "the probe deletes its scratch key")
	})

	t.Run("the smallest user of docs/security.md passes the probe", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t)
		addUser(t, srv, "locker", minimalACL...)
		code, checks := runDoctor(t, urlEnv(srv, "locker"))
		require.Equal(t, 0, code, checks)
		require.Equal(t, statusOK, checks["permissions"].Status, checks["permissions"])
		require.Contains(t, checks["permissions"].Detail, "checked with a probe")
		require.Zero(t, dbsize(t, srv))
	})

	t.Run("a user without the optional commands is a risk, named", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t)
		addUser(t, srv, "locker", without(without(minimalACL, "+publish"), "+zcard")...)
		code, checks := runDoctor(t, urlEnv(srv, "locker"))
		require.Equal(t, 0, code, checks)
		perms := checks["permissions"]
		require.Equal(t, statusRisk, perms.Status, perms)
		require.Contains(t, perms.Detail, "lacks the optional zcard, publish")
		require.Contains(t, perms.Detail, "grant zadd, zrem, zrange, zscore, zcard together")
		require.Contains(t, perms.Detail, "not woken")
		require.Zero(t, dbsize(t, srv))
	})

	t.Run("a user that may run ACL DRYRUN is checked without touching a key", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t)
		addUser(t, srv, "auditor", append(without(minimalACL, "+evalsha"), "+acl|dryrun", "+acl|whoami", "+info", "+config|get")...)
		monitor := srv.Client(t)
		before, err := monitor.Info(context.Background(), "commandstats").Result()
		require.NoError(t, err)
		require.NotContains(t, before, "cmdstat_set:")

		code, checks := runDoctor(t, urlEnv(srv, "auditor"))
		require.Equal(t, exitBroken, code)
		require.Equal(t, "user auditor lacks evalsha: locks fail with NOPERM (checked with ACL DRYRUN)", checks["permissions"].Detail)
		require.Equal(t, statusOK, checks["eviction"].Status, "CONFIG GET granted: the config checks run")
		after, err := monitor.Info(context.Background(), "commandstats").Result()
		require.NoError(t, err)
		require.NotContains(t, after, "cmdstat_set:", "no probe was sent")
	})

	t.Run("replicas without WithReplicaAck are a risk; a replica itself is broken", func(t *testing.T) {
		t.Parallel()
		primary := redistest.Start(t)
		replica := redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(primary.Port()))
		eventually(t, "the replica to connect", func() bool {
			info, err := primary.Client(t).Info(context.Background(), "replication").Result()
			return err == nil && strings.Contains(info, "connected_slaves:1")
		})

		code, checks := runDoctor(t, urlEnv(primary, ""))
		require.Equal(t, 0, code, checks)
		require.Equal(t, statusRisk, checks["replication"].Status, checks["replication"])
		require.Contains(t, checks["replication"].Detail, "1 connected replica(s), min-replicas-to-write 0")
		require.Contains(t, checks["replication"].Detail, "WithReplicaAck")

		code, checks = runDoctor(t, urlEnv(replica, ""))
		require.Equal(t, exitBroken, code)
		require.Equal(t, "Redis "+serverVersion(t, replica)+", standalone replica", checks["server"].Detail)
		require.Equal(t, statusBroken, checks["replication"].Status, checks["replication"])
		require.Contains(t, checks["replication"].Detail, "a replica of 127.0.0.1:"+strconv.Itoa(primary.Port()))
	})

	t.Run("latency is broken when its p99 reaches a third of the TTL", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t)
		_, checks := runDoctor(t, urlEnv(srv, ""))
		m := regexp.MustCompile(`^p50 (\S+), p99 (\S+) over 100 PINGs; p99 is \S+% of the 30s TTL$`).FindStringSubmatch(checks["latency"].Detail)
		require.NotNil(t, m, checks["latency"].Detail)
		p50, err := time.ParseDuration(m[1])
		require.NoError(t, err)
		p99, err := time.ParseDuration(m[2])
		require.NoError(t, err)
		require.LessOrEqual(t, p50, p99)

		// No real round trip is below 3µs: a 9µs TTL puts any p99 over TTL/3.
		code, checks := runDoctor(t, urlEnv(srv, ""), "--ttl", "9us")
		require.Equal(t, exitBroken, code)
		require.Equal(t, statusBroken, checks["latency"].Status, checks["latency"])
		require.Contains(t, checks["latency"].Detail, "of the 9µs TTL: above the extension interval")
	})

	t.Run("unreachable Redis exits 69 with one line and no report", func(t *testing.T) {
		t.Parallel()
		down := "REDIS_URL=redis://127.0.0.1:" + strconv.Itoa(redistest.FreePort(t))
		for _, args := range [][]string{{"doctor"}, {"doctor", "--json"}} {
			code, stdout, stderr := runCLI(t, env(down), args...)
			require.Equal(t, exitUnavailable, code, stderr)
			require.Empty(t, stdout)
			require.Contains(t, stderr, "redislock: doctor: Redis cannot be reached: ")
			require.Contains(t, stderr, "connection refused")
			require.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)
		}
	})

	t.Run("a wrong password exits 69 and says Redis refused", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t, "--requirepass", "right")
		code, stdout, stderr := runCLI(t, env("REDIS_URL=redis://:wrong@"+srv.Addr()), "doctor")
		require.Equal(t, exitUnavailable, code, stderr)
		require.Empty(t, stdout)
		require.Contains(t, stderr, "redislock: doctor: Redis refused the connection: WRONGPASS")
		require.NotContains(t, stderr, "wrong@")
		require.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)
	})

	t.Run("the text report is one line per check and a count that matches the JSON", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t, "--maxmemory", "64mb", "--maxmemory-policy", "allkeys-random")
		code, stdout, stderr := runCLI(t, urlEnv(srv, ""), "doctor")
		require.Equal(t, exitBroken, code, stderr)
		require.Empty(t, stderr)
		lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
		require.Len(t, lines, len(doctorChecks)+1, stdout)
		counts := map[string]int{}
		for i, l := range lines[:len(doctorChecks)] {
			m := regexp.MustCompile(`^(ok|risk|broken|unknown) +(\S+) +(\S.*)$`).FindStringSubmatch(l)
			require.NotNil(t, m, l)
			require.Equal(t, doctorChecks[i], m[2])
			counts[m[1]]++
		}
		require.Equal(t, 1, counts[statusBroken], stdout)
		require.Equal(t, fmt.Sprintf("%d ok, %d risk, %d broken, %d unknown", counts[statusOK], counts[statusRisk], counts[statusBroken], counts[statusUnknown]), lines[len(lines)-1])
	})
}

// serverVersion returns srv's redis_version.
func serverVersion(t *testing.T, srv *redistest.Server) string {
	t.Helper()
	info, err := srv.Client(t).Info(context.Background(), "server").Result()
	require.NoError(t, err)
	m := regexp.MustCompile(`redis_version:(\S+)`).FindStringSubmatch(info)
	require.NotNil(t, m)
	return m[1]
}

func TestDoctorWording(t *testing.T) {
	t.Run("percentiles are nearest-rank", func(t *testing.T) {
		sorted := make([]time.Duration, 100)
		for i := range sorted {
			sorted[i] = time.Duration(i+1) * time.Millisecond
		}
		require.Equal(t, 50*time.Millisecond, percentile(sorted, 0.50))
		require.Equal(t, 99*time.Millisecond, percentile(sorted, 0.99))
		require.Equal(t, 7*time.Millisecond, percentile([]time.Duration{7 * time.Millisecond}, 0.99))
	})
	t.Run("the whole queue missing says waiters do not queue", func(t *testing.T) {
		c := permissionCheck("user u", "ACL DRYRUN", nil, queueCommands)
		require.Equal(t, statusRisk, c.Status)
		require.Contains(t, c.Detail, "(waiters do not queue; semaphores (run --limit) fail with NOPERM)")
	})
	t.Run("the semaphores' own commands missing says semaphores fail, and nothing about waiters", func(t *testing.T) {
		c := permissionCheck("user u", "ACL DRYRUN", nil, semaphoreCommands)
		require.Equal(t, statusRisk, c.Status)
		require.Contains(t, c.Detail, "lacks the optional zrank, zrangebyscore, zremrangebyscore, type (semaphores (run --limit) fail with NOPERM)")
	})
	t.Run("TIME missing says fenced locks fail", func(t *testing.T) {
		c := permissionCheck("user u", "ACL DRYRUN", nil, []string{"time"})
		require.Equal(t, statusRisk, c.Status)
		require.Contains(t, c.Detail, "fenced locks fail")
		require.NotContains(t, c.Detail, "only retry")
	})
	t.Run("a required command missing is broken whatever else is granted", func(t *testing.T) {
		c := permissionCheck("user u", "ACL DRYRUN", []string{"incr"}, nil)
		require.Equal(t, check{"permissions", statusBroken, "user u lacks incr: locks fail with NOPERM (checked with ACL DRYRUN)"}, c)
	})
	t.Run("a server's text cannot break a line", func(t *testing.T) {
		require.Equal(t, "a b c", oneLine("a\nb\r\n c"))
	})
}

func TestDoctorOnACluster(t *testing.T) {
	t.Parallel()
	cluster := redistest.StartCluster(t)
	seed := cluster.Nodes[0].Addr()

	t.Run("a cluster client reports a cluster node and probes sharded pub/sub", func(t *testing.T) {
		code, checks := runDoctor(t, env("REDIS_URL=redis://"+seed), "--redis-mode", "cluster")
		require.Equal(t, 0, code, checks)
		require.Regexp(t, `^Redis \S+, Redis Cluster node \((primary|replica)\)$`, checks["server"].Detail)
		require.Equal(t, statusOK, checks["permissions"].Status, checks["permissions"])
	})

	t.Run("replicas on a cluster are a risk, without WithReplicaAck: New refuses it on a ClusterClient", func(t *testing.T) {
		code, checks := runDoctor(t, env("REDIS_URL=redis://"+seed), "--redis-mode", "cluster")
		require.Equal(t, 0, code, checks)
		require.Equal(t, statusRisk, checks["replication"].Status, checks["replication"])
		require.Contains(t, checks["replication"].Detail, "1 connected replica(s)")
		require.NotContains(t, checks["replication"].Detail, "WithReplicaAck", "doctor advises nothing the library refuses")
		_, err := redislock.New(cluster.Client(t), redislock.WithReplicaAck(1, time.Second)).Acquire(context.Background(), "advice")
		require.ErrorIs(t, err, redislock.ErrInvalidArgument, "the library refuses it on a cluster")
	})

	t.Run("a cluster user without CLUSTER SLOTS is broken: the client cannot route", func(t *testing.T) {
		for _, n := range cluster.Nodes {
			addUser(t, n, "router", append(without(minimalACL, "+publish"), "+spublish", "+ssubscribe")...)
		}
		code, checks := runDoctor(t, env("REDIS_URL=redis://router:pw@"+seed), "--redis-mode", "cluster")
		require.Equal(t, exitBroken, code, checks)
		require.Contains(t, checks["permissions"].Detail, "the current user lacks cluster|slots: locks fail with NOPERM")
	})

	t.Run("a cluster user without SPUBLISH is told so", func(t *testing.T) {
		for _, n := range cluster.Nodes {
			addUser(t, n, "locker", append(without(minimalACL, "+publish"), "+spublish", "+ssubscribe", "+cluster|slots")...)
		}
		code, checks := runDoctor(t, env("REDIS_URL=redis://locker:pw@"+seed), "--redis-mode", "cluster")
		require.Equal(t, 0, code, checks)
		require.Equal(t, statusOK, checks["permissions"].Status, checks["permissions"])

		for _, n := range cluster.Nodes {
			addUser(t, n, "locker", "-spublish")
		}
		code, checks = runDoctor(t, env("REDIS_URL=redis://locker:pw@"+seed), "--redis-mode", "cluster")
		require.Equal(t, 0, code, checks)
		require.Equal(t, statusRisk, checks["permissions"].Status, checks["permissions"])
		require.Contains(t, checks["permissions"].Detail, "lacks the optional spublish")
	})
}
