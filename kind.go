package redislock

import (
	"crypto/rand"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/redislock/redislock/internal/lockrules"
)

// lockKind is what a lock is on the server. What differs between kinds
// lives here, with the kind, and nowhere else: its scripts and their
// argument layout (acquire, release, extend, pttl), how its waiters wait and
// take their turn, the token it attempts under, how Inspect reads its keys,
// its error words. The one acquisition loop (acquire.go), the one waiting
// room (waitroom.go) and the stores (single.go, quorum.go) ask the kind;
// they do not test it. What a kind needs beyond a name is in its lockRef (a
// semaphore's limit, a multi lock's names). An exclusive, shared or
// semaphore waiter queues on the server, where the release that lets it in
// hands it over; a multi waiter watches the name that keeps it out
// (lua/handover.lua).
type lockKind uint8

const (
	exclusiveLock lockKind = iota // Acquire's: the key holds the token
	sharedHold                    // AcquireShared's: a member of the shared holders' set
	semaphoreSlot                 // AcquireSemaphore's: a member of the holders' set
	multiLock                     // AcquireMulti's: every name's key holds the token
)

// kindRules is one kind's behaviour (see kinds).
type kindRules struct {
	call string // the method that takes it, in errors
	what string // the call, in error words: "acquire shared"
	word string // what names the lock in errors, before its name: "semaphore "
	// handsOut: what it gives, in error words; info: its name in Info.Kind.
	handsOut, info string
	// mark is what a waiter's token carries after its Client's tag (see
	// waiterToken), not base32, by which the scripts tell its kind: a
	// release hands a name only to a waiter that can take what it lets go
	// (lua/handover.lua). A shared caller's token has it also when it does
	// not wait: the shared scripts tell shared holders by it.
	mark string
	// The scripts' SHA1s, boxed once, and the extend and pttl scripts (a
	// multi lock runs its own per slot, see multi.go); holdersKey: they also
	// take the lockRef's extraKey (the holders' set or the limit). A shared
	// or semaphore lease script is both: it extends when given a TTL
	// (ARGV[2]) and only reads without one, so the pttl call
	// (singleStore.pttl) sends the token alone, and must stay so.
	acquireSHA, releaseSHA any
	extend, pttl           *redis.Script
	holdersKey             bool
	// takesTurn: a Client's callers for one name attempt one at a time
	// (waitroom.go): those that cannot hold together. keepsTurn: the holder
	// keeps it until it lets go (an exclusive lock); the others pass it on
	// once they hold (others may hold with them, or, a multi lock, their
	// release sends no attempt).
	takesTurn, keepsTurn bool
	// oneToken: every attempt of a call runs under one token, its place in
	// the server's queue even when it does not wait (a shared hold: the
	// shared scripts tell holders by its mark). Other kinds take a token per
	// attempt unless they queue (see acquisition.plan).
	oneToken bool
	// queuesOnServer: its waiters wait in the server's queue on a store
	// that has one; a multi lock's watch the name that kept them out instead.
	queuesOnServer bool
	// setsAlone: a caller that does not wait first tries SET key token NX
	// PX ttl, the one command of an uncontended exclusive lock; a lone
	// reader's hold and a semaphore's lone holder's slot are that key too
	// (its token's mark tells which, and a semaphore's its limit: see
	// lockRef.mark, lua/shared_acquire.lua, lua/semaphore_acquire.lua).
	setsAlone bool
}

// kinds: each kind's behaviour, by kind.
var kinds = [...]kindRules{
	exclusiveLock: {call: "Acquire", what: "acquire", handsOut: "a lock", info: kindLock,
		acquireSHA: acquireSHA, releaseSHA: releaseSHA, extend: extendScript, pttl: pttlScript,
		takesTurn: true, keepsTurn: true, queuesOnServer: true, setsAlone: true},
	sharedHold: {call: "AcquireShared", what: "acquire shared", handsOut: "a share", info: kindShared, mark: "s",
		acquireSHA: sharedAcquireSHA, releaseSHA: sharedReleaseSHA, extend: sharedLeaseScript, pttl: sharedLeaseScript,
		holdersKey: true, oneToken: true, queuesOnServer: true, setsAlone: true},
	semaphoreSlot: {call: "AcquireSemaphore", what: "acquire semaphore", word: "semaphore ", handsOut: "a slot", info: kindSemaphore, mark: "n",
		acquireSHA: semAcquireSHA, releaseSHA: semReleaseSHA, extend: semLeaseScript, pttl: semLeaseScript,
		holdersKey: true, queuesOnServer: true, setsAlone: true},
	multiLock: {call: "AcquireMulti", what: "acquire multi", word: "multi lock ", handsOut: "locks", info: kindLock,
		acquireSHA: multiAcquireSHA, releaseSHA: multiReleaseSHA, takesTurn: true},
}

func (k lockKind) rules() *kindRules { return &kinds[k] }

// mark is r's kind's mark in its tokens (kindRules.mark): a semaphore's
// carries its limit, 'n3-', so that the key of a holder that took the
// name alone tells the limit to the next (lua/semaphore_acquire.lua).
func (r *lockRef) mark() string {
	if r.kind == semaphoreSlot {
		return "n" + strconv.FormatInt(r.arg, 10) + "-"
	}
	return r.kind.rules().mark
}

// freshToken gives r a token of its own (its kind's mark, a random body,
// then metadata): an attempt's, which no late command of an earlier
// attempt, nor a give-back of one, holds or releases.
func (r *lockRef) freshToken(metadata string) { r.token = valueOf(r.mark()+rand.Text(), metadata) }

func layoutSemaphore(limit int) func(o *options, r *lockRef) {
	return func(o *options, r *lockRef) {
		r.extraKey = r.key + lockrules.LimitSuffix
		r.arg = int64(limit)
	}
}

// # What a kind needs of its store

// needsOneDeployment refuses, on a quorum Client, the kinds but the
// exclusive lock: they would need a majority's verdict on their sets.
func (k lockKind) needsOneDeployment() error {
	return invalidIf(k != exclusiveLock, "%s needs a Client on one Redis deployment (New); a quorum Client does not support it", k.rules().call)
}

// needsOneScript refuses, on a Ring, a multi lock: one script cannot span
// its shards.
func (k lockKind) needsOneScript() error {
	return invalidIf(k == multiLock, "AcquireMulti needs one server, Sentinel or a Cluster: a Ring's shards are independent servers, which one script cannot span")
}

// # The argument layout of each kind's scripts

// commands builds the prepared commands: SET NX (the fast path of the kinds
// that set alone, see singleStore.acquire) and the release: the key, the queue's keys,
// extraKey, the token, and how to announce and hand over (a semaphore's
// with the limit its set keeps).
func (r *lockRef) commands(o *options) {
	if r.kind.rules().setsAlone {
		r.setArgs = [6]any{"set", r.keyArg, &r.token, "nx", "px", r.ttlArg}
	}
	handover := o.handoverArg
	if r.kind == semaphoreSlot {
		handover = fmt.Sprint(handover, " ", r.arg)
	}
	r.releaseArgs = [9]any{"evalsha", r.kind.rules().releaseSHA, 4, r.keyArg, &r.queueKey, &r.expiryKey,
		&r.extraKey, &r.token, handover}
}

// acquireCommand returns the next attempt's EVALSHA: with the fence counter
// when fenced, and the queue's keys when the caller waits (for an exclusive
// lock only when queue is set).
func (r *lockRef) acquireCommand(queue bool) []any {
	if r.acquireArgs == nil {
		// Not in the lock itself: an uncontended plain lock never needs it.
		r.acquireArgs = new([14]any)
	}
	a := append(r.acquireArgs[:0], "evalsha", r.kind.rules().acquireSHA, 0, r.keyArg)
	if r.kind != exclusiveLock {
		a = append(a, r.extraKey, &r.queueKey, &r.expiryKey)
	}
	fenced, wait := "0", any("0")
	if r.fenced {
		a, fenced = append(a, &r.fenceKey), "1"
	}
	if r.waiting && (queue || r.kind != exclusiveLock) {
		wait = queueHoldArg
		if r.kind == exclusiveLock {
			a = append(a, &r.queueKey, &r.expiryKey)
		}
		a = append(a, &r.leftKey) // last: a waiter that left takes nothing
	}
	a[2] = len(a) - 3
	switch r.kind {
	case sharedHold:
		return append(a, &r.token, r.ttlArg, fenced, wait, r.releaseArgs[8])
	case semaphoreSlot:
		return append(a, &r.token, r.ttlArg, r.arg, fenced, wait)
	}
	return append(a, &r.token, r.ttlArg, fenced, wait)
}

// acquireOutOfQueue and releaseOutOfQueue are r's acquire and release
// without the queue's keys, for a slot in migration, which refuses scripts
// whose keys are not all there: an exclusive lock then takes and releases
// without a place in the queue (and without handing on). Other kinds
// cannot: nil. Built only when asked (the acquire rewrites acquireArgs,
// which the attempt before it may still be sending); the release is rare:
// built here, not kept in every lock.
func (r *lockRef) acquireOutOfQueue() []any {
	if r.kind != exclusiveLock {
		return nil
	}
	return r.acquireCommand(false)
}

func (r *lockRef) releaseOutOfQueue() []any {
	if r.kind != exclusiveLock {
		return nil
	}
	return []any{"evalsha", releaseSHA, 1, r.keyArg, &r.token, r.releaseArgs[8]}
}

// scriptKeys are the keys of k's extend and pttl scripts (kindRules.extend
// and pttl; a semaphore's pttl reads only the first).
func (k lockKind) scriptKeys(key, extraKey string) []string {
	if k.rules().holdersKey {
		return []string{key, extraKey}
	}
	return []string{key}
}

// # How a kind's callers wait

// plan decides how the call waits: a waiter on a single deployment queues on
// the server, one token for all attempts. Elsewhere (and multi) each
// attempt has its own, so a late answer to an earlier one, or its clean-up,
// cannot touch this one's key; a multi waiter watches under a watcher's
// token of its own.
func (a *acquisition) plan(waitsOnServer bool) {
	k := a.kind.rules()
	a.queued = waitsOnServer && k.queuesOnServer
	a.l.ref.waiting = waitsOnServer
	a.freshTokens = !a.queued && !k.oneToken
	if waitsOnServer && !k.queuesOnServer {
		a.l.ref.multi.watcher = "~" + rand.Text()
	}
}

// waitKey is the name whose room the call waits in: its own; a multi
// lock's, the name that kept its last attempt out ("" before one did).
func (a *acquisition) waitKey() string {
	m := a.l.ref.multi
	switch {
	case m == nil:
		return a.l.ref.key
	case a.blocker == "":
		return ""
	}
	return m.keys[m.blocker]
}

// # How Inspect reads each kind (lua/state.lua)

// The kinds of lock Info.Kind names, as lua/state.lua does.
const (
	kindLock      = "lock"
	kindShared    = "shared"
	kindSemaphore = "semaphore"
)

// readKind checks what state.lua read of a held lock against its kind
// (count: its holders; limit: a semaphore's limit key; holder and
// metadata: an exclusive holder's) and fills info's kind-specific fields;
// ok false: no kind looks like that.
func readKind(info *Info, kind string, count int64, limit, metadata, holder string, holders int) (ok bool, err error) {
	info.Count = int(count)
	switch {
	case kind == kindLock && count == 0 && limit == "" && holders == 3:
		info.Count = 1
	case kind == kindShared && limit == "" && metadata == "":
		info.Shared = int(count)
	case kind == kindSemaphore && count > 0 && metadata == "" && holder == "":
		if limit != "" {
			n, err := strconv.Atoi(limit)
			if err != nil || n < 1 {
				return false, notALockError{fmt.Sprintf("the semaphore's limit holds %q, not a number of slots", limit), nil}
			}
			info.Limit = n
		}
	default:
		return false, nil
	}
	return true, nil
}

// # The error words of each kind

// subject names the lock in errors: its kind's word, then subjectName.
func (a *acquisition) subject() string { return a.kind.rules().word + a.subjectName() }

// subjectName is subject without the kind's word: a multi lock's first
// name, and how many more it has.
func (a *acquisition) subjectName() string {
	if m := a.l.ref.multi; m != nil && len(m.names) > 1 {
		return fmt.Sprintf("%q and %d more names", a.name, len(m.names)-1)
	}
	return fmt.Sprintf("%q", a.name)
}

// heldSubject is subject, and a multi lock's name that kept it out.
func (a *acquisition) heldSubject() string {
	if a.kind == multiLock && a.blocker != "" {
		return fmt.Sprintf("%s: %q", a.subject(), a.blocker)
	}
	return a.subject()
}

// heldWords says why the lock was not acquired. A multi lock's are its
// heldSubject's: the words are reached only after a refusal, which names
// the blocker (see acquisition.attempt).
func (a *acquisition) heldWords() string {
	switch a.kind {
	case sharedHold:
		return a.subject() + " is held exclusively or an exclusive waiter is ahead" + a.holderLeft()
	case semaphoreSlot:
		return fmt.Sprintf("%s has all %d slots held", a.subject(), a.l.ref.arg)
	}
	return a.heldSubject() + " is held by another holder" + a.holderLeft()
}
