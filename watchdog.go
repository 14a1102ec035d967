package redislock

import (
	"container/heap"
	"context"
	"sync"
	"time"
)

// The watchdog: one scheduler per Client extends every lock it holds.
//
// A single goroutine keeps a heap of held locks ordered by when each is due
// for extension. When the earliest falls due it takes every lock due within
// a short coalescing window (a quarter of the shortest interval among them:
// extending a little early is harmless) and sends their extensions together,
// one pipeline per round trip. The goroutine starts with the first held
// lock and exits when none is left, so an idle Client owns no goroutine.
//
// The watchdog never signals a loss by timing alone: each lock's safe
// deadline has its own timer (see Lock.onSafeDeadline), so a batch stuck on a
// stalled connection delays no loss signal.
type scheduler struct {
	store store

	mu      sync.Mutex
	queue   lockHeap
	running bool
	wake    chan struct{} // buffered: a new earliest lock, or a removal
}

func newScheduler(s store) *scheduler {
	return &scheduler{store: s, wake: make(chan struct{}, 1)}
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
	if !s.running {
		s.running = true
		go s.run()
	} else if l.watch.index == 0 {
		s.notify()
	}
}

// unwatch takes l out for good. An extension of l already under way is not
// interrupted: wait for it by taking l.extending.
func (s *scheduler) unwatch(l *Lock) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l.watch.unwatched = true
	if l.watch.index >= 0 {
		heap.Remove(&s.queue, l.watch.index)
		s.notify() // the goroutine exits if that was the last lock
	}
}

func (s *scheduler) notify() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *scheduler) run() {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		s.mu.Lock()
		if len(s.queue) == 0 {
			s.running = false
			s.mu.Unlock()
			return
		}
		now := time.Now()
		if wait := s.queue[0].watch.due.Sub(now); wait > 0 {
			s.mu.Unlock()
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-s.wake:
				timer.Stop() // since Go 1.23 no stale tick is left to drain
			}
			continue
		}
		var batch []*Lock
		for len(s.queue) > 0 && !s.queue[0].watch.due.After(now.Add(s.queue[0].watch.slack)) {
			batch = append(batch, heap.Pop(&s.queue).(*Lock))
		}
		s.mu.Unlock()
		s.extend(batch)
	}
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
		reqs[i] = extendRequest{opts: &l.opts, key: l.key, token: l.token, ttl: l.ttl}
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
		if l.ctx.Err() == nil {
			l.opts.log().Warn("redislock: extension failed, retrying until the safe deadline",
				"name", l.name, "error", err, "safe_deadline_in", time.Until(deadline))
		}
		retry := max(intervals[i]/3, time.Millisecond)
		s.schedule(l, time.Now().Add(retry), retry)
	}
}
