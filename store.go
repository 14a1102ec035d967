package redislock

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/redislock/redislock/internal/lockrules"
)

// A store is where locks live: one Redis deployment (singleStore) or a
// majority of independent servers (quorumStore). Client and Lock only talk
// to a store, so every feature above it works the same on both.
type store interface {
	// check rejects settings this store cannot honour.
	check(o *options) error
	// acquire makes one attempt under ref.token; holderTTL: the holder's
	// TTL left (0: unknown) when the lock is someone else's.
	acquire(ctx context.Context, o *options, ref *lockRef) (acquired bool, fence int64, holderTTL time.Duration, err error)
	// extend resets the lease: replyDone, replyGone or replyForeign.
	extend(ctx context.Context, r extendRequest) (reply int64, err error)
	// release deletes the key if it holds ref.token; replies as extend.
	release(ctx context.Context, ref *lockRef) (reply int64, err error)
	// abandon gives back each ref's token: a token-checked release that
	// also leaves the queue and passes on a lock handed to it (see janitor).
	abandon(ctx context.Context, refs []*lockRef) (replies []int64, errs []error)
	// pttl returns ref's lease left in ms, or -2 (gone) / -3 (foreign).
	pttl(ctx context.Context, ref *lockRef) (int64, error)
	// inspect reads the lock at key (lua/state.lua); a quorum every node.
	// holder: the digest of the holder's value (a quorum's majority's), ""
	// when not held: one hold told from the next without its token.
	inspect(ctx context.Context, key string) (info Info, holder string, err error)
	// scanned: the nodes whose keys List scans (every primary, every node).
	scanned(ctx context.Context) []scanTarget
	// inspectMany is inspect for many keys, in one round trip per node.
	inspectMany(ctx context.Context, keys []string) (infos []Info, holders []string, errs []error)
	// breakLock ends the lock at key whatever its token, as a release would
	// (lua/break.lua), returning what it held and done: whether a waiter got
	// it. With an id, it ends the hold whose ID is id as its own release
	// would (lua/break_holder.lua); done: a running hold had the ID.
	breakLock(ctx context.Context, key, id string) (info Info, done bool, err error)
	// serves refuses the kinds this store cannot hold, saying why.
	serves(k lockKind) error
	// idle: closed once none of the store's commands is under way (nil: none can be).
	idle() <-chan struct{}
	// slotted tells whether keys are spread over nodes by hash slot.
	slotted() bool
	// queues: waiters queue on the server (lua/release.lua), one token each.
	queues() bool
	// stop ends what the store runs by itself (a Cluster's slot map
	// reloads, see slotMap), for Client.Close.
	stop()
}

// lockRef is one lock as its store commands see it, with its commands built
// once (the uncontended path allocates nothing per call). The token and
// secondary keys go in as *string: a hook printing arguments shows an
// address, not the secret.
type lockRef struct {
	key       string
	fenceKey  string // the fence counter; the lock key itself without fencing
	queueKey  string // waiters by arrival (see lua/acquire.lua)
	expiryKey string // waiters by the time their place lapses
	leftKey   string // a queued waiter's mark (lockrules.Left), set by its give-back when markLeft (see giveBackArgs)
	token     string // the key's value: the random token, then any metadata (see valueOf)
	keyArg    any    // key, boxed once
	ttlArg    any    // the TTL in milliseconds, boxed once per options
	// multi: a lock of several names (see multi.go); key is its first's.
	multi  *multiRef
	fenced bool
	// kind picks the scripts and their layout (see kind.go). extraKey: the name's shared
	// holders' set, which every kind's release names (a hand-over to a
	// shared waiter fills it), but a semaphore's, where it is the limit key
	// and arg the limit.
	kind     lockKind
	extraKey string
	arg      int64
	// waiting: a refused attempt keeps its place in the queue; markLeft:
	// its give-back marks it gone.
	waiting  bool
	markLeft bool
	// attempted: an attempt was sent; later ones run the script. (Kept
	// with the other flags: a bool between wider fields pads 8 bytes of
	// every held lock's state, 840 bytes in the 896-byte size class.)
	attempted bool

	// setArgs is SET key token NX PX ttl: a plain lock's first attempt when
	// the caller does not wait, faster on the server than the script. When
	// it finds the key taken, the script tells held (and for how long) from
	// another type, or from our own SET whose reply was lost and resent.
	// Only the kinds that may take their key so have it (see commands).
	setArgs     [6]any
	acquireArgs *[14]any // see acquireCommand; made on first use
	// releaseArgs: built once, never written again: concurrent Releases read it.
	releaseArgs [9]any
}

// The server-side queue of waiters (see lua/acquire.lua, lua/release.lua).
const (
	// queueHold: how long a waiter's place lasts after its last attempt, so
	// that a waiter gone unheard (crashed) drops out.
	queueHold = 1500 * time.Millisecond
	// handoffClaim: how long a lock handed to a waiter is kept for it (at
	// most the releaser's TTL); if the waiter is gone, it is free after that.
	handoffClaim = time.Second
)

var (
	// queueRefresh: how often a queued waiter that nothing wakes comes back (a var for tests).
	queueRefresh       = queueHold / 3
	queueHoldArg   any = queueHold.Milliseconds()
	handoffClaimMs any = handoffClaim.Milliseconds()
)

// init sets the lock's keys from names and shared (see lockKeysShared);
// the kind's layout may set extraKey to another key.
func (r *lockRef) init(names, shared string, keyLen int, o *options) {
	// One allocation for four keys: "prefix{name}", then ":q", ":qx"; and
	// the shared holders' set, which every hand-over may fill.
	r.key, r.queueKey, r.expiryKey, r.extraKey = names[:keyLen], names[:keyLen+2], names, shared
	r.keyArg = r.key // boxed once, shared by every command
	r.ttlArg = o.ttlArg
	r.fenced = o.fencing
	if o.fencing {
		r.fenceKey = lockrules.Fence(r.key)
	}
}

// handoverArg is the last argument of a release: publish (the
// announcement's command: PUBLISH, SPUBLISH or "" for none), a space, and
// how long (ms) a lock handed to a waiter is held for it, handoffClaim at
// most the TTL; built once per options (see Client.resolve).
func handoverArg(publish any, ttl time.Duration) any {
	return fmt.Sprint(publish, " ", min(handoffClaim, ttl).Milliseconds())
}

// giveBackArgs is r's release as a waiter that leaves (ARGV '1'). With
// markLeft (a command of the waiter may still be on its way, see
// acquisition.giveBackUncertain) its mark comes after the other keys, kept
// for as long as a command can be in flight (janitorMaxPartition): the
// acquire scripts let a marked token neither take the lock nor queue. A
// waiter that leaves with nothing on its way leaves no mark.
func (r *lockRef) giveBackArgs() []any {
	args := append(make([]any, 0, len(r.releaseArgs)+3), r.releaseArgs[:]...)
	if !r.markLeft || r.leftKey == "" {
		return append(args, "1")
	}
	keys := r.releaseArgs[2].(int)
	args = slices.Insert(args, 3+keys, any(&r.leftKey))
	args[2] = keys + 1
	return append(args, "1", leftMarkMs)
}
