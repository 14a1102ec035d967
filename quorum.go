package redislock

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// NewQuorum returns a Client whose locks live on a majority of independent
// Redis servers (the Redlock algorithm), with the same API as New's; opts
// set the defaults of every call. It does not touch the network.
//
// Every command goes to all nodes at once, with one token. An acquisition
// succeeds when a majority (len(clients)/2 + 1) took the lock within its
// validity (the TTL less the attempt's time and drift: the safe deadline); a
// failed one gives back what it took, and fails with ErrNotAcquired when a
// node refused (retry with jitter, e.g. ExponentialBackoff) or a
// *QuorumError when too few answered. Extensions, releases and Lock.TTL go
// by the majority. Each waits for a node at most TTL/20 (at least 1ms): a
// hung node counts as failed, and a late call that took the lock gives it
// back. It rests on bounded pauses, delays and clock drift, and offers no
// fencing tokens: a counter per node is not one.
//
// It returns an error wrapping ErrInvalidArgument for fewer than 3 clients
// (for 1 use New), a nil or repeated client (or address), an invalid
// option, or WithFencing. Each client may be any redis.UniversalClient on
// its own deployment; with WithReplicaAck, a node whose replicas fall short
// counts as failed.
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
		q.nodes[i] = quorumNode{singleStore: singleStore{rdb: rdb, slots: newSlotMap(rdb)}, label: label}
	}
	o := defaultOptions()
	applyOptions(&o, opts)
	// check only reads, so it may run after a failed validate: the
	// options' own error still wins.
	if err := cmp.Or(o.validate(), q.check(&o)); err != nil {
		return nil, err
	}
	q.defaultTimeout = nodeTimeout(o.ttl)
	// No announcements: no one node's channel speaks for the quorum.
	return newClient(q, nil, nil, o, make(chan struct{})), nil
}

// nodeTimeout: a hung node costs a lease at most a twentieth of its
// validity, yet a node on a loaded host or a distant network answers in time.
func nodeTimeout(ttl time.Duration) time.Duration {
	return max(ttl/20, time.Millisecond)
}

// QuorumError reports that a quorum Client could not get a majority of its
// nodes to agree on a command, with how each answered; it is wrapped with
// the lock name, and Unwrap returns the failed nodes' errors. It matches
// ErrNotAcquired when nodes refused an acquisition (another holder has the
// key: waiting may help, WithFailOpen does not run fn). It is not modified
// after it is returned.
type QuorumError struct {
	// Op: "acquire", "extend", "release", "ttl", "inspect" or "break".
	Op            string
	Nodes, Needed int // the nodes, and their majority
	// Agreed counts the nodes that did what was asked (for inspect and
	// break: answered); Refused those whose key is another holder's (or,
	// extend and ttl, gone); Failed those that erred or timed out.
	Agreed, Refused, Failed int
	Elapsed                 time.Duration // up to the last answer waited for
	// Validity: an agreed acquisition's lease left (zero or less: too late).
	Validity time.Duration
	Errors   []error // one per failed node
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
		fmt.Fprintf(&b, "; %s", oneLine(err.Error()))
	}
	return b.String()
}

// Unwrap returns the failed nodes' errors.
func (e *QuorumError) Unwrap() []error { return e.Errors }

// Is reports whether target is ErrNotAcquired and nodes refused an acquisition.
func (e *QuorumError) Is(target error) bool {
	return target == ErrNotAcquired && e.Op == "acquire" && e.Refused > 0
}

// quorumStore keeps every lock on a majority of independent deployments.
type quorumStore struct {
	nodes          []quorumNode
	needed         int           // the majority
	defaultTimeout time.Duration // per-node timeout of releases and TTL

	mu sync.Mutex
	// straggles: a won acquisition's attempt, by token, while some of its
	// node calls are out, so that a release can have them give back.
	straggles map[string]*attempt
}

type quorumNode struct {
	singleStore
	label string // "node 2 (127.0.0.1:6380)", for errors
}

// attempt is an acquisition attempt as its node calls past their per-node
// timeout (stragglers) see it; guarded by quorumStore.mu.
type attempt struct {
	token    string
	decided  bool  // the attempt's outcome is known
	holding  bool  // it won and the lock has not been released
	out      int   // stragglers, known once decided
	finished int   // stragglers that have returned
	landed   []int // nodes a straggler took before the outcome was known
}

// answer is one node's answer to a command of a quorum.
type answer struct {
	reply     int64         // replyDone (acquire: took the key), replyGone or replyForeign (acquire: refused)
	holderTTL time.Duration // acquire, when refused
	ttl       int64         // pttl, when replyDone: the TTL in ms (-1: no expiry)
	err       error
}

// replied is the answer of a command whose reply says all (extend, release).
func replied(reply int64, err error) answer { return answer{reply: reply, err: err} }

// ask sends call to every node at once, with its place in q.nodes (to those in only, when not nil:
// then not empty, or ask waits out the timeout), and waits for each answer
// until timeout, or ctx's end; a node that has not answered by then gets an
// error, and its call goes on, handing its answer to late (if not nil). It
// returns the answers and how many it gave up on.
func (q *quorumStore) ask(ctx context.Context, timeout time.Duration, only []int, call func(ctx context.Context, node int, n quorumNode) answer, late func(node int, a answer)) ([]answer, int) {
	// pending: asked, and not answered while ask waited (guarded by mu
	// once the calls are out).
	answers, pending := make([]answer, len(q.nodes)), make([]bool, len(q.nodes))
	expected := 0
	for i := range pending {
		pending[i] = only == nil || slices.Contains(only, i)
		if pending[i] {
			expected++
		}
	}
	// The per-node deadline, cancelled when the last call returns, not when
	// ask stops waiting, so that a late call can still finish.
	callCtx, cancel := context.WithTimeout(ctx, timeout)
	var mu sync.Mutex
	// Guarded by mu: the calls returned, and whether ask stopped waiting.
	returned, stopped := 0, false
	// deliver takes a's answer from node, or reports it late (ask stopped
	// waiting).
	deliver := func(node int, a answer) (isLate bool) {
		mu.Lock()
		defer mu.Unlock()
		if !stopped {
			answers[node], pending[node] = a, false
		}
		returned++
		if returned == expected {
			cancel()
		}
		return stopped
	}
	for i, n := range q.nodes {
		if pending[i] { // (each call writes its own node's only)
			go func() {
				if a := call(callCtx, i, n); deliver(i, a) && late != nil {
					late(i, a)
				}
			}()
		}
	}
	// Done when every call returned (each answer delivered first), the
	// per-node timeout passed, or ctx ended.
	<-callCtx.Done()
	mu.Lock()
	stopped = true
	mu.Unlock()
	// Every error names its node; a node that did not answer gets one.
	abandoned := 0
	for i, n := range q.nodes {
		switch {
		case !pending[i]: // answered, or not asked (then no error)
			if answers[i].err != nil {
				answers[i].err = fmt.Errorf("%s: %w", n.label, answers[i].err)
			}
		case ctx.Err() != nil:
			abandoned++
			answers[i].err = fmt.Errorf("%s: no answer before the context ended: %w", n.label, ctx.Err())
		default:
			abandoned++
			answers[i].err = fmt.Errorf("%s: no answer within the per-node timeout of %v", n.label, timeout)
		}
	}
	return answers, abandoned
}

func (q *quorumStore) queues() bool { return false }

// serves refuses what a kind cannot have of a majority (see needsOneDeployment).
func (q *quorumStore) serves(k lockKind) error { return k.needsOneDeployment() }

func (q *quorumStore) idle() <-chan struct{} { return nil }

func (q *quorumStore) slotted() bool { return false }

// stop stops each node's (a Cluster node has a slot map of its own).
func (q *quorumStore) stop() {
	for _, n := range q.nodes {
		n.stop()
	}
}

// abandon releases each ref on every node (nothing queues on a quorum).
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

// acquire succeeds when a majority took the lock within its validity. Else
// it gives back what it took; a refusal's error matches ErrNotAcquired, with
// the time until a majority can be free as the holder's TTL.
func (q *quorumStore) acquire(ctx context.Context, o *options, ref *lockRef) (bool, int64, time.Duration, error) {
	key, token := ref.key, ref.token
	att := &attempt{token: token}
	timeout := nodeTimeout(o.ttl)
	t, abandoned := q.vote(ctx, "acquire", timeout, func(ctx context.Context, _ int, n quorumNode) answer {
		acquired, _, holderTTL, err := n.acquireKey(ctx, o, key, token)
		a := answer{reply: replyForeign, holderTTL: holderTTL, err: err}
		if acquired {
			a.reply = replyDone
		}
		return a
	}, func(node int, a answer) { q.landed(att, node, key, a) })
	validity := o.ttl - t.elapsed - drift(o.ttl)
	won := len(t.done) >= q.needed && validity > 0
	landed := q.decide(att, won, abandoned)
	if won {
		return true, 0, 0, nil
	}
	q.giveBack(ctx, timeout, key, token, append(slices.Clip(t.done), landed...))
	return false, 0, q.freeIn(t), q.failure(t, len(t.done), t.foreign, validity)
}

// freeIn returns the time until a majority can be free: 0 (unknown) when
// no node refused, or a majority took the lock (too late, not refused);
// else, counting the nodes we took and the failed ones as free, the k-th
// shortest TTL among the refusing nodes, at least 1ms (0 would read as
// "unknown").
//
// The refusing nodes' TTLs are holderTTL's (see acquireKey), never
// negative: 1ms for a key expiring now, and 0 (unknown) for a key without
// expiry, which so counts as the shortest and reads as 1ms.
func (q *quorumStore) freeIn(t tally) time.Duration {
	if t.foreign == 0 || len(t.done) >= q.needed {
		return 0
	}
	var ttls []time.Duration
	for _, a := range t.answers {
		if a.err == nil && a.reply != replyDone {
			ttls = append(ttls, a.holderTTL)
		}
	}
	k := min(max(q.needed-len(t.done)-len(t.errs), 1), len(ttls))
	// The k-th shortest is the (len-k+1)-th longest (majorityLease's order).
	return max(majorityLease(ttls, len(ttls)-k+1), time.Millisecond)
}

// decide records an attempt's outcome for its stragglers, and returns the
// nodes they took before it was known (for a failed attempt to give back;
// a won one keeps them). Decided, the attempt's landed grows no more.
func (q *quorumStore) decide(att *attempt, won bool, stragglers int) []int {
	q.mu.Lock()
	defer q.mu.Unlock()
	att.decided, att.holding, att.out = true, won, stragglers
	if won && att.finished < att.out {
		q.straggles[att.token] = att
	}
	return att.landed
}

// landed handles an acquire answer past its per-node timeout: a key taken
// for a failed attempt, or a lock released since, is given back on that
// node. No key another attempt counts on: a release marks the attempt
// (under q.mu) before its deletes, so this sees the mark and deletes after
// the late SET, or the release's delete follows it; and a later attempt
// with the same token found our key there, so it did not count this node.
func (q *quorumStore) landed(att *attempt, node int, key string, a answer) {
	q.mu.Lock()
	att.finished++
	took := a.err == nil && a.reply == replyDone
	if took && !att.decided {
		att.landed = append(att.landed, node) // decide hands it over
	}
	giveBack := took && att.decided && !att.holding
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

// giveBack releases, detached from ctx, the keys a failed attempt took on
// nodes that confirmed it: a delete sent to one that did not answer could
// land after the next attempt's SET (same token) and remove a key that
// attempt counted; landed handles those.
func (q *quorumStore) giveBack(ctx context.Context, timeout time.Duration, key, token string, nodes []int) {
	if len(nodes) == 0 {
		return // (nil only would ask every node)
	}
	q.ask(context.WithoutCancel(ctx), timeout, nodes, func(ctx context.Context, _ int, n quorumNode) answer {
		return replied(n.releaseKey(ctx, key, token))
	}, nil)
}

// extend: done when a majority confirmed; lost (replyForeign when a majority
// holds another token) when too few hold ours for a majority ever to
// confirm; else a *QuorumError, which the watchdog retries.
func (q *quorumStore) extend(ctx context.Context, r extendRequest) (int64, error) {
	t, _ := q.vote(ctx, "extend", nodeTimeout(r.ttl), func(ctx context.Context, _ int, n quorumNode) answer {
		return replied(n.extend(ctx, r))
	}, nil)
	return q.outcome(t, len(t.done), t.gone+t.foreign)
}

// release deletes the key where it holds our token, and tells the attempt's
// late calls to give back. replyDone when a majority answered and none holds
// it; lost when too few held it for a majority; else a *QuorumError.
func (q *quorumStore) release(ctx context.Context, ref *lockRef) (int64, error) {
	key, token := ref.key, ref.token
	q.mu.Lock()
	if att := q.straggles[token]; att != nil {
		att.holding = false
		delete(q.straggles, token)
	}
	q.mu.Unlock()

	t, _ := q.vote(ctx, "release", q.defaultTimeout, func(ctx context.Context, _ int, n quorumNode) answer {
		return replied(n.releaseKey(ctx, key, token))
	}, nil)
	// Every node that answered agreed: none holds our token now.
	return q.outcome(t, len(t.done)+t.gone+t.foreign, 0)
}

// pttl returns the TTL a majority still guarantees (the Needed-th longest of
// ours); -2 or -3 (a majority holds another token) when too few hold ours;
// a *QuorumError when failures leave it undecided.
func (q *quorumStore) pttl(ctx context.Context, ref *lockRef) (int64, error) {
	t, _ := q.vote(ctx, "ttl", q.defaultTimeout, func(ctx context.Context, _ int, n quorumNode) answer {
		ttl, err := n.pttl(ctx, ref)
		a := answer{reply: replyDone, ttl: ttl, err: err}
		if ttl == -2 || ttl == -3 {
			// In the replies of extend and release, for the tally:
			// replyGone and replyForeign.
			a.reply = ttl + 2
		}
		return a
	}, nil)
	if len(t.done) >= q.needed {
		// majorityLease's order holds for ms too: -1 (no expiry, someone
		// ran PERSIST) is the longest.
		ttls := make([]time.Duration, len(t.done))
		for i, node := range t.done {
			ttls[i] = time.Duration(t.answers[node].ttl)
		}
		return int64(majorityLease(ttls, q.needed)), nil
	}
	// Under a majority agreed: lost, or a *QuorumError.
	reply, err := q.outcome(t, len(t.done), t.gone+t.foreign)
	if err != nil {
		return 0, err
	}
	return reply - 2, nil // pttl.lua's -2 (gone) and -3 (another's)
}

// A tally is a command's answers from every node (ask's), counted by
// verdict, for the command's outcome or its *QuorumError.
type tally struct {
	op            string
	elapsed       time.Duration // up to the last answer waited for
	answers       []answer
	done          []int // the nodes that did it (acquire: took the key)
	gone, foreign int   // acquire: foreign, refused
	errs          []error
}

// vote sends call to every node (ask, handing late answers to late) and
// tallies the answers; it returns how many ask gave up on too.
func (q *quorumStore) vote(ctx context.Context, op string, timeout time.Duration, call func(ctx context.Context, node int, n quorumNode) answer, late func(node int, a answer)) (tally, int) {
	start := time.Now()
	answers, abandoned := q.ask(ctx, timeout, nil, call, late)
	t := tally{op: op, elapsed: time.Since(start), answers: answers}
	for i, a := range answers {
		switch {
		case a.err != nil:
			t.errs = append(t.errs, a.err)
		case a.reply == replyDone:
			t.done = append(t.done, i)
		case a.reply == replyGone:
			t.gone++
		default:
			t.foreign++
		}
	}
	return t, abandoned
}

// outcome is the verdict of extend, release and pttl on t, agreed and
// refused counted as the command counts them. Lost when too few nodes hold
// our token for a majority ever to: replyForeign when a majority holds
// another token (taken; so too few hold ours, a majority being over half),
// else replyGone (expired). Otherwise replyDone when agreed is a majority
// (which then leaves too few to lose it), else t's *QuorumError.
func (q *quorumStore) outcome(t tally, agreed, refused int) (int64, error) {
	switch {
	case t.foreign >= q.needed:
		return replyForeign, nil
	case t.gone+t.foreign > len(q.nodes)-q.needed:
		return replyGone, nil
	case agreed >= q.needed:
		return replyDone, nil
	}
	return 0, q.failure(t, agreed, refused, 0)
}

// failure is t's *QuorumError, its nodes agreed and refused counted as its
// command counts them.
func (q *quorumStore) failure(t tally, agreed, refused int, validity time.Duration) error {
	return &QuorumError{
		Op: t.op, Nodes: len(q.nodes), Needed: q.needed,
		Agreed: agreed, Refused: refused, Failed: len(t.errs),
		Elapsed: t.elapsed, Validity: validity, Errors: t.errs,
	}
}

var _ store = (*quorumStore)(nil)
