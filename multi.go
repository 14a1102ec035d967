package redislock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redislock/redislock/internal/lockrules"
)

// MaxMultiNames is the most names AcquireMulti takes at once. Every
// extension of a multi lock reads all of its keys, so a set far beyond a
// thousand names is a mistake, not a setting.
const MaxMultiNames = 1000

// AcquireMulti takes the locks called names, all of them or none, as one
// Lock: for work that must hold several names at once (two accounts of a
// transfer, every file of a batch).
//
// Each name is the lock Acquire would take (the same key, so Acquire of
// one of the names waits for the multi lock and the other way round, and
// Inspect of one of them shows the holder and its metadata). The Lock has
// one token, written to every name, one lease, one context and one
// watchdog entry: every extension extends all the names, and if any of
// them is found gone or held by another token, the whole lock is lost (its
// context is cancelled with a *LostError naming that name). Release
// releases all of them.
//
// On one server (or Sentinel) one script takes every name atomically. On a
// Redis Cluster the names are taken one hash slot at a time, each slot's
// names by one script, in one global order (by slot, then name); when a
// name is found held, what this attempt took is given back before the call
// waits or fails. No caller holds a name while it waits for another, so
// callers with overlapping sets never deadlock. A NewQuorum Client, and a
// go-redis Ring (whose shards one script cannot span), refuse it.
//
// With WithFencing each name gets a fence from its own counter, as Acquire
// would give it: Lock.FenceOf(name) returns it, and Lock.Fence (and
// FenceFromContext) the fence of names[0]. Lock.Name and Lock.Key are
// names[0]'s too. WithMetadata applies to every name.
//
// Waiting follows the retry strategy as Acquire does (default: no wait),
// bounded by ctx (and MaxWaitWithoutDeadline when ctx has no deadline),
// with one difference: a multi waiter is never handed a name. It watches
// the name that kept it out (a watcher in that name's queue, which makes
// its release announce itself), and tries again when the release is
// heard, when the holder's lease of that name would end, or when its
// backoff ends, whichever comes first.
//
// Errors: as Acquire's, the name in ErrNotAcquired being the name found
// held; ErrInvalidArgument (nothing sent) for a nil ctx, no names, more
// than MaxMultiNames, an empty or twice-given name, WithFailOpen, or a
// quorum or Ring Client. A failed call leaves no name held: what an attempt
// took is given back, token-checked, and what an attempt without an answer
// may have taken is given back in the background until its lease would
// have run out. On success the caller must call Lock.Release.
func (c *Client) AcquireMulti(ctx context.Context, names []string, opts ...Option) (*Lock, error) {
	if err := c.usable(); err != nil {
		return nil, err
	}
	switch {
	case ctx == nil:
		return nil, invalidf("nil context")
	case len(names) == 0:
		return nil, invalidf("AcquireMulti needs at least one name")
	case len(names) > MaxMultiNames:
		return nil, invalidf("AcquireMulti of %d names is over the %d-name limit", len(names), MaxMultiNames)
	}
	o, err := c.callOptions(multiLock, opts)
	if err != nil {
		return nil, err
	}
	m, err := newMultiRef(c.store.slotted(), o.prefix, o.fencing, names)
	if err != nil {
		return nil, err
	}
	return c.take(ctx, multiLock, names[0], opts, func(_ *options, r *lockRef) { r.multi = m })
}

// multiRef is what a multi lock's store commands need beyond its lockRef:
// every name's keys, in the order they are taken, and the groups one
// script each takes. Written before the Lock is handed out and never
// again, except lost.
type multiRef struct {
	first string // the caller's names[0]
	// blocker is the place in names of the name that kept the last
	// attempt out; watcher the caller's entry in its queue while it waits
	// (see lua/multi_acquire.lua). Written by the attempts only.
	blocker int
	watcher string
	// commands are the attempts' EVALSHAs, one per group, built by the
	// first attempt.
	commands  [][]any
	names     []string // by hash slot (on a cluster), then name
	keys      []string // the names' lock keys, in that order
	fenceKeys []string // their fence counters; nil without fencing
	// queues: their queues, then the queues' expiries, where a waiting
	// caller's watcher goes (see lua/multi_acquire.lua)
	queues []string
	groups []multiGroup
	index  map[string]int // name -> its place in names
	fences []int64        // by names' order, once acquired
	// lost is 1 + the place of the last name a script found gone or
	// someone else's, 0 if none: the name a loss reports.
	lost atomic.Int64
}

// multiGroup is a run of names[from:to] that one script takes: all of
// them on one server, one hash slot's on a cluster.
type multiGroup struct{ from, to int }

// newMultiRef checks names and lays out their keys: an invalid-argument
// error for an empty name, a name given twice, or a name Acquire would
// refuse.
func newMultiRef(cluster bool, prefix string, fencing bool, names []string) (*multiRef, error) {
	type entry struct {
		name, key string
		slot      int
	}
	entries := make([]entry, len(names))
	index := make(map[string]int, len(names))
	for i, name := range names {
		if name == "" {
			return nil, invalidf("AcquireMulti: names[%d] is empty", i)
		}
		if j, twice := index[name]; twice {
			return nil, invalidf("AcquireMulti: %q is given twice (names[%d] and names[%d])", name, j, i)
		}
		index[name] = i
		key, err := lockrules.Lock(prefix, name)
		if err != nil {
			return nil, invalidf("AcquireMulti: names[%d]: %v", i, err)
		}
		e := entry{name: name, key: key}
		if cluster {
			e.slot = lockrules.Slot(key)
		}
		entries[i] = e
	}
	// One global order, so that two callers with overlapping sets take
	// the names they share in the same order.
	slices.SortFunc(entries, func(a, b entry) int {
		return cmp.Or(cmp.Compare(a.slot, b.slot), strings.Compare(a.name, b.name))
	})
	m := &multiRef{first: names[0], index: index, fences: make([]int64, len(names))}
	m.names, m.keys = make([]string, len(entries)), make([]string, len(entries))
	m.queues = make([]string, 2*len(entries))
	if fencing {
		m.fenceKeys = make([]string, len(entries))
	}
	for i, e := range entries {
		m.names[i], m.keys[i] = e.name, e.key
		m.queues[i], m.queues[len(entries)+i] = lockrules.Queue(e.key), lockrules.Expiry(e.key)
		if fencing {
			m.fenceKeys[i] = lockrules.Fence(e.key)
		}
		index[e.name] = i
		if i == 0 || e.slot != entries[i-1].slot {
			m.groups = append(m.groups, multiGroup{from: i})
		}
		m.groups[len(m.groups)-1].to = i + 1
	}
	return m, nil
}

// lostName returns the name a loss reports: the one a script found gone
// or someone else's, or else first.
func (m *multiRef) lostName() string {
	if i := m.lost.Load(); i > 0 {
		return m.names[i-1]
	}
	return m.first
}

// verdict reads the {code, i} reply of the extend, release and pttl
// scripts run on group g: code (for pttl, {pttl} reads as the TTL), and
// when it is not 1 (or a TTL), records names[g.from+i-1] as lost.
func (m *multiRef) verdict(cmd *redis.Cmd, g multiGroup) (int64, error) {
	vals, err := cmd.Slice()
	if err != nil {
		return 0, err
	}
	code, ok := vals[0].(int64)
	if !ok || len(vals) > 2 {
		return 0, fmt.Errorf("unexpected reply %v from a multi lock script", vals)
	}
	if len(vals) == 2 {
		i, ok := vals[1].(int64)
		if !ok || i < 1 || i > int64(g.to-g.from) {
			return 0, fmt.Errorf("unexpected reply %v from a multi lock script", vals)
		}
		m.lost.Store(int64(g.from) + i)
	}
	return code, nil
}

// runGroups runs script on every group of m (or the first upto), in one
// pipeline (a cluster splits it by node), with EVAL for those that met
// NOSCRIPT, and returns each group's command.
func (s singleStore) runGroups(ctx context.Context, script *redis.Script, m *multiRef, upto int, args ...any) []*redis.Cmd {
	groups := m.groups[:upto]
	cmds := make([]*redis.Cmd, len(groups))
	if len(groups) == 1 {
		cmds[0] = script.Run(ctx, s.rdb, m.keys[groups[0].from:groups[0].to], args...)
		return cmds
	}
	pipe := s.rdb.Pipeline()
	for i, g := range groups {
		cmds[i] = script.EvalSha(ctx, pipe, m.keys[g.from:g.to], args...)
	}
	_, _ = pipe.Exec(ctx) // errors are read per command
	again := false
	for i, g := range groups {
		if err := cmds[i].Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			cmds[i], again = script.Eval(ctx, pipe, m.keys[g.from:g.to], args...), true
		}
	}
	if again {
		_, _ = pipe.Exec(ctx)
	}
	return cmds
}

// combine folds the groups' verdicts into the lock's: the first "not
// ours" wins over errors (the lock is lost whatever the others say),
// then the first error, else done.
func combine(m *multiRef, cmds []*redis.Cmd) (int64, error) {
	var firstErr error
	for i, cmd := range cmds {
		code, err := m.verdict(cmd, m.groups[i])
		switch {
		case err != nil:
			firstErr = cmp.Or(firstErr, err)
		case code != replyDone:
			return code, nil
		}
	}
	return replyDone, firstErr
}

// extendMulti extends every name of ref's multi lock: replyDone, or
// replyGone / replyForeign for the whole lock when one name is not ours
// (recorded in lost). With WithReplicaAck (one group: not on a cluster)
// the script goes with its WAIT.
func (s singleStore) extendMulti(ctx context.Context, o *options, m *multiRef, token string, ttl time.Duration) (int64, error) {
	if o.replicas > 0 {
		cmd, ackErr := runScript(ctx, s.rdb, o, multiExtendScript, m.keys, token, ttl.Milliseconds())
		reply, err := m.verdict(cmd, m.groups[0])
		if err == nil && reply == replyDone && ackErr != nil {
			err = ackErr // extended on the primary only: not confirmed
		}
		return reply, err
	}
	return combine(m, s.runGroups(ctx, multiExtendScript, m, len(m.groups), token, ttl.Milliseconds()))
}

// releaseMulti deletes every name of ref's multi lock (of its first upto
// groups) that holds ref.token, and announces each release; replies as
// release.
func (s singleStore) releaseMulti(ctx context.Context, ref *lockRef, upto int) (int64, error) {
	m := ref.multi
	reply, err := combine(m, s.runGroups(ctx, multiReleaseScript, m, upto, ref.token, s.publishCommand()))
	if err == nil {
		s.ranScript()
	}
	return reply, err
}

// pttlMulti returns the shortest lease left among the names of ref's
// multi lock, or -2 (gone) / -3 (foreign) for the first name not ours.
func (s singleStore) pttlMulti(ctx context.Context, ref *lockRef) (int64, error) {
	m := ref.multi
	cmds := s.runGroups(ctx, multiPTTLScript, m, len(m.groups), ref.token)
	shortest := int64(-1)
	for i, cmd := range cmds {
		reply, err := m.verdict(cmd, m.groups[i])
		switch {
		case err != nil:
			return 0, err
		case reply < -1:
			return reply, nil
		case reply >= 0 && (shortest < 0 || reply < shortest):
			shortest = reply
		}
	}
	return shortest, nil
}

// abandonWithMulti is abandon for refs among which some are multi locks:
// those are released one by one (each its groups in one pipeline), the
// others as abandon does.
func (s singleStore) abandonWithMulti(ctx context.Context, refs []*lockRef) ([]int64, []error) {
	replies, errs := make([]int64, len(refs)), make([]error, len(refs))
	var singles []*lockRef
	var at []int
	for i, ref := range refs {
		if ref.multi != nil {
			replies[i], errs[i] = s.releaseMulti(ctx, ref, len(ref.multi.groups))
			continue
		}
		singles, at = append(singles, ref), append(at, i)
	}
	if len(singles) > 0 {
		r, e := s.abandon(ctx, singles)
		for j, i := range at {
			replies[i], errs[i] = r[j], e[j]
		}
	}
	return replies, errs
}

// FenceOf returns the fencing token that the lock took for name: for a
// Lock from AcquireMulti with WithFencing, the fence of each of its names;
// for any other Lock, Fence() when name is its name. It reports false when
// name is not one of the lock's names, when the lock was taken without
// WithFencing, and on a nil Lock.
func (l *Lock) FenceOf(name string) (int64, bool) {
	if l == nil {
		return 0, false
	}
	m := l.h.ref.multi
	if m == nil {
		return l.h.fence, name == l.h.name && l.h.fence > 0
	}
	i, ok := m.index[name]
	if !ok || m.fences[i] <= 0 {
		return 0, false
	}
	return m.fences[i], true
}

// lostName is the name a loss of l reports: for a multi lock, the name
// found gone or someone else's (the first name when none was).
func (l *hold) lostName() string {
	if l.ref.multi != nil {
		return l.ref.multi.lostName()
	}
	return l.name
}

// acquireMulti makes one attempt at every name of ref's multi lock, group
// by group, under the attempt's token (a late reply to an earlier attempt,
// or its clean-up, then cannot touch this one's keys); when a group finds
// a name held, it gives back what the groups before it took, and records
// which name kept it out (multiRef.blocker). A waiting caller's watcher
// goes in that name's queue (see lua/multi_acquire.lua).
func (s singleStore) acquireMulti(ctx context.Context, o *options, ref *lockRef) (bool, int64, time.Duration, error) {
	m := ref.multi
	if m.commands == nil {
		m.commands = m.acquireCommands(ref, o)
	}
	for gi, g := range m.groups {
		var cmd *redis.Cmd
		var ackErr error
		if o.replicas > 0 {
			cmd, ackErr = runAcked(ctx, s.rdb, o, multiAcquireSource, m.commands[gi])
		} else {
			cmd = s.run(ctx, multiAcquireSource, m.commands[gi], ref.waiting)
		}
		took, heldAt, holder, err := parseMultiAcquire(cmd, m.fences[g.from:g.to], o.fencing)
		if err == nil && took && ackErr != nil {
			err = ackErr // not safe to hold: a failover could lose it
			gi++         // given back with the others
		}
		if err != nil {
			var reply redis.Error
			if errors.As(err, &reply) || ackErr != nil {
				// This group answered: give back what the attempt took.
				// (One without an answer is the acquisition's: the
				// janitor gives back every name, this group's included.)
				s.giveBack(ref, gi, o.ttl)
			}
			return false, 0, 0, err
		}
		if !took {
			s.giveBack(ref, gi, o.ttl)
			m.blocker = g.from + heldAt
			return false, 0, holder, nil
		}
	}
	return true, 0, 0, nil
}

// acquireCommands builds the EVALSHA of each group's attempt, under ref's
// token (read when sent: every attempt has its own).
func (m *multiRef) acquireCommands(ref *lockRef, o *options) [][]any {
	fenced, wait := "0", any("0")
	if o.fencing {
		fenced = "1"
	}
	if ref.waiting {
		wait = queueHoldArg
	}
	n := len(m.keys)
	commands := make([][]any, len(m.groups))
	for i, g := range m.groups {
		keys := m.keys[g.from:g.to]
		if o.fencing {
			keys = append(slices.Clip(keys), m.fenceKeys[g.from:g.to]...)
		}
		if ref.waiting {
			keys = append(slices.Clip(keys), m.queues[g.from:g.to]...)
			keys = append(keys, m.queues[n+g.from:n+g.to]...)
		}
		command := make([]any, 0, 3+len(keys)+5)
		command = append(command, "evalsha", multiAcquireSHA, len(keys))
		for _, key := range keys {
			command = append(command, key)
		}
		commands[i] = append(command, &ref.token, ref.ttlArg, fenced, wait, m.watcher)
	}
	return commands
}

// giveBack releases, token-checked, what the first upto groups of ref took
// in this attempt, on a context detached from the caller's; if that fails
// the janitor keeps trying. It waits for the reply, so that a failed
// AcquireMulti returns with nothing held.
func (s singleStore) giveBack(ref *lockRef, upto int, ttl time.Duration) {
	if upto == 0 {
		return
	}
	// A copy: the next attempt has a token of its own, which a late
	// clean-up of this one must not use.
	taken := &lockRef{key: ref.key, keyArg: ref.keyArg, token: ref.token, kind: multiLock, multi: ref.multi}
	ctx, cancel := context.WithTimeout(context.Background(), ReleaseTimeout)
	defer cancel()
	if _, err := s.releaseMulti(ctx, taken, upto); err != nil && s.cleaner != nil {
		s.cleaner.add(taken, time.Now().Add(ttl))
	}
}

// parseMultiAcquire reads multi_acquire.lua's reply into fences.
func parseMultiAcquire(cmd *redis.Cmd, fences []int64, fencing bool) (took bool, heldAt int, holder time.Duration, err error) {
	vals, err := cmd.Slice()
	if err != nil {
		return false, 0, 0, err
	}
	bad := fmt.Errorf("unexpected reply %v from the multi acquire script", vals)
	code, _ := vals[0].(int64)
	switch {
	case code == 1 && len(vals) == len(fences)+1:
		for i := range fences {
			f, ok := vals[i+1].(int64)
			if !ok || fencing != (f > 0) || f < 0 {
				return false, 0, 0, bad
			}
			fences[i] = f
		}
		return true, 0, 0, nil
	case code == 0 && len(vals) == 3:
		i, ok1 := vals[1].(int64)
		pttl, ok2 := vals[2].(int64)
		if !ok1 || !ok2 || i < 1 || i > int64(len(fences)) {
			return false, 0, 0, bad
		}
		return false, int(i - 1), holderTTL(pttl), nil
	}
	return false, 0, 0, bad
}
