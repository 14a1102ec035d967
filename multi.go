package redislock

import (
	"cmp"
	"context"
	"crypto/rand"
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
	var perCall options
	applyOptions(&perCall, opts)
	if perCall.failOpen {
		return nil, invalidf("WithFailOpen applies to RunWithLock only: AcquireMulti cannot hand out locks it does not hold")
	}
	o, err := c.resolve(opts)
	if err != nil {
		return nil, err
	}
	single, ok := c.store.(singleStore)
	if !ok {
		return nil, invalidf("AcquireMulti needs a Client on one Redis deployment (New); a quorum Client does not support it")
	}
	if _, ring := single.rdb.(*redis.Ring); ring {
		return nil, invalidf("AcquireMulti needs one server, Sentinel or a Cluster: a Ring's shards are independent servers, which one script cannot span")
	}
	m, err := newMultiRef(single, o.prefix, o.fencing, names)
	if err != nil {
		return nil, err
	}
	if _, _, err := c.begin(ctx, "acquire multi", o.prefix, names[0]); err != nil {
		return nil, err
	}
	defer c.calls.exit()
	c.checkServer(ctx, o)
	a := multiAcquisition{roomCall: roomCall{call: call{c: c, ctx: ctx, parent: ctx, o: o, name: names[0], what: "acquire multi", start: time.Now()}, rooms: &c.semaphores}}
	a.init(m)
	defer a.close()
	return a.run()
}

// multiRef is what a multi lock's store commands need beyond its lockRef:
// every name's keys, in the order they are taken, and the groups one
// script each takes. Written before the Lock is handed out and never
// again, except lost.
type multiRef struct {
	first     string   // the caller's names[0]
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
func newMultiRef(s singleStore, prefix string, fencing bool, names []string) (*multiRef, error) {
	type entry struct {
		name, key string
		slot      int
	}
	_, cluster := s.rdb.(*redis.ClusterClient)
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
	m := &multiRef{first: names[0], index: index}
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
	m := l.ref.multi
	if m == nil {
		return l.fence, name == l.name && l.fence > 0
	}
	i, ok := m.index[name]
	if !ok || m.fences[i] <= 0 {
		return 0, false
	}
	return m.fences[i], true
}

// lostName is the name a loss of l reports: for a multi lock, the name
// found gone or someone else's (the first name when none was).
func (l *Lock) lostName() string {
	if l.ref.multi != nil {
		return l.ref.multi.lostName()
	}
	return l.name
}

// multiAcquisition is one AcquireMulti call.
type multiAcquisition struct {
	// roomCall's room: this Client's listeners to the release
	// announcements of the name that kept the last attempt out.
	roomCall
	m       *multiRef
	blocker string // the name found held by the last attempt
	fences  []int64
	// watcher is the caller's entry in the queue of the name that keeps
	// it out, while it waits (see lua/multi_acquire.lua).
	watcher string
}

func (a *multiAcquisition) init(m *multiRef) {
	a.m = m
	a.l = &Lock{client: a.c, opts: a.o, name: m.first}
	r := &a.l.ref
	r.key = m.keys[m.index[m.first]]
	r.keyArg, r.ttlArg, r.fenced, r.multi = r.key, a.o.ttlArg, a.o.fencing, m
	a.fences = make([]int64, len(m.names))
	a.patience.strategy = a.o.retry
	a.waits = a.patience.mayWait()
	if a.waits {
		a.watcher = "~" + rand.Text()
	}
	a.capWait(false)
}

// attempt takes the names group by group, under a token of its own (a late
// reply to an earlier attempt, or its clean-up, then cannot touch this
// one's keys); when a group finds a name held, it gives back what the
// groups before took, and records who kept it out.
func (a *multiAcquisition) attempt() (bool, error) {
	if err := a.begin(a); err != nil {
		return false, err
	}
	ref := &a.l.ref
	ref.token = valueOf(rand.Text(), a.o.metadata)
	store := a.c.store.(singleStore)
	fenced, wait := "0", any("0")
	if a.o.fencing {
		fenced = "1"
	}
	if a.waits {
		wait = queueHoldArg
	}
	n := len(a.m.keys)
	for gi, g := range a.m.groups {
		keys := a.m.keys[g.from:g.to]
		if a.o.fencing {
			keys = append(slices.Clip(keys), a.m.fenceKeys[g.from:g.to]...)
		}
		if a.waits {
			keys = append(slices.Clip(keys), a.m.queues[g.from:g.to]...)
			keys = append(keys, a.m.queues[n+g.from:n+g.to]...)
		}
		cmd, ackErr := runScript(a.ctx, store.rdb, a.o, multiAcquireScript, keys, ref.token, a.o.ttl.Milliseconds(), fenced, wait, a.watcher)
		took, heldAt, holder, err := parseMultiAcquire(cmd, a.fences[g.from:g.to], a.o.fencing)
		if err == nil && took && ackErr != nil {
			err = ackErr // not safe to hold: a failover could lose it
			gi++         // given back with the others
		}
		if err != nil {
			var reply redis.Error
			if errors.As(err, &reply) || ackErr != nil {
				// This group answered: give back what the attempt took.
				// (One without an answer is call.failed's: the janitor
				// gives back every name, this group's included.)
				a.giveBack(gi)
			}
			return false, a.failed(err)
		}
		if !took {
			a.giveBack(gi)
			a.blocker = a.m.names[g.from+heldAt]
			a.heldFor(holder)
			return false, nil
		}
	}
	return true, nil
}

// giveBack releases, token-checked, what the first upto groups took in
// this attempt, on a context detached from the caller's; if that fails the
// janitor keeps trying. It waits for the reply, so that a failed
// AcquireMulti returns with nothing held.
func (a *multiAcquisition) giveBack(upto int) {
	if upto == 0 {
		return
	}
	// A copy: the next attempt has a token of its own, which a late
	// clean-up of this one must not use.
	ref := &lockRef{key: a.l.ref.key, keyArg: a.l.ref.keyArg, token: a.l.ref.token, multi: a.m}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(a.ctx), ReleaseTimeout)
	defer cancel()
	if _, err := a.c.store.(singleStore).releaseMulti(ctx, ref, upto); err != nil {
		a.c.janitor().add(ref, a.sent.Add(a.o.ttl))
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

func (a *multiAcquisition) failed(err error) error { return a.failedIn(a, err) }

// succeed hands out the Lock (every name given back when the reply came
// after the lease's safe deadline), its fence the first name's.
func (a *multiAcquisition) succeed() (*Lock, error) {
	a.m.fences = a.fences
	a.fence = a.fences[a.m.index[a.m.first]]
	return a.roomCall.succeed()
}

// nextWake: a multi waiter keeps its watcher by coming back, as a queued
// waiter keeps its place.
func (a *multiAcquisition) nextWake() time.Time { return a.wakeTime(a.waits) }

func (a *multiAcquisition) run() (*Lock, error) { return a.runIn(a) }

// listen: the releases of the name that kept the last attempt out. Only
// the first name found held matters: the attempt goes no further.
func (a *multiAcquisition) listen() (key, channel string) {
	key = a.m.keys[a.m.index[a.blocker]]
	return key, lockrules.Released(key)
}

// describe names the call in errors: its first name and how many more.
func (a *multiAcquisition) describe() string {
	if n := len(a.m.names); n > 1 {
		return fmt.Sprintf("multi lock %q and %d more names", a.m.first, n-1)
	}
	return fmt.Sprintf("multi lock %q", a.m.first)
}

func (a *multiAcquisition) heldError() error {
	return fmt.Errorf("%w: %s: %q is held by another holder%s, %s",
		ErrNotAcquired, a.describe(), a.blocker, a.holderLeft(), a.tally())
}

// stopped is the error of a wait that ended without a verdict: ctx ended,
// the cap passed, or the Client closed.
func (a *multiAcquisition) stopped(why error) error {
	switch {
	case errors.Is(why, errClosing):
		return fmt.Errorf("%w: acquire %s: gave up waiting", ErrClosed, a.describe())
	case a.attempts == 0 || a.blocker == "":
		return fmt.Errorf("redislock: acquire %s: the context ended before any attempt had an answer: %w", a.describe(), why)
	case context.Cause(a.ctx) == errWaitCap:
		return fmt.Errorf("%w: %s: %q still held after waiting %v, the cap for a context without deadline", ErrNotAcquired, a.describe(), a.blocker, MaxWaitWithoutDeadline)
	}
	return join(fmt.Errorf("%w: %s: %q held, gave up waiting after %d attempts", ErrNotAcquired, a.describe(), a.blocker, a.attempts), why)
}
