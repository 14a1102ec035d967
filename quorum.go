package redislock

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// NewQuorum returns a Client whose locks live on a majority of independent
// Redis servers (the Redlock algorithm). The returned Client has the same
// API as one made by New; opts set the defaults of every call.
//
// Every command goes to all nodes at once, with the same token. An
// acquisition succeeds when a majority (len(clients)/2 + 1) took the lock
// before the lease's validity ran out: the TTL, less the time the attempt
// took, less the drift allowance. The Lock's safe deadline is the end of
// that validity, and moves with each extension that a majority confirmed.
// A failed attempt gives back what it took before it returns. When any
// node refused (another holder has the key there), the attempt fails as
// "held by someone else" (ErrNotAcquired once retries run out, never a
// fail-open run); retry with a jittered strategy such as
// ExponentialBackoff, so that contenders that split the vote do not retry
// in step. When nobody refused but too few nodes answered, it fails with a
// *QuorumError that counts how each node answered.
//
// An extension needs a majority of confirmations. A release deletes the key
// on every node that holds our token; it succeeds when a majority answered
// and none of them holds it any more, and returns ErrNotHeld when our token
// was on fewer nodes than a majority. Lock.TTL reports the TTL that a
// majority still guarantees.
//
// Each command waits for each node at most a per-node timeout of TTL/20
// (at least 1ms; releases and Lock.TTL use the client's default TTL): a
// node that has not answered by then counts as failed, so a hung node (a
// SIGSTOPped process, a dropped network) delays a command by that much and
// no more. Its call goes on in the background until go-redis gives up on it
// (its read and write timeouts, or the context when the client has
// ContextTimeoutEnabled). If such a late call turns out to have taken the
// lock for an attempt that failed or a lock already released, the key is
// deleted on that node there and then; if its answer never comes, the key
// expires after the TTL.
//
// With N nodes, locks keep working while at least N/2+1 of them answer: 5
// nodes tolerate 2 down, 3 nodes tolerate 1.
//
// What it cannot promise: it rests on bounded process pauses, network delays
// and clock drift. A holder paused past its lease (a GC, a frozen VM), or a
// node whose clock jumps forward and expires the key early, lets a second
// holder in, as Martin Kleppmann showed. And it offers no fencing tokens:
// WithFencing is rejected, here and per call, because a counter on each node
// is not one. Where a second holder would do harm, the protected resource
// must defend itself.
//
// NewQuorum checks its arguments and returns an error wrapping
// ErrInvalidArgument for fewer than 3 clients (with 1 use New; 2 nodes
// tolerate no failure, which is worse than one), a nil client, the same
// client twice or two *redis.Client with the same address (as written), an
// invalid option, or WithFencing. An even number of nodes is accepted: it is
// safe, but 4 nodes tolerate no more failures than 3. Each client may be any
// redis.UniversalClient on its own deployment (a server, a Sentinel failover
// client, a cluster); WithReplicaAck then applies on every node, and a node
// whose replicas fall short counts as failed. NewQuorum does not touch the
// network.
func NewQuorum(clients []redis.UniversalClient, opts ...Option) (*Client, error) {
	if len(clients) < 3 {
		return nil, invalidf("NewQuorum needs at least 3 independent Redis servers, got %d (for one deployment use New; 2 nodes tolerate no failure)", len(clients))
	}
	q := &quorumStore{
		nodes:     make([]quorumNode, len(clients)),
		needed:    len(clients)/2 + 1,
		straggles: make(map[string]*attempt),
	}
	seenAddr := make(map[string]int)
	for i, rdb := range clients {
		if isNilClient(rdb) {
			return nil, invalidf("NewQuorum: client %d is nil", i)
		}
		if j := slices.Index(clients[:i], rdb); j >= 0 {
			return nil, invalidf("NewQuorum: clients %d and %d are the same client; every node must be an independent server", j, i)
		}
		label := fmt.Sprintf("node %d", i)
		if plain, ok := rdb.(*redis.Client); ok {
			// Sentinel failover clients all report this placeholder.
			if addr := plain.Options().Addr; addr != "" && addr != "FailoverClient" {
				if j, dup := seenAddr[addr]; dup {
					return nil, invalidf("NewQuorum: clients %d and %d both talk to %s; every node must be an independent server", j, i, addr)
				}
				seenAddr[addr] = i
				label += " (" + addr + ")"
			}
		}
		q.nodes[i] = quorumNode{singleStore: singleStore{rdb: rdb}, label: label}
	}
	o := defaultOptions()
	applyOptions(&o, opts)
	if err := o.validate(); err != nil {
		return nil, err
	}
	if err := q.check(&o); err != nil {
		return nil, err
	}
	q.defaultTimeout = nodeTimeout(o.ttl)
	// No release announcements (notify stays nil: no single node's channel
	// speaks for the quorum): a waiter retries at its backoff, or when a
	// majority can be free, whichever comes first.
	return newClient(q, nil, nil, o, make(chan struct{})), nil
}

// nodeTimeout is how long a quorum waits for one node's answer to a command
// on a lease of ttl: 5% of it, so that a hung node costs the lease at most a
// twentieth of its validity, yet long enough for a node on a loaded host or
// a distant network to answer a lease of seconds.
func nodeTimeout(ttl time.Duration) time.Duration {
	return max(ttl/20, time.Millisecond)
}

// QuorumError reports that a quorum client could not get a majority of its
// nodes to agree on a command, with how each node answered, so that "quorum
// not reached" can be debugged. Match it with errors.As; it is wrapped with
// the lock name. Unwrap returns the failed nodes' errors, each naming its
// node, so errors.Is finds, say, ErrReplicaAck among them.
//
// When nodes refused an acquisition (another holder has the key) it
// matches ErrNotAcquired: someone else is around, so waiting may help and
// WithFailOpen does not run fn; the counts ride along with the error that
// Acquire returns when it gives up. Otherwise (Refused == 0: too few nodes
// answered in time to decide, or a majority agreed too late) it does not
// match ErrNotAcquired, and WithFailOpen applies to it.
//
// A QuorumError is not modified after it is returned; it may be shared.
type QuorumError struct {
	// Op is the command: "acquire", "extend", "release", "ttl", or
	// "inspect" and "break" (Client.Inspect, Client.Break: Agreed then
	// counts the nodes that answered).
	Op string
	// Nodes is the number of nodes in the quorum; Needed its majority.
	Nodes, Needed int
	// Agreed counts the nodes that did what was asked: took the lock,
	// extended it, deleted it (or no longer had it, for a release), or
	// reported its TTL.
	Agreed int
	// Refused counts the nodes that answered that the key is another
	// holder's, or (extend, ttl) that it is gone.
	Refused int
	// Failed counts the nodes that returned an error or did not answer
	// within the per-node timeout.
	Failed int
	// Elapsed is how long the command took, from sending to the last
	// answer waited for.
	Elapsed time.Duration
	// Validity is, for an acquisition that a majority agreed to, what was
	// left of the lease when the answers were in (zero or less: too late).
	Validity time.Duration
	// Errors holds one error per failed node.
	Errors []error
}

// Error describes the count of each kind of answer and the nodes' errors.
func (e *QuorumError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "redislock: quorum not reached: %s agreed on %d of %d nodes (%d needed), refused by %d, failed on %d, in %v",
		e.Op, e.Agreed, e.Nodes, e.Needed, e.Refused, e.Failed, e.Elapsed.Round(time.Millisecond))
	if e.Agreed >= e.Needed {
		fmt.Fprintf(&b, ", which left the lease no validity (%v)", e.Validity.Round(time.Millisecond))
	}
	for _, err := range e.Errors {
		b.WriteString("; ")
		b.WriteString(oneLine(err.Error()))
	}
	return b.String()
}

// Unwrap returns the failed nodes' errors.
func (e *QuorumError) Unwrap() []error { return e.Errors }

// Is reports whether target is ErrNotAcquired and the acquisition failed
// because nodes refused: another holder has the lock.
func (e *QuorumError) Is(target error) bool {
	return target == ErrNotAcquired && e.Op == "acquire" && e.Refused > 0
}

// quorumStore keeps every lock on a majority of independent deployments.
type quorumStore struct {
	nodes          []quorumNode
	needed         int           // the majority
	defaultTimeout time.Duration // per-node timeout of releases and TTL

	mu sync.Mutex
	// straggles maps the token of a won acquisition to its attempt while
	// some of its node calls are still out, so that a release can tell
	// them to give back what they take.
	straggles map[string]*attempt
}

type quorumNode struct {
	singleStore
	label string // "node 2 (127.0.0.1:6380)", for errors
}

// attempt is one acquisition attempt, as seen by its node calls that
// outlived their per-node timeout (stragglers). Guarded by quorumStore.mu.
type attempt struct {
	token    string
	decided  bool  // the attempt's outcome is known
	holding  bool  // it won and the lock has not been released
	out      int   // stragglers, known once decided
	finished int   // stragglers that have returned
	landed   []int // nodes a straggler took before the outcome was known
}

// answer is what one node said to one command.
type answer struct {
	acquired  bool          // acquire
	holderTTL time.Duration // acquire, when refused
	reply     int64         // extend, release, pttl: replyDone, replyGone or replyForeign
	ttl       int64         // pttl, when replyDone: the TTL in ms (-1: no expiry)
	err       error
}

// ask sends call to every node at once (to the nodes listed in only, when
// only is not nil), and waits for each answer until timeout after sending,
// or until ctx ends. A node that has not answered by then gets an error
// saying so and counts as failed; ask does not wait for it. Its call goes on
// in its goroutine, bounded by go-redis' timeouts, and when it returns, late
// (if not nil) is called there with its answer. ask returns the answers
// (indexed like q.nodes; zero for nodes not asked) and how many nodes it
// stopped waiting for.
func (q *quorumStore) ask(ctx context.Context, timeout time.Duration, only []int, call func(ctx context.Context, n quorumNode) answer, late func(node int, a answer)) ([]answer, int) {
	asked, expected := q.asked(only)
	answers := make([]answer, len(q.nodes))
	if expected == 0 {
		return answers, 0
	}
	type delivery struct {
		node int
		answer
	}
	delivered := make(chan delivery, expected) // never blocks a sender
	var mu sync.Mutex
	stopped := false // set when ask stops waiting; guarded by mu

	deadline := time.Now().Add(timeout)
	// The calls' context carries the per-node deadline, which go-redis
	// honours with ContextTimeoutEnabled (and while dialing or waiting for
	// a pooled connection in any case). It is cancelled when the last call
	// returns, not when ask stops waiting, so that a late call can still
	// finish and say what it did.
	callCtx, cancel := context.WithDeadline(ctx, deadline)
	var running atomic.Int32
	running.Store(int32(expected))
	callReturned := func() {
		if running.Add(-1) == 0 {
			cancel()
		}
	}
	for i, n := range q.nodes {
		if !asked[i] {
			continue
		}
		go func() {
			a := call(callCtx, n)
			callReturned()
			mu.Lock()
			if !stopped {
				delivered <- delivery{i, a}
				mu.Unlock()
				return
			}
			mu.Unlock()
			if late != nil {
				late(i, a)
			}
		}()
	}

	got := make([]bool, len(q.nodes))
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
wait:
	for received := 0; received < expected; received++ {
		select {
		case d := <-delivered:
			answers[d.node], got[d.node] = d.answer, true
		case <-timer.C:
			break wait
		case <-ctx.Done():
			break wait
		}
	}
	mu.Lock()
	stopped = true
	for drained := false; !drained; {
		select {
		case d := <-delivered:
			answers[d.node], got[d.node] = d.answer, true
		default:
			drained = true
		}
	}
	mu.Unlock()

	return answers, q.labelAnswers(ctx, timeout, asked, got, answers)
}

// asked tells which nodes ask asks (all when only is nil), and how many.
func (q *quorumStore) asked(only []int) (asked []bool, n int) {
	asked = make([]bool, len(q.nodes))
	for i := range asked {
		asked[i] = only == nil || slices.Contains(only, i)
		if asked[i] {
			n++
		}
	}
	return asked, n
}

// labelAnswers names the node in every error of answers, gives the nodes
// that did not answer in time an error saying so, and returns how many
// those are.
func (q *quorumStore) labelAnswers(ctx context.Context, timeout time.Duration, asked, got []bool, answers []answer) (abandoned int) {
	for i := range q.nodes {
		switch {
		case !asked[i]:
		case got[i]:
			if answers[i].err != nil {
				answers[i].err = fmt.Errorf("%s: %w", q.nodes[i].label, answers[i].err)
			}
		case ctx.Err() != nil:
			abandoned++
			answers[i].err = fmt.Errorf("%s: no answer before the context ended: %w", q.nodes[i].label, ctx.Err())
		default:
			abandoned++
			answers[i].err = fmt.Errorf("%s: no answer within the per-node timeout of %v", q.nodes[i].label, timeout)
		}
	}
	return abandoned
}

// check rejects settings a quorum cannot honour.
// queues is false: a quorum's waiters do not queue on its nodes (each
// attempt has its own token; see Client.acquire).
func (q *quorumStore) queues() bool { return false }

// serves refuses every kind but the exclusive lock: a shared hold, a
// semaphore slot or several names at once would each need their scripts
// run on a majority, with a majority's verdict on their sets, which a
// quorum does not do.
func (q *quorumStore) serves(k lockKind) error {
	if k == exclusiveLock {
		return nil
	}
	return invalidf("%s needs a Client on one Redis deployment (New); a quorum Client does not support it",
		[...]string{"", "AcquireShared", "AcquireSemaphore", "AcquireMulti"}[k])
}

func (q *quorumStore) idle() <-chan struct{} { return nil }

func (q *quorumStore) slotted() bool { return false }

// abandon releases each ref on every node (a quorum's waiters do not
// queue).
func (q *quorumStore) abandon(ctx context.Context, refs []*lockRef) ([]int64, []error) {
	replies, errs := make([]int64, len(refs)), make([]error, len(refs))
	for i, ref := range refs {
		replies[i], errs[i] = q.release(ctx, ref)
	}
	return replies, errs
}

func (q *quorumStore) check(o *options) error {
	if o.fencing {
		return invalidf("WithFencing is not available on a quorum (Redlock) client: a counter on each node is not a fencing token. " +
			"The nodes' counters drift apart (a node misses acquisitions while down, restarts without its counter, or counts a failed attempt), " +
			"so no number read from a majority is guaranteed to grow from one holder to the next, and making one would take consensus, " +
			"which Redlock does not have (Martin Kleppmann's argument). " +
			"Use New on one deployment with WithFencing, or let the protected resource issue the versions itself")
	}
	for _, n := range q.nodes {
		if err := n.check(o); err != nil {
			return fmt.Errorf("%s: %w", n.label, err)
		}
	}
	return nil
}

// acquire makes one attempt on every node. It succeeds when a majority took
// the lock within the lease's validity. Otherwise it gives back what it
// took, then reports the lock as held by someone else (acquired false, nil
// error) when any node refused: another holder is around, so waiting may
// help and failing open would not be safe; or a *QuorumError when nobody
// refused but too few nodes could be reached, or a majority agreed too late.
//
// The holder TTL reported for a refusal is the time until a majority can be
// free: counting the nodes we took (given back) and the failed ones as free,
// it is the k-th shortest remaining TTL among the refusing nodes, where k
// is how many of them must still expire. A waiter retries then, and not
// later, as it does on a single server with the holder's TTL.
func (q *quorumStore) acquire(ctx context.Context, o *options, ref *lockRef) (bool, int64, time.Duration, error) {
	key, token := ref.key, ref.token
	start := time.Now()
	att := &attempt{token: token}
	timeout := nodeTimeout(o.ttl)
	answers, abandoned := q.ask(ctx, timeout, nil, func(ctx context.Context, n quorumNode) answer {
		acquired, _, holderTTL, err := n.acquireKey(ctx, o, key, token, false)
		return answer{acquired: acquired, holderTTL: holderTTL, err: err}
	}, func(node int, a answer) { q.landed(att, node, key, a) })
	elapsed := time.Since(start)
	validity := o.ttl - elapsed - drift(o.ttl)

	var took []int
	var refusedTTLs []time.Duration
	var errs []error
	for i, a := range answers {
		switch {
		case a.err != nil:
			errs = append(errs, a.err)
		case a.acquired:
			took = append(took, i)
		default:
			refusedTTLs = append(refusedTTLs, a.holderTTL)
		}
	}
	agreed, refused, failed := len(took), len(refusedTTLs), len(errs)
	won := agreed >= q.needed && validity > 0
	took = append(took, q.decide(att, won, abandoned)...)
	if won {
		return true, 0, 0, nil
	}
	q.giveBack(ctx, timeout, key, token, took)

	if refused > 0 && agreed < q.needed {
		// Held by someone else: the core treats an error matching
		// ErrNotAcquired as a refusal (it retries) and hands these
		// counts to the caller when it gives up.
		return false, 0, q.freeIn(refusedTTLs, agreed, failed), &QuorumError{
			Op: "acquire", Nodes: len(q.nodes), Needed: q.needed,
			Agreed: agreed, Refused: refused, Failed: failed,
			Elapsed: elapsed, Validity: validity, Errors: errs,
		}
	}
	return false, 0, 0, &QuorumError{
		Op: "acquire", Nodes: len(q.nodes), Needed: q.needed,
		Agreed: agreed, Refused: refused, Failed: failed,
		Elapsed: elapsed, Validity: validity, Errors: errs,
	}
}

// freeIn returns the time until a majority can be free (see acquire), or
// -1ms when a key that must expire first has no expiry.
func (q *quorumStore) freeIn(refusedTTLs []time.Duration, agreed, failed int) time.Duration {
	forever := time.Duration(1<<63 - 1)
	ttls := make([]time.Duration, len(refusedTTLs))
	for i, ttl := range refusedTTLs {
		if ttl < 0 {
			ttl = forever
		}
		ttls[i] = ttl
	}
	slices.Sort(ttls)
	k := min(max(q.needed-agreed-failed, 1), len(ttls))
	switch ttls[k-1] {
	case forever:
		return -time.Millisecond
	case 0:
		return time.Millisecond // expiring now; 0 would read as "unknown"
	}
	return ttls[k-1]
}

// decide records the outcome of an attempt for its stragglers, and returns
// the nodes they took before it was known (to give back if it failed).
func (q *quorumStore) decide(att *attempt, won bool, stragglers int) []int {
	q.mu.Lock()
	defer q.mu.Unlock()
	att.decided, att.holding, att.out = true, won, stragglers
	if won && att.finished < att.out {
		q.straggles[att.token] = att
	}
	if won {
		return nil
	}
	return att.landed
}

// landed handles the answer of an acquire call that outlived its per-node
// timeout. If it took the key for an attempt that failed, or for a lock
// that has since been released, it gives the key back on that node.
//
// Why this cannot delete a key another attempt counts on: the late call's
// SET ran before its reply, and the reply before this check. A release
// marks the attempt released (under q.mu) before it sends its own deletes,
// so either this check sees the mark and deletes here, after the SET, or
// the release's delete is sent after the SET ran. A later attempt with the
// same token (the core retries with one token) cannot have counted this
// node: its SET NX found our key there and was refused.
func (q *quorumStore) landed(att *attempt, node int, key string, a answer) {
	q.mu.Lock()
	att.finished++
	giveBack := false
	if a.err == nil && a.acquired {
		if att.decided {
			giveBack = !att.holding
		} else {
			att.landed = append(att.landed, node)
		}
	}
	if att.decided && att.finished == att.out && q.straggles[att.token] == att {
		delete(q.straggles, att.token)
	}
	q.mu.Unlock()
	if giveBack {
		ctx, cancel := context.WithTimeout(context.Background(), ReleaseTimeout)
		defer cancel()
		_, _ = q.nodes[node].releaseKey(ctx, key, att.token)
	}
}

// giveBack releases the keys a failed attempt took, on a context detached
// from ctx's cancellation (a failed attempt leaves nothing held, even when
// its caller gave up), waiting for each node at most timeout.
//
// It only sends to nodes that confirmed they took the key. A delete sent to
// a node that did not answer could arrive after the next attempt's SET
// (same token: the core retries with one token) and silently remove a key
// that attempt counted towards its majority; such a node's late answer is
// handled by landed instead.
func (q *quorumStore) giveBack(ctx context.Context, timeout time.Duration, key, token string, nodes []int) {
	if len(nodes) == 0 {
		return
	}
	q.ask(context.WithoutCancel(ctx), timeout, nodes, func(ctx context.Context, n quorumNode) answer {
		_, err := n.releaseKey(ctx, key, token)
		return answer{err: err}
	}, nil)
}

// extend extends the lease on every node. A majority of confirmations is a
// confirmation. When too few nodes still hold our token for a majority ever
// to confirm (even counting the failed ones as ours), the lock is lost:
// replyForeign when a majority holds another token, else replyGone.
// Otherwise (failures in the way) it returns a *QuorumError, which the
// watchdog retries until the safe deadline.
func (q *quorumStore) extend(ctx context.Context, r extendRequest) (int64, error) {
	start := time.Now()
	answers, _ := q.ask(ctx, nodeTimeout(r.ttl), nil, func(ctx context.Context, n quorumNode) answer {
		reply, err := n.extend(ctx, r)
		return answer{reply: reply, err: err}
	}, nil)
	t := q.tally(answers)
	switch {
	case t.done >= q.needed:
		return replyDone, nil
	case t.notOurs() > len(q.nodes)-q.needed:
		return t.lostReply(q.needed), nil
	}
	return 0, t.err("extend", start, t.done, t.notOurs())
}

// release deletes the key on every node where it holds our token, and tells
// the attempt's late calls, if any, to give back what they take.
//
// It replies replyDone when a majority answered and none of those holds our
// token any more: the lock is free for others. It replies replyGone or
// replyForeign (ErrNotHeld for the caller, and a loss for RunWithLock) when
// our token was on too few nodes to be a majority even counting the failed
// ones: the lock was no longer ours, whatever minority of keys this release
// deleted. Otherwise (too few answers) it returns a *QuorumError and
// Release may be called again.
func (q *quorumStore) release(ctx context.Context, ref *lockRef) (int64, error) {
	key, token := ref.key, ref.token
	q.mu.Lock()
	if att := q.straggles[token]; att != nil {
		att.holding = false
		delete(q.straggles, token)
	}
	q.mu.Unlock()

	start := time.Now()
	answers, _ := q.ask(ctx, q.defaultTimeout, nil, func(ctx context.Context, n quorumNode) answer {
		reply, err := n.releaseKey(ctx, key, token)
		return answer{reply: reply, err: err}
	}, nil)
	t := q.tally(answers)
	switch {
	case t.notOurs() > len(q.nodes)-q.needed:
		return t.lostReply(q.needed), nil
	case t.done+t.notOurs() >= q.needed:
		return replyDone, nil
	}
	return 0, t.err("release", start, t.done+t.notOurs(), 0)
}

// pttl returns the TTL that a majority still guarantees: the Needed-th
// longest among the nodes that hold our token. It returns -2 (gone) or -3
// (another holder's, when a majority holds another token) when too few
// nodes hold our token for a majority even counting the failed ones, and a
// *QuorumError when failures leave it undecided.
func (q *quorumStore) pttl(ctx context.Context, ref *lockRef) (int64, error) {
	start := time.Now()
	answers, _ := q.ask(ctx, q.defaultTimeout, nil, func(ctx context.Context, n quorumNode) answer {
		ttl, err := n.pttl(ctx, ref)
		// In the replies of extend and release, for tally.
		switch {
		case err != nil:
			return answer{err: err}
		case ttl == -2:
			return answer{reply: replyGone}
		case ttl == -3:
			return answer{reply: replyForeign}
		}
		return answer{reply: replyDone, ttl: ttl}
	}, nil)
	const forever = int64(1<<63 - 1)
	var ours []int64
	for _, a := range answers {
		if a.err == nil && a.reply == replyDone {
			ttl := a.ttl
			if ttl < 0 {
				ttl = forever // -1, no expiry: someone ran PERSIST
			}
			ours = append(ours, ttl)
		}
	}
	t := q.tally(answers)
	switch {
	case len(ours) >= q.needed:
		slices.Sort(ours)
		slices.Reverse(ours)
		if ttl := ours[q.needed-1]; ttl != forever {
			return ttl, nil
		}
		return -1, nil
	case t.notOurs() > len(q.nodes)-q.needed:
		if t.foreign >= q.needed {
			return -3, nil
		}
		return -2, nil
	}
	return 0, t.err("ttl", start, len(ours), t.notOurs())
}

// tally counts the answers of extend, release or pttl.
type tally struct {
	done, gone, foreign int
	errs                []error
	nodes, needed       int
}

func (q *quorumStore) tally(answers []answer) tally {
	t := tally{nodes: len(q.nodes), needed: q.needed}
	for _, a := range answers {
		switch {
		case a.err != nil:
			t.errs = append(t.errs, a.err)
		case a.reply == replyDone:
			t.done++
		case a.reply == replyGone:
			t.gone++
		default:
			t.foreign++
		}
	}
	return t
}

func (t tally) notOurs() int { return t.gone + t.foreign }

// lostReply says how a lock that a majority no longer holds was lost:
// taken when a majority holds another token, expired otherwise.
func (t tally) lostReply(needed int) int64 {
	if t.foreign >= needed {
		return replyForeign
	}
	return replyGone
}

func (t tally) err(op string, start time.Time, agreed, refused int) error {
	return &QuorumError{
		Op: op, Nodes: t.nodes, Needed: t.needed,
		Agreed: agreed, Refused: refused, Failed: len(t.errs),
		Elapsed: time.Since(start), Errors: t.errs,
	}
}

var _ store = (*quorumStore)(nil)
