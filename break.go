package redislock

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
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
	info, handed, err := c.store.breakLock(ctx, key, "")
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
		// An exclusive lock's one holder: parseState takes no held "lock"
		// without it (readKind), and a quorum's combine names the majority's.
		c.opts.log().Warn("redislock: lock broken", "name", name, "holder", info.Holders[0].ID, "metadata", info.Metadata,
			"ttl_left", info.TTL, "fence", info.Fence, "waiters", info.Waiters, "handed_to_waiter", handed)
	default:
		c.opts.log().Info("redislock: nothing to break: lock not held", "name", name)
	}
	return info, nil
}

func (s singleStore) breakLock(ctx context.Context, key, id string) (Info, bool, error) {
	info, _, done, err := parseState(runBreak(ctx, s.rdb, key, id, s.publishCommand()))
	return info, done, err
}

// breakLock breaks on every node; with an id, found: a node had the hold
// (a quorum has no waiters to hand a broken lock to).
func (q *quorumStore) breakLock(ctx context.Context, key, id string) (Info, bool, error) {
	op := "break"
	if id != "" {
		op = "break holder"
	}
	var found atomic.Bool
	infos, _, errs := q.gather(ctx, op, q.defaultTimeout, 1, func(ctx context.Context, n quorumNode) ([]Info, []string, []error) {
		// No announcement: a quorum's waiters do not listen (see NewQuorum).
		info, holder, done, err := parseState(runBreak(ctx, n.rdb, key, id, ""))
		if done && id != "" {
			found.Store(true)
		}
		return []Info{info}, []string{holder}, []error{err}
	})
	return infos[0], found.Load(), errs[0]
}

// runBreak runs lua/break.lua on the lock at key, or, with an id,
// lua/break_holder.lua on that hold; publish: the announcement's command.
func runBreak(ctx context.Context, rdb redis.Scripter, key, id string, publish any) *redis.Cmd {
	if id == "" {
		return breakScript.Run(ctx, rdb, stateKeys(key), publish, handoffClaimMs)
	}
	return breakHolderScript.Run(ctx, rdb, stateKeys(key), id, publish, handoffClaimMs)
}

// BreakHolder ends one hold of the lock called name, the one whose ID is id
// (HolderInfo.ID, as Inspect and the log lines give it), for operators: one
// stuck semaphore holder or shared holder, while the others keep theirs, or
// a stuck exclusive lock (Acquire, Elect). Applications must not call it to
// take a lock, as for Break.
//
// It acts as that holder's own release would, in one script: a lock or a
// slot goes to the first waiter queued for it that can take it (also the
// lock the last shared holder lets go), else it is deleted, and announced as
// a release is. The holder is not stopped: it learns at its
// next extension (reason Expired for a share or a slot, Taken when the lock
// went to a waiter, as Break reports). For a multi lock (AcquireMulti) the
// ID names its hold of every name, and BreakHolder ends that hold of name
// only: its Lock is lost at its next extension, and its other names are
// freed when it lets go, or at the end of their lease.
//
// It returns what the lock held just before, and logs the break at Warn
// (the ID, never the token). On a quorum Client it breaks the hold on every
// node that has it (Info.Nodes), without announcing.
//
// Errors: ErrInvalidArgument for a nil ctx, a name Acquire would refuse, or
// an id that is not 16 lowercase hex digits (nothing sent); ErrNotHeld
// (with the Info) when no running hold of name has the ID; else Inspect's.
func (c *Client) BreakHolder(ctx context.Context, name, id string) (Info, error) {
	key, err := c.lockKey(ctx, name)
	badID := invalidIf(len(id) != 16 || strings.Trim(id, "0123456789abcdef") != "", "holder ID %q is not 16 lowercase hex digits (see HolderInfo.ID)", id)
	if err = cmp.Or(err, badID); err != nil { // lockKey's error first
		return Info{}, err
	}
	info, found, err := c.store.breakLock(ctx, key, id)
	info.Name, info.Key = name, key
	switch {
	case err != nil:
		return info, fmt.Errorf("redislock: break holder %s of %q: %w", id, name, err)
	case !found:
		return info, fmt.Errorf("redislock: break holder %s of %q: no running hold has this ID: %w", id, name, ErrNotHeld)
	}
	c.opts.log().Warn("redislock: holder broken", "name", name, "holder", id, "kind", info.Kind,
		"holders", info.Count, "fence", info.Fence, "waiters", info.Waiters)
	return info, nil
}

// breakHolderScript is lua/break_holder.lua, which runs the release scripts
// of every kind as functions (see asFunction).
var breakHolderScript = redis.NewScript(lua("prelude", "state", "handover") + asFunction("releaseLock", "release") +
	asFunction("releaseShare", "shared_release") + asFunction("releaseSlot", "semaphore_release") + lua("break_holder"))
