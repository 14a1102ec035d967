package redislock

import (
	"context"
	"fmt"
)

// Break ends the lock called name whatever its token, for operators: a
// holder that is stuck (hung but alive, its watchdog still extending).
// Applications must not call it to take a lock: the holder believes it
// holds the lock until its next extension, so two may work at once.
//
// It acts as the holder's release would: the lock goes to the first waiter
// queued on the server, or the key is deleted and the release announced.
// The holder learns at its next extension (reason Taken, or Expired when
// the key is gone); a name held shared loses every share, a semaphore
// every slot. It returns what the lock held just before (Info.Held false:
// nothing to break, not an error) and logs it at Warn, without the token.
// On a quorum Client it deletes the key on every node (Info.Nodes).
// Errors are Inspect's.
func (c *Client) Break(ctx context.Context, name string) (Info, error) {
	key, err := c.lockKey(ctx, name)
	if err != nil {
		return Info{}, err
	}
	info, handed, err := c.store.breakLock(ctx, key)
	info.Name, info.Key = name, key
	if err != nil {
		return info, fmt.Errorf("redislock: break %q: %w", name, err)
	}
	switch {
	case info.Held && info.Kind != kindLock:
		// Shared holders, or a semaphore's: each had its own metadata.
		c.opts.log().Warn("redislock: lock broken", "name", name, "kind", info.Kind, "holders", info.Count,
			"ttl_left", info.TTL, "fence", info.Fence, "waiters", info.Waiters, "handed_to_waiter", handed)
	case info.Held:
		c.opts.log().Warn("redislock: lock broken", "name", name, "metadata", info.Metadata,
			"ttl_left", info.TTL, "fence", info.Fence, "waiters", info.Waiters, "handed_to_waiter", handed)
	default:
		c.opts.log().Info("redislock: nothing to break: lock not held", "name", name)
	}
	return info, nil
}

func (s singleStore) breakLock(ctx context.Context, key string) (Info, bool, error) {
	info, _, handed, err := parseState(breakScript.Run(ctx, s.rdb, stateKeys(key), s.publishCommand(), handoffClaimMs))
	return info, handed, err
}

func (q *quorumStore) breakLock(ctx context.Context, key string) (Info, bool, error) {
	info, err := q.gather(ctx, "break", func(ctx context.Context, n quorumNode) (Info, string, error) {
		// No announcement: a quorum's waiters do not listen (see NewQuorum).
		info, holder, _, err := parseState(breakScript.Run(ctx, n.rdb, stateKeys(key), "", handoffClaimMs))
		return info, holder, err
	})
	return info, false, err
}
