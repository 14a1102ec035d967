package redislock

import (
	"context"
	"fmt"
)

// Break ends the lock called name whatever its token, for operators: a
// holder that is stuck (hung but alive, its watchdog still extending) and
// that no one can stop. Applications must not call it to take a lock: the
// holder still believes it holds the lock until its next extension, so two
// holders may work at once; only fences make that safe.
//
// It acts as the holder's release would, in one script: the lock goes to
// the first waiter queued on the server, or, with nobody in line, the key
// is deleted and the release announced. The holder learns at its next
// extension (by default within TTL/3): lost with reason Taken when a
// waiter has it, Expired when the key is gone. A name held shared loses
// every share, and a semaphore every slot (reason Expired; its waiters
// take the slots).
//
// It returns what the lock held just before (Info.Held is false when there
// was nothing to break, which is not an error), and logs it at Warn on the
// Client's logger, without the token. On a quorum Client it deletes the key
// on every node and reports each in Info.Nodes. Errors are Inspect's.
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
