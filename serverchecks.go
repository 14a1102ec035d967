package redislock

import (
	"context"
	"time"
)

// On a Client's first lock, one best-effort look at settings that make two
// holders: under maxmemory, a policy other than noeviction removes lock
// keys (they carry a TTL). A user who may not read the config: Debug only.

type serverChecker interface {
	// evictionPolicy returns maxmemory and maxmemory-policy, or the error
	// that kept it from reading them (then the values mean nothing:
	// checkServer reads the error first).
	evictionPolicy(ctx context.Context) (maxmemory, policy string, err error)
}

// serverCheckTimeout bounds the check: it must not hold up the first lock.
const serverCheckTimeout = 500 * time.Millisecond

// evictsCounters: an evicted counter starts again, but fences are raised to the server clock.
func evictsCounters(policy string) string {
	if len(policy) >= 8 && policy[:8] == "allkeys-" {
		return " (it evicts fence counters too, but fences keep growing: each is raised to the server clock)"
	}
	return ""
}

func (s singleStore) evictionPolicy(ctx context.Context) (maxmemory, policy string, err error) {
	values, err := s.rdb.ConfigGet(ctx, "maxmemory*").Result()
	return values["maxmemory"], values["maxmemory-policy"], err
}
