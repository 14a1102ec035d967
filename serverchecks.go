package redislock

import (
	"context"
	"time"
)

// On a Client's first lock, one best-effort look at settings that make two
// holders: under maxmemory, a policy other than noeviction removes lock
// keys (they carry a TTL). A user who may not read the config: Debug only.

type serverChecker interface {
	// evictionPolicy returns maxmemory and maxmemory-policy.
	evictionPolicy(ctx context.Context) (maxmemory, policy string, err error)
}

// serverCheckTimeout bounds the check: it must not hold up the first lock.
const serverCheckTimeout = 500 * time.Millisecond

// checkServer runs the check once per Client, with the first call's logger.
func (c *Client) checkServer(ctx context.Context, o *options) {
	c.serverChecked.Do(func() {
		sc, ok := c.store.(serverChecker)
		if !ok {
			return
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), serverCheckTimeout)
		defer cancel()
		maxmemory, policy, err := sc.evictionPolicy(ctx)
		logger := o.log()
		switch {
		case err != nil:
			logger.Debug("redislock: could not read the server's eviction policy", "error", err)
		case policy == "noeviction" || policy == "":
		case maxmemory == "0":
			logger.Debug("redislock: the server has no memory limit, so its eviction policy does not apply", "maxmemory_policy", policy)
		default:
			logger.Warn("redislock: Redis may evict lock keys under memory pressure: a lock can vanish while held, and a second holder take it while the first still believes it holds"+
				evictsCounters(policy)+"; set maxmemory-policy noeviction on servers that hold locks",
				"maxmemory_policy", policy, "maxmemory", maxmemory)
		}
	})
}

// evictsCounters: an evicted counter starts again, but fences are raised to the server clock.
func evictsCounters(policy string) string {
	if len(policy) >= 8 && policy[:8] == "allkeys-" {
		return " (it evicts fence counters too, but fences keep growing: each is raised to the server clock)"
	}
	return ""
}

func (s singleStore) evictionPolicy(ctx context.Context) (maxmemory, policy string, err error) {
	values, err := s.rdb.ConfigGet(ctx, "maxmemory*").Result()
	if err != nil {
		return "", "", err
	}
	return values["maxmemory"], values["maxmemory-policy"], nil
}
