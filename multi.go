package redislock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redislock/redislock/internal/lockrules"
)

// MaxMultiNames is the most names AcquireMulti takes at once: every
// extension reads all of them, so far more is a mistake, not a setting.
const MaxMultiNames = 1000

// AcquireMulti takes the locks called names (each the lock Acquire would
// take), all or none, as one Lock with one token, lease, context and
// watchdog entry: a name found gone or taken loses the whole lock (its
// *LostError names it). On a Cluster names are taken a hash slot at a time
// in one global order, and an attempt gives back what it took before it
// waits or fails: overlapping sets never deadlock. With WithFencing each
// name has its fence (Lock.FenceOf); Fence, Name and Key are names[0]'s.
// Waiting is Acquire's, but a waiter is never handed a name: it tries again
// when the name that kept it out is released or would expire. Uncontended
// it costs what Acquire does: the names' SET NX PX in one round trip (for
// a caller that neither waits nor fences, names in one slot); when one is
// taken the others go back before a script decides, so for that round trip
// another caller may find a name held by an attempt that then fails.
//
// Errors: as Acquire's (ErrNotAcquired names the name found held);
// ErrInvalidArgument (nothing sent) for a nil ctx, no names, more than
// MaxMultiNames, an empty or repeated name, WithFailOpen, or a quorum or
// Ring Client. A failed call leaves no name held. On success the caller
// must call Lock.Release.
func (c *Client) AcquireMulti(ctx context.Context, names []string, opts ...Option) (*Lock, error) {
	switch err := c.usable(); {
	case err != nil:
		return nil, err
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
	return c.acquire(ctx, multiLock, names[0], o, func(_ *options, r *lockRef) { r.multi = m })
}

// multiRef is what a multi lock's commands need beyond its lockRef: every
// name's keys, in the order they are taken, and the groups one script each
// takes. Written before the Lock is handed out, and never again but lost.
type multiRef struct {
	firstAt int // the place in names of the caller's names[0], the Lock's name
	// blocker: the place of the name that kept the last attempt out;
	// watcher: our entry in its queue (see lua/multi_acquire.lua).
	blocker int
	watcher string
	// acquires: an attempt's EVALSHA per group (see prepareFor); a
	// release's are prepared when it is sent (see releaseMulti).
	acquires [][]any
	names    []string // by hash slot (on a cluster), then name
	keys     []string // the names' lock keys, in that order
	// spans: "prefix{name}:qx": a name's key and queue's keys are prefixes
	// (a span is its queue's expiries' key); queueKeys: the queues.
	spans     []string
	queueKeys []string
	fenceKeys []string // their fence counters; nil without fencing
	groups    []multiGroup
	oneGroup  [1]multiGroup // groups' array on one server
	fences    []int64       // by names' order, once acquired
	fewFences [4]int64      // fences' array for a few names
	// slotted: on a Cluster, which routes a command by its first key: a
	// string (see keyArg).
	slotted bool
	// lost: 1 + the place of the last name found not ours (0: none).
	lost atomic.Int64
}

// multiGroup is names[from:to], taken by one script: a hash slot's on a cluster.
type multiGroup struct{ from, to int }

// newMultiRef checks names as Acquire would, refuses one given twice, and
// lays out their keys.
func newMultiRef(cluster bool, prefix string, fencing bool, names []string) (*multiRef, error) {
	type entry struct {
		name, span string
		keyLen     int
		slot, at   int
	}
	var few [8]entry // (most calls: no allocation)
	entries := append(few[:0], make([]entry, len(names))...)
	bad, err := lockrules.AllWithExpiry(prefix, names, func(i int, span string, keyLen int) {
		entries[i] = entry{name: names[i], span: span, keyLen: keyLen, at: i}
		if cluster {
			entries[i].slot = lockrules.Slot(span[:keyLen])
		}
	})
	switch {
	case errors.Is(err, lockrules.ErrEmptyName):
		return nil, invalidf("AcquireMulti: names[%d] is empty", bad)
	case err != nil:
		return nil, invalidf("AcquireMulti: names[%d]: %v", bad, err)
	}
	// One global order: overlapping sets take their common names in one order.
	slices.SortFunc(entries, func(a, b entry) int {
		return cmp.Or(cmp.Compare(a.slot, b.slot), strings.Compare(a.name, b.name), cmp.Compare(a.at, b.at))
	})
	m := &multiRef{slotted: cluster}
	m.fences = append(m.fewFences[:0], make([]int64, len(names))...)
	n := len(entries)
	all := make([]string, 4*n)
	m.names, m.keys, m.spans, m.queueKeys = all[:n], all[n:2*n], all[2*n:3*n], all[3*n:]
	if fencing {
		m.fenceKeys = make([]string, len(entries))
	}
	m.groups = m.oneGroup[:0]
	for i, e := range entries {
		if i > 0 && e.name == entries[i-1].name {
			return nil, invalidf("AcquireMulti: %q is given twice (names[%d] and names[%d])", e.name, entries[i-1].at, e.at)
		}
		m.names[i], m.keys[i], m.spans[i], m.queueKeys[i] = e.name, e.span[:e.keyLen], e.span, e.span[:e.keyLen+2]
		if fencing {
			m.fenceKeys[i] = lockrules.Fence(m.keys[i])
		}
		if e.at == 0 {
			m.firstAt = i
		}
		if i == 0 || e.slot != entries[i-1].slot {
			m.groups = append(m.groups, multiGroup{from: i})
		}
		m.groups[len(m.groups)-1].to = i + 1
	}
	return m, nil
}

// keyArg is names[i]'s key as a command's first key: a *string (boxed
// without an allocation) where nothing routes by it, a string on a Cluster.
func (m *multiRef) keyArg(i int) any {
	if m.slotted {
		return m.keys[i]
	}
	return &m.keys[i]
}

// fresh is m for another attempt's ref (see acquisition.giveBack): its
// layout shared, its commands to prepare, its fences and blocker its own.
func (m *multiRef) fresh() *multiRef {
	return &multiRef{firstAt: m.firstAt, watcher: m.watcher, names: m.names, keys: m.keys,
		spans: m.spans, queueKeys: m.queueKeys, fenceKeys: m.fenceKeys, groups: m.groups, fences: make([]int64, len(m.fences)), slotted: m.slotted}
}

// prepare returns each group's EVALSHA of sha on its names' keys, then their
// extra keys, then args; keys after the first go in as *string (see lockRef).
func (m *multiRef) prepare(sha any, extra [][]string, args ...any) [][]any {
	cmds := make([][]any, len(m.groups))
	for i, g := range m.groups {
		n := g.to - g.from
		cmd := make([]any, 0, 3+n*(1+len(extra))+len(args))
		cmd = append(cmd, "evalsha", sha, n*(1+len(extra)), m.keyArg(g.from))
		for j := g.from + 1; j < g.to; j++ {
			cmd = append(cmd, &m.keys[j])
		}
		for _, keys := range extra {
			for j := g.from; j < g.to; j++ {
				cmd = append(cmd, &keys[j])
			}
		}
		cmds[i] = append(cmd, args...)
	}
	return cmds
}

// verdict reads the reply of a group's extend, release or pttl script: a
// bare code (done, or pttl's lease), or {code, i}, which records
// names[g.from+i-1] as lost and comes only with a code of loss: gone (0
// from extend and release, -2 from pttl: gone is passed) or held by
// another (gone - 1).
func (m *multiRef) verdict(cmd *redis.Cmd, g multiGroup, gone int64) (int64, error) {
	if code, ok := cmd.Val().(int64); ok && cmd.Err() == nil {
		return code, nil
	}
	vals, err := cmd.Slice()
	if err != nil {
		return 0, err
	}
	var code, i int64 // i: 1 + the place in g of the first name not ours
	ok := len(vals) == 2
	if ok {
		code, ok = vals[0].(int64)
		var okAt bool
		i, okAt = vals[1].(int64)
		ok = ok && okAt && (code == gone || code == gone-1) && i >= 1 && i <= int64(g.to-g.from)
	}
	if !ok {
		return 0, fmt.Errorf("unexpected reply %v from a multi lock script", vals)
	}
	m.lost.Store(int64(g.from) + i)
	return code, nil
}

// runGroups sends the first upto of cmds: one through the batcher, several
// in one pipeline (see runScripts).
func (s singleStore) runGroups(ctx context.Context, cmds [][]any, upto int) []*redis.Cmd {
	if upto == 1 {
		return []*redis.Cmd{s.run(ctx, cmds[0], false)}
	}
	replies := make([]*redis.Cmd, upto)
	for i := range upto {
		replies[i] = scriptCmd(ctx, cmds[i])
	}
	runScripts(ctx, replies, s.pipelined(ctx, false))
	return replies
}

// combine folds the groups' verdicts: the first "not ours" wins over errors
// (the lock is lost whatever the others say), then the first error.
func combine(m *multiRef, cmds []*redis.Cmd) (int64, error) {
	var firstErr error
	for i, cmd := range cmds {
		code, err := m.verdict(cmd, m.groups[i], 0)
		switch {
		case err != nil:
			firstErr = cmp.Or(firstErr, err)
		case code != replyDone:
			return code, nil
		}
	}
	return replyDone, firstErr
}

// extendMulti extends every name: replyDone, or the whole lock's loss when
// a name is not ours (see lost); with WithReplicaAck, one group and its WAIT.
func (s singleStore) extendMulti(ctx context.Context, o *options, m *multiRef, token string, ttl time.Duration) (int64, error) {
	if o.replicas > 0 {
		cmd, ackErr := runAcked(ctx, s.rdb, o, m.prepare(multiExtendSHA, nil, token, ttl.Milliseconds())[0])
		reply, err := m.verdict(cmd, m.groups[0], 0)
		if err == nil && reply == replyDone && ackErr != nil {
			err = ackErr // extended on the primary only: not confirmed
		}
		return reply, err
	}
	return combine(m, s.runGroups(ctx, m.prepare(multiExtendSHA, nil, token, ttl.Milliseconds()), len(m.groups)))
}

// releaseMulti deletes the names of ref's first upto groups that hold
// ref.token: the lock's release, or an attempt's give-back (under its own
// token). Prepared here, not kept from the attempt: a lock releases once,
// so a kept copy would save nothing, and a give-back needs its own.
func (s singleStore) releaseMulti(ctx context.Context, ref *lockRef, upto int) (int64, error) {
	m := ref.multi
	releases := m.prepare(multiReleaseSHA, [][]string{m.queueKeys}, &ref.token, ref.releaseArgs[8])
	reply, err := combine(m, s.runGroups(ctx, releases, upto))
	s.ranScript(err)
	return reply, err
}

// pttlMulti returns the shortest lease among the names, or -2 / -3 for the
// first name not ours.
func (s singleStore) pttlMulti(ctx context.Context, ref *lockRef) (int64, error) {
	m := ref.multi
	cmds := s.runGroups(ctx, m.prepare(multiPTTLSHA, nil, ref.token), len(m.groups))
	shortest := int64(-1)
	for i, cmd := range cmds {
		reply, err := m.verdict(cmd, m.groups[i], -2)
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

// abandonWithMulti is abandon when some refs are multi locks: each on its
// own, since it may span nodes (see eachNode), on multiGiveBacks goroutines
// at most (one each made thousands at a Close), while the others go out in
// one pipeline per node.
func (s singleStore) abandonWithMulti(ctx context.Context, refs []*lockRef) ([]int64, []error) {
	replies, errs := make([]int64, len(refs)), make([]error, len(refs))
	var singles []*lockRef
	var at []int
	multis := make(chan int, len(refs)) // the multi locks' places, for the goroutines to take
	for i, ref := range refs {
		if ref.multi != nil {
			multis <- i
		} else {
			singles, at = append(singles, ref), append(at, i)
		}
	}
	close(multis)
	var wg sync.WaitGroup
	for range min(multiGiveBacks, len(multis)) {
		wg.Go(func() {
			for i := range multis {
				replies[i], errs[i] = s.releaseMulti(ctx, refs[i], len(refs[i].multi.groups))
			}
		})
	}
	if len(singles) > 0 {
		r, e := s.abandon(ctx, singles)
		for j, i := range at {
			replies[i], errs[i] = r[j], e[j]
		}
	}
	wg.Wait()
	return replies, errs
}

// multiGiveBacks: how many multi locks abandonWithMulti gives back at once.
const multiGiveBacks = 4

// FenceOf returns the fencing token the lock took for name: a multi lock's
// for each of its names, any other Lock's for its name. It reports false
// for another name, without WithFencing, and on a nil Lock.
func (l *Lock) FenceOf(name string) (int64, bool) {
	if l == nil || l.h == nil {
		return 0, false
	}
	m := l.h.ref.multi
	if m == nil {
		return l.h.fence, name == l.h.name && l.h.fence > 0
	}
	i := slices.Index(m.names, name)
	if i < 0 || m.fences[i] <= 0 {
		return 0, false
	}
	return m.fences[i], true
}

// lostName is the name a loss reports: a multi lock's name a script found
// not ours (see multiRef.lost), else the Lock's name (a multi lock's first).
func (l *hold) lostName() string {
	if m := l.ref.multi; m != nil && m.lost.Load() > 0 {
		return m.names[m.lost.Load()-1]
	}
	return l.name
}

// acquireMulti makes one attempt, group by group, under the attempt's own
// token (see acquisition.init); a group that finds a name held gives back
// what the groups before it took, and records the blocker.
func (s singleStore) acquireMulti(ctx context.Context, o *options, ref *lockRef) (bool, int64, time.Duration, error) {
	m := ref.multi
	first := !ref.attempted
	ref.attempted = true
	// (Names in several slots keep their scripts, one per slot, sent
	// apart from the batcher: one node's batch must not wait for another
	// node's.)
	plain := !ref.fenced && !ref.waiting && o.replicas == 0 && len(m.groups) == 1
	if first && plain && s.batch != nil && s.scripted != nil && s.scripted.Load() {
		if took, err := s.setAll(ctx, o, ref); took || err != nil {
			return took, 0, 0, err
		}
		// Not all set: the script says why (and takes them if it can).
	}
	if m.acquires == nil {
		m.prepareFor(ref, o)
	}
	for gi, g := range m.groups {
		var cmd *redis.Cmd
		var ackErr error
		if o.replicas > 0 {
			cmd, ackErr = runAcked(ctx, s.rdb, o, m.acquires[gi])
		} else {
			cmd = s.run(ctx, m.acquires[gi], ref.waiting)
		}
		took, heldAt, holder, err := parseMultiAcquire(cmd, m.fences[g.from:g.to], o.fencing)
		if err == nil && took && ackErr != nil {
			// Not safe to hold: a failover could lose it. (One group: no
			// WithReplicaAck on a Cluster.) The caller gives it back, as
			// it does a single lock's (see singleStore.acquire).
			return false, 0, 0, ackErr
		}
		if err != nil {
			var reply redis.Error
			if errors.As(err, &reply) {
				// This group answered: give back what the attempt took (one
				// without an answer is the janitor's, this group included).
				s.giveBack(ctx, ref, gi, o.ttl)
			}
			return false, 0, 0, err
		}
		if !took {
			s.giveBack(ctx, ref, gi, o.ttl)
			m.blocker = g.from + heldAt
			return false, 0, holder, nil
		}
	}
	return true, 0, 0, nil
}

// setAll sends every name's SET NX PX in one batch: a multi lock's first
// attempt when the caller neither waits nor fences, as a plain lock's (see
// singleStore.acquire), and one script fewer per uncontended cycle. It
// reports whether all were set; when not, it gives back those it set
// before it returns, and the caller runs the script, which decides (and
// takes them all if it can). For that round trip another caller may find
// a name held by an attempt that then gives it back (where the script's
// all or none is seen by nobody); but of two callers whose SETs split the
// names, one takes them all: each one's script runs after its own
// give-back, and both refused would need each script to run before the
// other's give-back.
func (s singleStore) setAll(ctx context.Context, o *options, ref *lockRef) (bool, error) {
	m := ref.multi
	args := make([]any, 0, 6*len(m.keys))
	var few [4]redis.Cmder // (a few names: no allocation)
	cmds := append(few[:0], make([]redis.Cmder, len(m.keys))...)
	for i := range m.keys {
		args = append(args, "set", m.keyArg(i), &ref.token, "nx", "px", ref.ttlArg)
		cmd := redis.NewCmd(ctx, args[6*i:6*i+6:6*i+6]...)
		cmd.SetFirstKeyPos(1)
		cmds[i] = cmd
	}
	if err := s.batch.doAll(ctx, ref.key, nil, cmds...); err != nil {
		return false, err // not all answered: given back as uncertain (see acquisition.failed)
	}
	set, err := 0, error(nil)
	for _, cmd := range cmds {
		switch val, cerr := cmd.(*redis.Cmd).Result(); {
		case cerr == nil && val == "OK":
			set++
		case cerr == nil:
			err = fmt.Errorf("%w %v to SET NX", errBadReply, val)
		case cerr != redis.Nil:
			err = cerr
		}
	}
	s.slots.note(err)
	switch {
	case set == len(cmds):
		return true, nil
	case set == 0 && err == nil:
		return false, nil // every name held: the script says by whom
	}
	// What it set goes back within ctx; a give-back left to the janitor
	// fails the attempt. After one that did not, the script runs under a
	// token of its own, as a next attempt would (see giveBack): a late copy
	// of the give-back (go-redis sends a command again after a read
	// timeout) must not meet names the script took.
	err = cmp.Or(err, s.giveBack(ctx, ref, len(m.groups), o.ttl))
	if err == nil {
		ref.freshToken(o.metadata)
	}
	return false, err
}

// prepareFor prepares the attempts' commands, under ref's token (read when
// sent: each attempt has its own).
func (m *multiRef) prepareFor(ref *lockRef, o *options) {
	fenced, wait := "0", any("0")
	var extra [][]string
	if o.fencing {
		fenced, extra = "1", append(extra, m.fenceKeys)
	}
	if ref.waiting { // the queues, and their expiries' keys
		extra, wait = append(extra, m.queueKeys, m.spans), queueHoldArg
	}
	m.acquires = m.prepare(multiAcquireSHA, extra, &ref.token, ref.ttlArg, fenced, wait, &m.watcher)
}

// giveBack releases what ref's first upto groups took in this attempt and
// waits (within ctx, and ReleaseTimeout), so a failed AcquireMulti returns
// with nothing held; or, when that fails, the janitor retries and the
// release's error is returned.
func (s singleStore) giveBack(ctx context.Context, ref *lockRef, upto int, ttl time.Duration) error {
	if upto == 0 {
		return nil
	}
	// A copy: the next attempt has a token of its own, which a late
	// clean-up of this one must not use.
	taken := &lockRef{key: ref.key, keyArg: ref.keyArg, token: ref.token, kind: multiLock, multi: ref.multi, releaseArgs: ref.releaseArgs}
	ctx, cancel := context.WithTimeout(ctx, ReleaseTimeout)
	defer cancel()
	_, err := s.releaseMulti(ctx, taken, upto)
	if err != nil && s.cleaner != nil {
		s.cleaner.add(taken, time.Now().Add(ttl))
	}
	return err
}

func parseMultiAcquire(cmd *redis.Cmd, fences []int64, fencing bool) (took bool, heldAt int, holder time.Duration, err error) {
	vals, err := cmd.Slice()
	if err != nil {
		return false, 0, 0, err
	}
	bad := func() error { return fmt.Errorf("%w %v from the multi acquire script", errBadReply, vals) }
	// vals[0] is the code, an int64: 1 (taken, then each name's fence) or
	// 0 (refused, then the place of the name held and its holder's PTTL).
	switch {
	case len(vals) == len(fences)+1 && vals[0] == int64(1):
		for i := range fences {
			f, ok := vals[i+1].(int64)
			if !ok || fencing != (f > 0) || f < 0 {
				return false, 0, 0, bad()
			}
			fences[i] = f
		}
		return true, 0, 0, nil
	case len(vals) == 3 && vals[0] == int64(0):
		i, ok1 := vals[1].(int64)
		pttl, ok2 := vals[2].(int64)
		if !ok1 || !ok2 || i < 1 || i > int64(len(fences)) {
			return false, 0, 0, bad()
		}
		return false, int(i - 1), holderTTL(pttl), nil
	}
	return false, 0, 0, bad()
}

// RunWithLockMulti is RunWithLock with all of names (see AcquireMulti):
// LockFromContext(ctx).FenceOf gives each name's fence. When fn did not run
// it returns AcquireMulti's error; WithFailOpen is refused.
func (c *Client) RunWithLockMulti(ctx context.Context, names []string, fn func(ctx context.Context) error, opts ...Option) error {
	return runWith(ctx, fn, "locks", names, func() (*Lock, error) { return c.AcquireMulti(ctx, names, opts...) })
}
