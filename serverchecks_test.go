package redislock_test

import (
	"context"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/internal/redistest"
)

// On a Client's first lock, a server that can evict lock keys is said once
// at Warn; a safe one, or a user who may not read the config, is not.
func TestAServerThatEvictsLockKeysIsWarnedOnce(t *testing.T) {
	server := redistest.Start(t)
	admin := newRedisClient(t, server.Addr())
	ctx := context.Background()
	warnings := func(c *redislock.Client, logs *logRecorder) []string {
		t.Helper()
		for range 2 {
			l, err := c.Acquire(ctx, "job")
			require.NoError(t, err)
			require.NoError(t, l.Release(ctx))
		}
		var warns []string
		for _, line := range logs.lines() {
			if strings.HasPrefix(line, "WARN ") {
				warns = append(warns, line)
			}
		}
		return warns
	}

	// One CONFIG GET per Client, whatever it does after.
	configCalls := func() int {
		stats := admin.Info(ctx, "commandstats").Val()
		m := regexp.MustCompile(`cmdstat_config\|get:calls=(\d+)`).FindStringSubmatch(stats)
		if m == nil {
			return 0
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}
	before := configCalls()
	logs := &logRecorder{}
	warnings(redislock.New(admin, redislock.WithLogger(slog.New(logs))), logs)
	require.Equal(t, before+1, configCalls(), "one CONFIG GET for two acquisitions of one Client")

	require.NoError(t, admin.ConfigSet(ctx, "maxmemory", "100mb").Err())
	for policy, counters := range map[string]bool{"allkeys-lru": true, "volatile-lru": false} {
		require.NoError(t, admin.ConfigSet(ctx, "maxmemory-policy", policy).Err())
		logs := &logRecorder{}
		warns := warnings(redislock.New(admin, redislock.WithLogger(slog.New(logs))), logs)
		require.Len(t, warns, 1, "%s: once per Client", policy)
		require.Contains(t, warns[0], "maxmemory-policy noeviction")
		require.Contains(t, warns[0], "maxmemory_policy="+policy)
		require.Equal(t, counters, strings.Contains(warns[0], "fence counters too"), policy)
		// The risk is a second holder; fences do not go backwards (each
		// is raised to the server clock), evicted counter or not.
		require.Contains(t, warns[0], "a second holder take it while the first still believes it holds", policy)
		require.NotContains(t, warns[0], "below numbers already handed out", policy)
	}

	require.NoError(t, admin.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err())
	logs = &logRecorder{}
	require.Empty(t, warnings(redislock.New(admin, redislock.WithLogger(slog.New(logs))), logs), "noeviction is safe")

	// A user without CONFIG: no warning, no error.
	require.NoError(t, admin.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err())
	restricted := setACLUser(t, admin, "noconfig", append([]string{"~*", "&*"}, minimalACLCommands...)...)
	logs = &logRecorder{}
	require.Empty(t, warnings(redislock.New(restricted, redislock.WithLogger(slog.New(logs))), logs))
	_, debug := logs.find(slog.LevelDebug, "could not read the server's eviction policy")
	require.True(t, debug, "%v", logs.lines())
}
