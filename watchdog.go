package redislock

import (
	"container/heap"
	"context"
	"sync"
	"time"
)

// The watchdog: one scheduler per Client extends every lock it holds.
//
// The scheduler keeps a heap of held locks ordered by when each is due for
// extension, and one timer set to the earliest. When the timer fires, its
// goroutine takes every lock due within a short coalescing window (a
// quarter of the shortest interval among them: extending a little early is
// harmless) and sends their extensions together, one pipeline per round
// trip, then sets the timer for the next. So a Client owns no goroutine
// between extensions, one while a batch is under way, and never more:
// taking and releasing a lock at most moves the timer earlier (see
// lazyTimer), which costs no goroutine start-up or wake-up on the
// uncontended path.
//
// The watchdog never signals a loss by timing alone: the locks' safe
// deadlines ring on a timer of their own (alarms, below; see
// Lock.onSafeDeadline), so a batch stuck on a stalled connection delays no
// loss signal.
type scheduler struct {
	store store

	mu    sync.Mutex
	queue lockHeap
	timer lazyTimer // fires s.fire
	busy  bool      // fire's goroutine is running: it sets the timer when done
}

func newScheduler(s store) *scheduler {
	sc := &scheduler{store: s}
	sc.timer.fire = sc.fire
	return sc
}

// watchState is a lock's place in the scheduler, guarded by scheduler.mu.
type watchState struct {
	due       time.Time     // next extension
	slack     time.Duration // how early it may be extended to join a batch
	index     int           // position in the heap, -1 when not in it
	unwatched bool          // released or lost: never schedule again
}

type lockHeap []*Lock

func (h lockHeap) Len() int           { return len(h) }
func (h lockHeap) Less(i, j int) bool { return h[i].watch.due.Before(h[j].watch.due) }
func (h lockHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].watch.index, h[j].watch.index = i, j
}
func (h *lockHeap) Push(x any) {
	l := x.(*Lock)
	l.watch.index = len(*h)
	*h = append(*h, l)
}
func (h *lockHeap) Pop() any {
	old := *h
	l := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	l.watch.index = -1
	return l
}

// schedule puts l in the heap, due at due, unless it was unwatched.
func (s *scheduler) schedule(l *Lock, due time.Time, interval time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l.watch.unwatched {
		return
	}
	l.watch.due, l.watch.slack = due, interval/4
	if l.watch.index >= 0 {
		heap.Fix(&s.queue, l.watch.index)
	} else {
		heap.Push(&s.queue, l)
	}
	s.armLocked()
}

// unwatch takes l out for good. An extension of l already under way is not
// interrupted: wait for it by taking l.extending.
func (s *scheduler) unwatch(l *Lock) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l.watch.unwatched = true
	if l.watch.index >= 0 {
		// The timer is left alone, even with nothing left to extend: it
		// fires, finds nothing due and sets itself for the next lock, if
		// any. Stopping it here would make the next lock's schedule set
		// it again: a runtime timer operation per acquire + release.
		heap.Remove(&s.queue, l.watch.index)
	}
}

// armLocked sets the timer for the earliest lock, unless it is set for
// then or earlier already, or fire's goroutine is running (it sets the
// timer when its batch is done).
func (s *scheduler) armLocked() {
	if s.busy || len(s.queue) == 0 {
		return
	}
	s.timer.arm(s.queue[0].watch.due)
}

// fire runs on the timer's goroutine: it extends every lock that is due,
// batch after batch, then sets the timer for the next.
func (s *scheduler) fire() {
	s.mu.Lock()
	if s.busy {
		// A Reset raced a firing that is already running: it will set
		// the timer when done.
		s.mu.Unlock()
		return
	}
	s.busy = true
	s.timer.fired()
	for {
		now := time.Now()
		var batch []*Lock
		for len(s.queue) > 0 && !s.queue[0].watch.due.After(now.Add(s.queue[0].watch.slack)) {
			batch = append(batch, heap.Pop(&s.queue).(*Lock))
		}
		if len(batch) == 0 {
			break
		}
		s.mu.Unlock()
		s.extend(batch)
		s.mu.Lock()
	}
	s.busy = false
	s.armLocked()
	s.mu.Unlock()
}

// extendRequest is one lock's extension in a batch.
type extendRequest struct {
	opts  *options
	key   string
	token string
	ttl   time.Duration
	reply int64 // filled in by the store
	err   error
}

// batchExtender is implemented by stores that can extend many locks in one
// round trip. Stores without it get the extensions concurrently.
type batchExtender interface {
	extendBatch(ctx context.Context, reqs []extendRequest)
}

func (s *scheduler) extend(batch []*Lock) {
	ready := batch[:0]
	for _, l := range batch {
		select {
		case l.extending <- struct{}{}:
			if l.notHeld() != nil {
				// Released (or lost) between leaving the heap and
				// now: nothing to extend.
				<-l.extending
				continue
			}
			ready = append(ready, l)
		default: // a manual Extend is under way: come back shortly
			s.schedule(l, time.Now().Add(time.Millisecond), time.Millisecond)
		}
	}
	if len(ready) == 0 {
		return
	}
	reqs := make([]extendRequest, len(ready))
	intervals := make([]time.Duration, len(ready))
	deadline := time.Time{}
	for i, l := range ready {
		l.mu.Lock()
		reqs[i] = extendRequest{opts: l.opts, key: l.ref.key, token: l.ref.token, ttl: l.ttl}
		intervals[i] = l.interval
		if deadline.IsZero() || l.safeDeadline.Before(deadline) {
			deadline = l.safeDeadline
		}
		l.mu.Unlock()
	}
	// Bound the round trip by the earliest lease in it: an answer after
	// that comes too late to matter. (go-redis honours this only with
	// ContextTimeoutEnabled; the loss is signalled on time regardless.)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	sent := time.Now()
	if b, ok := s.store.(batchExtender); ok {
		b.extendBatch(ctx, reqs)
	} else {
		var wg sync.WaitGroup
		for i := range reqs {
			wg.Go(func() {
				r := &reqs[i]
				r.reply, r.err = s.store.extend(ctx, r.opts, r.key, r.token, r.ttl)
			})
		}
		wg.Wait()
	}
	cancel()
	latency := time.Since(sent)
	for i, l := range ready {
		err := l.recordExtension(sent, latency, reqs[i].ttl, reqs[i].reply, reqs[i].err, true)
		<-l.extending
		if err == nil {
			s.schedule(l, sent.Add(intervals[i]), intervals[i])
			continue
		}
		if l.notHeld() == nil {
			l.opts.log().Warn("redislock: extension failed, retrying until the safe deadline",
				"name", l.name, "error", err, "safe_deadline_in", time.Until(deadline))
		}
		retry := max(intervals[i]/3, time.Millisecond)
		s.schedule(l, time.Now().Add(retry), retry)
	}
}
