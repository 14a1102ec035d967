package redislock

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// scheduler is the watchdog: it extends a Client's locks in rounds (a lock
// joins up to a quarter of its interval early), one pipeline per round
// trip; on a Cluster one per node, each on a goroutine of its own and
// handled as it is answered, so that a node that does not answer delays
// neither the others' nor the next rounds. Losses ring on alarms, not here:
// a stalled batch delays none.
type scheduler struct {
	store store
	bg    *background // the per-node round trips run in it
	// timedQueue: the held locks by next extension; its mu guards the scheduler.
	timedQueue[*hold]
	// watchRDB: the go-redis client whose restart watch it joins while it
	// holds locks (nil: none); watch: the one it joined.
	watchRDB  redis.UniversalClient
	watchOpts *options
	watch     *restartWatch
	watching  bool // a member of watch, since locks were held for watchDelay (timedQueue.also)
	// failing: the nodes whose last batch could not reach Redis (see
	// noteReachability); "" for all when not a Cluster. Never a Cluster's
	// multi lock, which goes on its own and may span nodes.
	failing map[string]bool
	// inFlight: a Cluster's per-node round trips under way; their locks are
	// out of the queue, which is not idle for that.
	inFlight int
}

func newScheduler(s store, bg *background) *scheduler {
	sc := &scheduler{store: s, bg: bg, failing: map[string]bool{}}
	sc.init(bg, func(l *hold) time.Time { return l.watch.due }, func(l *hold) *int { return &l.watch.index }, sc.extend)
	sc.slack = func(l *hold) time.Duration { return l.watch.slack }
	sc.beforeRounds = sc.joinWatchLocked
	sc.idle = func() {
		if sc.inFlight == 0 {
			sc.leaveWatchLocked()
		}
	}
	return sc
}

// watchState is a lock's place in the scheduler, guarded by scheduler.mu.
type watchState struct {
	due       time.Time     // next extension
	slack     time.Duration // how early it may be extended to join a batch
	index     int           // position in the heap, -1 when not in it
	unwatched bool          // released or lost: never schedule again
}

func (s *scheduler) schedule(l *hold, due time.Time, interval time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l.watch.unwatched {
		return
	}
	l.watch.due, l.watch.slack = due, interval/4
	if s.watchRDB != nil && !s.watching && s.also.IsZero() {
		s.also = time.Now().Add(watchDelay) // when to join the restart watch
	}
	s.setLocked(l)
}

// joinWatchLocked joins the restart watch once locks have been held for watchDelay.
func (s *scheduler) joinWatchLocked(now time.Time) {
	if s.watching || s.also.IsZero() || now.Before(s.also) {
		return
	}
	s.also = time.Time{}
	s.watch = joinWatch(s.watchRDB, s.watchOpts, s)
	s.watching = true
}

func (s *scheduler) leaveWatchLocked() {
	s.also = time.Time{}
	if s.watching {
		s.watch.leave(s)
		s.watching = false
	}
}

// unwatch takes l out for good; an extension under way goes on (take the
// extension slot to wait for it).
func (s *scheduler) unwatch(l *hold) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l.watch.unwatched = true
	s.removeLocked(l)
}

// close stops the timer for good, and closes the restart watch if no other
// Client uses it, returning a channel closed once its goroutine returned.
func (s *scheduler) close() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.timer.close()
	s.leaveWatchLocked()
	return s.watch.closeIfIdle()
}

type extendRequest struct {
	opts  *options
	key   string
	token string
	ttl   time.Duration
	kind  lockKind
	// extraKey: a shared hold's set or a semaphore's limit key; multi: a multi lock's.
	extraKey string
	multi    *multiRef
	reply    int64 // filled in by the store
	err      error
}

// batchExtender extends many locks in one round trip per node (without it:
// concurrently, one by one).
type batchExtender interface {
	// extendBatch extends reqs, which go to one node.
	extendBatch(ctx context.Context, reqs []extendRequest)
	// node names the node of key (see nodeOf).
	node(key string) string
}

func (s *scheduler) extend(batch []*hold) {
	ready := batch[:0]
	for _, l := range batch {
		if !l.tryExtending() { // a manual Extend is under way: come back shortly
			s.schedule(l, time.Now().Add(time.Millisecond), time.Millisecond)
			continue
		}
		if l.notHeld() != nil {
			// Released (or lost) since it left the heap.
			l.doneExtending()
			continue
		}
		ready = append(ready, l)
	}
	if len(ready) == 0 {
		return
	}
	b, ok := s.store.(batchExtender)
	if !ok || !s.store.slotted() {
		s.extendOn("", ready)
		return
	}
	groups := map[string][]*hold{}
	for _, l := range ready {
		node := "multi " + l.ref.key // a multi lock may span nodes: on its own
		if l.ref.multi == nil {
			node = b.node(l.ref.key)
		}
		groups[node] = append(groups[node], l)
	}
	for node, group := range groups {
		if !s.bg.enter() { // Close has begun: no new goroutine
			s.extendOn(node, group)
			continue
		}
		s.mu.Lock()
		s.inFlight++
		s.mu.Unlock()
		go func() {
			defer s.bg.exit()
			s.extendOn(node, group)
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.inFlight--; s.items.Len() == 0 && !s.busy {
				s.idle()
			}
		}()
	}
}

// extendOn extends ready, whose locks are on node, in one round trip
// bounded by the earliest safe deadline among them, and schedules each
// lock's next extension or retry.
func (s *scheduler) extendOn(node string, ready []*hold) {
	reqs := make([]extendRequest, len(ready))
	intervals := make([]time.Duration, len(ready))
	deadline := time.Time{}
	for i, l := range ready {
		l.mu.Lock()
		reqs[i] = l.extendRequest(l.ttl)
		intervals[i] = l.interval
		if deadline.IsZero() || l.safeDeadline.Before(deadline) {
			deadline = l.safeDeadline
		}
		l.mu.Unlock()
	}
	// Bound the round trip by the earliest lease in it: a later answer is
	// too late to matter (the loss is signalled on time regardless).
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	sent := time.Now()
	if b, ok := s.store.(batchExtender); ok {
		b.extendBatch(ctx, reqs)
	} else {
		var wg sync.WaitGroup
		for i := range reqs {
			wg.Go(func() { reqs[i].reply, reqs[i].err = s.store.extend(ctx, reqs[i]) })
		}
		wg.Wait()
	}
	cancel()
	latency := time.Since(sent)
	s.noteReachability(node, reqs)
	for i, l := range ready {
		err := l.recordExtension(sent, latency, reqs[i].ttl, reqs[i].reply, reqs[i].err, true)
		l.doneExtending()
		if err == nil {
			s.schedule(l, sent.Add(intervals[i]), intervals[i])
			continue
		}
		l.mu.Lock()
		left := time.Until(l.safeDeadline)
		l.mu.Unlock()
		if l.notHeld() == nil && left > 0 {
			// (Past it, as after a pause, the alarm reports the loss: no retry to announce.)
			l.opts.log().Warn("redislock: extension failed, retrying until the safe deadline",
				"name", l.name, "holder", holderID(l.token()), "error", err, "safe_deadline_in", time.Until(deadline))
		}
		// Three more tries in what is left of the lease, a third of the
		// interval apart at most: a hand-over's lease may be short.
		retry := max(min(intervals[i]/3, left/3), time.Millisecond)
		s.schedule(l, time.Now().Add(retry), retry)
	}
}

// noteReachability has every held lock checked at once when a batch shows
// that the server restarted, failed over or lost data: a key found gone (the
// other locks likely are too), or Redis answering after a failed batch.
func (s *scheduler) noteReachability(node string, reqs []extendRequest) {
	failed := slices.ContainsFunc(reqs, func(r extendRequest) bool { return r.err != nil })
	gone := slices.ContainsFunc(reqs, func(r extendRequest) bool { return r.err == nil && r.reply == replyGone })
	back := false
	if node == "" || reqs[0].multi == nil {
		// Unless a multi lock's own group (on a Cluster: it may span nodes),
		// which says nothing of one node: nothing kept, so nothing left per lock.
		s.mu.Lock()
		back = s.failing[node] && !failed
		s.failing[node] = failed // (one entry per node ever seen)
		s.mu.Unlock()
	}
	if gone || back {
		s.lookAtAll()
	}
}

func (s *scheduler) lookAtAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	for _, l := range s.items.items {
		l.watch.due = now // all due alike: still a heap, in its order
	}
	s.armLocked()
}
