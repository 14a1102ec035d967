package redislock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redislock/redislock/internal/lockrules"
)

// Info is what Client.Inspect reads of a lock, and what Client.Break found
// before breaking it: a value the library does not keep (copies share
// Nodes). It never holds the holder's token.
type Info struct {
	Name, Key string // the lock name, and its Redis key
	Held      bool   // held (quorum: by one holder on a majority)
	// TTL is the lease left: 0 when not held, negative when the key has no
	// expiry (only Break ends it); for shared or semaphore holders, the latest.
	TTL time.Duration
	// Metadata is the holder's (see WithMetadata); "" for shared or semaphore holders.
	Metadata string
	// Fence is the last fencing token handed out for the name; 0 when none
	// yet (or the counter was lost), and always on a quorum Client.
	Fence int64
	// Waiters counts the callers of every Client queued on the server; 0 on
	// a quorum Client, whose waiters poll. Shared: the shared holders.
	Waiters, Shared int
	// Kind says which kind of lock holds the name: "lock" (Acquire, Elect,
	// AcquireMulti, every lock of a quorum Client), "shared" (AcquireShared)
	// or "semaphore" (AcquireSemaphore); "" when the name is not held.
	Kind string
	// Count is how many hold the name (1 for a lock, 0 when not held);
	// Limit a semaphore's limit (0 otherwise).
	Count, Limit int
	// Holders: every holder, each with its ID, metadata and lease left: an
	// exclusive lock's one (Acquire, Elect, a multi lock; on a quorum Client
	// the majority's, with Info.TTL), a shared lock's or a semaphore's each,
	// the first to end first, at most 100 (Count says how many); nil when
	// not held.
	Holders []HolderInfo
	// Queue: the callers queued on the server, first in line first, at
	// most 100 (Waiters counts them all); nil on a quorum Client. Callers
	// of one Client waiting for one exclusive lock take turns behind one
	// place: it shows the one whose turn it is (see docs/holders.md).
	Queue []WaiterInfo
	// Nodes: on a quorum Client, each node's view, in NewQuorum's order.
	Nodes []NodeInfo
}

// HolderInfo is a holder of a lock, in Info.Holders (never its token).
type HolderInfo struct {
	// ID names the hold, as the library's log lines for it do (attribute
	// "holder"): 16 hex digits of SHA1("holder:" + token), the same for
	// the hold's whole life, distinct between holds, and of no use to
	// release or extend it (it tells nothing of the token).
	ID       string
	Metadata string        // see WithMetadata; "" when none
	TTL      time.Duration // the holder's lease left (negative: no expiry)
}

// WaiterInfo is a caller queued for a lock, in Info.Queue.
type WaiterInfo struct {
	Metadata string        // what the caller gave WithMetadata; "" when none
	Waited   time.Duration // how long it has been in line
}

// NodeInfo is what one node of a quorum Client holds for a lock.
type NodeInfo struct {
	Node string // "node 2 (127.0.0.1:6380)"
	// Held, TTL and Metadata are as in Info, for this node alone.
	Held     bool
	TTL      time.Duration
	Metadata string
	Majority bool // the node holds what a majority holds
	// Err is why the node could not be read (the fields above are then
	// zero): a Redis error, ErrNotALock, or a missed per-node timeout.
	Err error
}

// Inspect reports the lock called name in one round trip: whether and by
// which kind it is held, the lease left, the holders' metadata (and leases),
// the last fence and the waiters queued. Its script only reads and never
// sees the token; anyone may call it, also after Client.Close. On a quorum
// Client it reads every node (each within TTL/20) into Info.Nodes.
//
// Errors: ErrInvalidArgument for a nil ctx or a name Acquire would refuse
// (nothing sent); ErrNotALock when a key of the lock holds another type,
// or the lock key a sorted set no semaphore wrote (no limit key beside it,
// and members that are not tokens); a
// *QuorumError when under a majority could be read; else the Redis error.
func (c *Client) Inspect(ctx context.Context, name string) (Info, error) {
	key, err := c.lockKey(ctx, name)
	if err != nil {
		return Info{}, err
	}
	info, _, err := c.store.inspect(ctx, key)
	info.Name, info.Key = name, key
	if err != nil {
		return info, fmt.Errorf("redislock: inspect %q: %w", name, err)
	}
	return info, nil
}

// List yields an Info, as Inspect returns it, for every lock held under the
// Client's key prefix whose name starts with prefix ("" for all; taken
// literally, not as a pattern): every kind, each name once, in no order.
// Names that hold nothing (a fence counter, waiters, an expired lease) are
// left out, and so are keys no kind of this library wrote (ErrNotALock).
// On a quorum Client a name held on any node is listed (Info.Nodes says
// where; Held only when a majority holds it).
//
// It scans with SCAN (never KEYS), COUNT listCount (1000) per call, on every
// primary of a Cluster (replicas are not scanned), or every node of a quorum
// Client (a name found on any, with Nodes); each batch of names it finds is
// inspected in one round trip per node. A lock taken or released during
// the scan may be listed or not. It stops when the loop breaks, and when
// ctx ends, after yielding ctx's error once.
//
// Errors, yielded with a zero Info (or the name's): Inspect's for
// arguments (a prefix that starts with '}', which no name does, is
// ErrInvalidArgument; nothing is sent); a node's failure, after which the
// other nodes are still scanned; a name's Inspect error (a *QuorumError).
func (c *Client) List(ctx context.Context, prefix string) iter.Seq2[Info, error] {
	return func(yield func(Info, error) bool) {
		// The key of a name that starts with prefix checks the arguments,
		// and starts the pattern: cut "_}" for "*}".
		key, err := c.lockKey(ctx, prefix+"_")
		// A prefix that no name has: that error, whatever lockKey says.
		err = cmp.Or(invalidIf(strings.HasPrefix(prefix, "}"), "no lock name starts with '}'"), err)
		if err != nil {
			yield(Info{}, fmt.Errorf("redislock: list %q: %w", prefix, err))
			return
		}
		match := globEscaper.Replace(key[:len(key)-2]) + "*}"
		seen := map[string]bool{}
		for _, node := range c.store.scanned(ctx) {
			if !c.listNode(ctx, node, match, seen, yield) {
				return
			}
		}
	}
}

// listCount is SCAN's COUNT for List: one call reads about that many keys;
// listBatch the names one pipeline inspects.
const listCount, listBatch = 1000, 100

// globEscaper escapes the characters SCAN's MATCH gives a meaning to.
var globEscaper = strings.NewReplacer(`\`, `\\`, "*", `\*`, "?", `\?`, "[", `\[`, "]", `\]`)

// scanTarget is a node List scans, or why one could not be found.
type scanTarget struct {
	rdb redis.Cmdable
	err error
}

// listNode yields the locks that SCAN finds on node, and reports whether
// List goes on (false: the loop broke, or ctx ended).
func (c *Client) listNode(ctx context.Context, node scanTarget, match string, seen map[string]bool, yield func(Info, error) bool) bool {
	failed := func(err error) bool {
		if ctx.Err() != nil {
			yield(Info{}, fmt.Errorf("redislock: list: %w", context.Cause(ctx)))
			return false
		}
		return yield(Info{}, fmt.Errorf("redislock: list: %w", err))
	}
	if node.err != nil {
		return failed(node.err)
	}
	var cursor uint64
	for {
		keys, next, err := node.rdb.Scan(ctx, cursor, match, listCount).Result()
		if err != nil {
			return failed(err)
		}
		fresh := keys[:0]
		for _, key := range keys {
			if _, ok := lockrules.Name(c.opts.prefix, key); ok && !seen[key] { // SCAN may return a key twice
				seen[key] = true
				fresh = append(fresh, key)
			}
		}
		for batch := range slices.Chunk(fresh, listBatch) {
			infos, _, errs := c.store.inspectMany(ctx, batch)
			for i, info := range infos {
				info.Name, _ = lockrules.Name(c.opts.prefix, batch[i])
				info.Key = batch[i]
				if errs[i] != nil {
					errs[i] = fmt.Errorf("redislock: inspect %q: %w", info.Name, errs[i])
				}
				switch {
				case ctx.Err() != nil:
					return failed(ctx.Err())
				case errors.Is(errs[i], ErrNotALock) || errs[i] == nil && !info.Held && !slices.ContainsFunc(info.Nodes, heldOn):
				case !yield(info, errs[i]):
					return false
				}
			}
		}
		if cursor = next; cursor == 0 {
			return true
		}
	}
}

// heldOn: a quorum's node holds the name (List shows a minority's hold too).
func heldOn(n NodeInfo) bool { return n.Held }

// scanned: this deployment's node, or every primary of a Cluster.
func (s singleStore) scanned(ctx context.Context) []scanTarget {
	cluster, ok := s.rdb.(*redis.ClusterClient)
	if !ok {
		return []scanTarget{{rdb: s.rdb}}
	}
	var mu sync.Mutex
	var nodes []scanTarget
	err := cluster.ForEachMaster(ctx, func(_ context.Context, primary *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		nodes = append(nodes, scanTarget{rdb: primary})
		return nil
	})
	if err != nil {
		nodes = append(nodes, scanTarget{err: err})
	}
	return nodes
}

func (q *quorumStore) scanned(ctx context.Context) []scanTarget {
	var nodes []scanTarget
	for _, n := range q.nodes {
		for _, t := range n.scanned(ctx) {
			if t.err != nil {
				t.err = fmt.Errorf("%s: %w", n.label, t.err)
			}
			nodes = append(nodes, t)
		}
	}
	return nodes
}

// inspectMany is inspect for many keys, in one pipeline (a Cluster's
// client sends each node its part).
func (s singleStore) inspectMany(ctx context.Context, keys []string) (infos []Info, holders []string, errs []error) {
	cmds := make([][]any, len(keys))
	for i, key := range keys {
		cmds[i] = scriptArgs(inspectScript, stateKeys(key))
	}
	infos, holders, errs = make([]Info, len(keys)), make([]string, len(keys)), make([]error, len(keys))
	for i, reply := range s.runGroups(ctx, cmds, len(cmds)) {
		infos[i], holders[i], errs[i] = parseInspect(reply)
	}
	return infos, holders, errs
}

// inspectMany asks every node once for all keys, then makes each key's
// Info as inspect does.
func (q *quorumStore) inspectMany(ctx context.Context, keys []string) ([]Info, []string, []error) {
	// A batch is up to listBatch scripts: at least a second per node, so that
	// a loaded node is not given up on for the batch's size alone.
	return q.gather(ctx, "inspect", max(q.defaultTimeout, time.Second), len(keys), func(ctx context.Context, n quorumNode) ([]Info, []string, []error) {
		return n.inspectMany(ctx, keys)
	})
}

// lockKey checks Inspect's and Break's arguments and returns the lock's key.
func (c *Client) lockKey(ctx context.Context, name string) (string, error) {
	// c.defaultsErr apart: cmp.Or evaluates every argument, and c may be nil.
	if err := cmp.Or(c.usable(), invalidIf(ctx == nil, "nil context")); err != nil {
		return "", err
	}
	if c.defaultsErr != nil {
		return "", c.defaultsErr
	}
	key, err := lockrules.Lock(c.opts.prefix, name)
	return key, keyError(err)
}

func stateKeys(key string) []string {
	return []string{key, lockrules.Fence(key), lockrules.Queue(key), lockrules.Expiry(key), lockrules.Shared(key), key + lockrules.LimitSuffix}
}

func (s singleStore) inspect(ctx context.Context, key string) (Info, string, error) {
	return parseInspect(inspectScript.Run(ctx, s.rdb, stateKeys(key)))
}

// parseInspect reads lua/inspect.lua's reply: lua/state.lua's (parseState),
// then the queue as its last element (parseQueue).
func parseInspect(cmd *redis.Cmd) (Info, string, error) {
	var queue []any
	if reply, ok := cmd.Val().([]any); ok && cmd.Err() == nil {
		if len(reply) == 11 {
			queue, ok = reply[10].([]any)
		}
		if !ok || len(reply) != 11 {
			return Info{}, "", fmt.Errorf("unexpected reply %v from the inspect script", reply)
		}
		cmd.SetVal(reply[:10])
	}
	info, holder, _, err := parseState(cmd)
	if err == nil {
		info.Queue, err = parseQueue(queue)
	}
	return info, holder, err
}

// parseQueue reads inspect.lua's queue: metadata, waited (µs), ... for at
// most 100 waiters.
func parseQueue(flat []any) ([]WaiterInfo, error) {
	if len(flat)%2 != 0 || len(flat) > 200 {
		return nil, fmt.Errorf("unexpected queue %v from the inspect script", flat)
	}
	var queue []WaiterInfo
	for i := 0; i < len(flat); i += 2 {
		metadata, ok := flat[i].(string)
		waited, ok2 := flat[i+1].(int64)
		if !ok || !ok2 || waited < 0 {
			return nil, fmt.Errorf("unexpected queue %v from the inspect script", flat)
		}
		queue = append(queue, WaiterInfo{Metadata: metadata, Waited: time.Duration(waited) * time.Microsecond})
	}
	return queue, nil
}

// parseState reads lua/state.lua's reply: the Info, the holder's digest, and
// the break scripts' eleventh element (break.lua: handed to a waiter;
// break_holder.lua: the hold was found and released).
func parseState(cmd *redis.Cmd) (info Info, holder string, handed bool, err error) {
	val, err := cmd.Result()
	if err != nil {
		if redis.HasErrorPrefix(err, "WRONGTYPE") {
			err = notALockError{strings.TrimPrefix(err.Error(), "WRONGTYPE "), err}
		}
		return Info{}, "", false, err
	}
	unexpected := func() (Info, string, bool, error) {
		return Info{}, "", false, fmt.Errorf("unexpected reply %v from the inspect script", val)
	}
	reply, ok := val.([]any)
	if !ok || len(reply) < 10 || len(reply) > 11 {
		return unexpected()
	}
	held, ok0 := reply[0].(int64)
	pttl, ok1 := reply[1].(int64)
	metadata, ok2 := reply[2].(string)
	fence, ok3 := reply[3].(string)
	waiters, ok4 := reply[4].(int64)
	holder, ok5 := reply[5].(string)
	count, ok6 := reply[6].(int64)
	kind, ok7 := reply[7].(string)
	limit, ok8 := reply[8].(string)
	holders, ok9 := reply[9].([]any)
	if !ok0 || !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || !ok6 || !ok7 || !ok8 || !ok9 || held != 0 && held != 1 || waiters < 0 || count < 0 ||
		held == 1 && pttl < -1 || held == 0 && (pttl != -2 || metadata != "" || holder != "" || count != 0 || kind != "" || limit != "" || len(holders) != 0) {
		return unexpected()
	}
	if held == 1 {
		if ok, err := readKind(&info, kind, count, limit, metadata, holder, len(holders)); err != nil {
			return Info{}, "", false, err
		} else if !ok {
			return unexpected()
		}
		info.TTL = leaseLeft(pttl)
	}
	if info.Holders, ok = parseHolders(holders, max(count, 1)); !ok {
		return unexpected()
	}
	// No fence counter ("") is fence 0.
	if info.Fence, err = strconv.ParseInt(cmp.Or(fence, "0"), 10, 64); err != nil {
		return Info{}, "", false, notALockError{fmt.Sprintf("the fence counter holds %q, not a number", fence), nil}
	}
	info.Held, info.Metadata, info.Waiters, info.Kind = held == 1, metadata, int(waiters), kind
	if len(reply) == 11 {
		n, ok := reply[10].(int64)
		if !ok || n != 0 && n != 1 {
			return Info{}, "", false, fmt.Errorf("unexpected reply %v from the break script", val)
		}
		handed = n == 1
	}
	return info, holder, handed, nil
}

// parseHolders reads state.lua's holders (id, metadata, lease left, ...):
// at most most of them, each lease running or without expiry (-1).
func parseHolders(flat []any, most int64) (holders []HolderInfo, ok bool) {
	if len(flat)%3 != 0 || int64(len(flat)/3) > most {
		return nil, false
	}
	for i := 0; i < len(flat); i += 3 {
		id, ok0 := flat[i].(string)
		metadata, ok1 := flat[i+1].(string)
		left, ok2 := flat[i+2].(int64)
		if !ok0 || !ok1 || !ok2 || left < -1 || len(id) != 16 {
			return nil, false
		}
		holders = append(holders, HolderInfo{ID: id, Metadata: metadata, TTL: leaseLeft(left)})
	}
	return holders, true
}

// notALockError says which key holds what instead of a lock (the script's
// words, or Redis' WRONGTYPE error); it matches ErrNotALock.
type notALockError struct {
	msg string
	err error // Redis' WRONGTYPE error; nil for a fence counter that is not a number
}

func (e notALockError) Error() string        { return e.msg }
func (e notALockError) Unwrap() error        { return e.err }
func (e notALockError) Is(target error) bool { return target == ErrNotALock }

// leaseLeft converts a held key's PTTL: -1 (no expiry) to a negative TTL, and
// 0 to 1ms, so that a held lock never reports a free one's TTL.
func leaseLeft(millis int64) time.Duration {
	if millis < 0 {
		return -1
	}
	return max(time.Duration(millis)*time.Millisecond, time.Millisecond)
}

func (q *quorumStore) inspect(ctx context.Context, key string) (Info, string, error) {
	infos, holders, errs := q.gather(ctx, "inspect", q.defaultTimeout, 1, func(ctx context.Context, n quorumNode) ([]Info, []string, []error) {
		info, holder, err := n.inspect(ctx, key)
		return []Info{info}, []string{holder}, []error{err}
	})
	return infos[0], holders[0], errs[0]
}

// gather runs read on every node (each within timeout): what each holds of
// each of keys keys, and for each key the majority's view and holder, as
// combine makes them.
func (q *quorumStore) gather(ctx context.Context, op string, timeout time.Duration, keys int, read func(ctx context.Context, n quorumNode) ([]Info, []string, []error)) ([]Info, []string, []error) {
	start := time.Now()
	infos, holders, errs := make([][]Info, len(q.nodes)), make([][]string, len(q.nodes)), make([][]error, len(q.nodes))
	answers, _ := q.ask(ctx, timeout, nil, func(ctx context.Context, i int, n quorumNode) answer {
		infos[i], holders[i], errs[i] = read(ctx, n)
		return answer{}
	}, nil)
	out, outHolders, outErrs := make([]Info, keys), make([]string, keys), make([]error, keys)
	for k := range keys {
		out[k], outHolders[k], outErrs[k] = q.combine(op, start, k, answers, infos, holders, errs)
	}
	return out, outHolders, outErrs
}

// combine makes one Info of key k (of gather's keys) of the nodes' answers
// and what each read, by node, then key (holders: the digest of each
// node's value; errs: each key's error): each node's view, and the
// majority's, with its holder's digest ("" when no majority holds the
// name). A node that did not answer in time read nothing.
func (q *quorumStore) combine(op string, start time.Time, k int, answers []answer, infos [][]Info, holders [][]string, errs [][]error) (Info, string, error) {
	var info Info
	counts := make(map[string]int)
	var failed []error
	for i, a := range answers {
		if a.err == nil && errs[i][k] != nil {
			a.err = fmt.Errorf("%s: %w", q.nodes[i].label, errs[i][k])
		}
		node := NodeInfo{Node: q.nodes[i].label, Err: a.err}
		if a.err == nil {
			node.Held, node.TTL, node.Metadata = infos[i][k].Held, infos[i][k].TTL, infos[i][k].Metadata
			if node.Held {
				counts[holders[i][k]]++
			}
		} else {
			failed = append(failed, a.err)
		}
		info.Nodes = append(info.Nodes, node)
	}
	var leases []time.Duration
	var id, hold string
	for i := range info.Nodes {
		node := &info.Nodes[i]
		if node.Err == nil && node.Held && counts[holders[i][k]] >= q.needed {
			// One value holds a majority: every such node has its digest.
			node.Majority, info.Held, info.Metadata, hold = true, true, node.Metadata, holders[i][k]
			if h := infos[i][k].Holders; len(h) > 0 {
				id = h[0].ID // one value, so one ID, on each such node
			}
			leases = append(leases, node.TTL)
		}
	}
	if info.Held {
		// A quorum Client takes exclusive locks only.
		info.TTL, info.Kind, info.Count = majorityLease(leases, q.needed), kindLock, 1
		info.Holders = []HolderInfo{{ID: id, Metadata: info.Metadata, TTL: info.TTL}}
	}
	if answered := len(q.nodes) - len(failed); answered < q.needed {
		return info, hold, q.failure(tally{op: op, elapsed: time.Since(start), errs: failed}, answered, 0, 0)
	}
	return info, hold, nil
}

// majorityLease is the needed-th longest of the majority's leases (a lease
// without expiry counts as the longest).
func majorityLease(leases []time.Duration, needed int) time.Duration {
	// Longest first; as uint64, a lease without expiry (negative) is above
	// every running one.
	slices.SortFunc(leases, func(a, b time.Duration) int { return cmp.Compare(uint64(b), uint64(a)) })
	return leases[needed-1]
}
