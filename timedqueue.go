package redislock

import (
	"container/heap"
	"sync"
	"time"
)

// timeHeap is a min-heap by time whose items keep their index (-1: out; see
// slot), so that one can be moved or removed in O(log n).
type timeHeap[T any] struct {
	items []T
	when  func(T) time.Time
	slot  func(T) *int
}

func (h *timeHeap[T]) set(x T) {
	if i := *h.slot(x); i >= 0 {
		heap.Fix(h, i)
		return
	}
	heap.Push(h, x)
}

// The heap.Interface methods; use the methods above.

func (h *timeHeap[T]) Len() int           { return len(h.items) }
func (h *timeHeap[T]) Less(i, j int) bool { return h.when(h.items[i]).Before(h.when(h.items[j])) }
func (h *timeHeap[T]) Swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	*h.slot(h.items[i]), *h.slot(h.items[j]) = i, j
}
func (h *timeHeap[T]) Push(x any) {
	item := x.(T)
	*h.slot(item) = len(h.items)
	h.items = append(h.items, item)
}
func (h *timeHeap[T]) Pop() any {
	n := len(h.items) - 1
	item := h.items[n]
	clear(h.items[n:]) // the backing array keeps no item alive
	h.items = h.items[:n]
	*h.slot(item) = -1
	return item
}

// timedQueue is the timed queue behind a Client's watchdog, alarms and
// janitor: a round hands everything due (or within slack) to run, without
// the mutex, until nothing is due; then one lazyTimer is set for the next
// item, or stopped. Its owner embeds it and uses its mu.
type timedQueue[T any] struct {
	mu     sync.Mutex
	items  timeHeap[T]
	timer  lazyTimer
	pauses *pauses   // notes a firing far later than due (see pauses)
	busy   bool      // a round is running: it sets the timer when done
	ended  sync.Cond // broadcast when a round ends (L: &mu)
	// slack: how early an item may join a round; beforeRounds and idle run
	// with mu held as rounds begin and when the queue empties. The owner
	// sets those it needs after init (which makes them no-ops).
	slack        func(T) time.Duration
	run          func(due []T)
	beforeRounds func(now time.Time)
	idle         func()
	// also: another time to fire at (the restart watch, see scheduler).
	also time.Time
}

// init sets the queue up; rounds run while bg lets new work start.
func (q *timedQueue[T]) init(bg *background, when func(T) time.Time, slot func(T) *int, run func([]T)) {
	q.items.when, q.items.slot, q.run = when, slot, run
	q.ended.L, q.pauses = &q.mu, &bg.pauses
	q.slack = func(T) time.Duration { return 0 }
	q.beforeRounds, q.idle = func(time.Time) {}, func() {}
	q.timer.fire = func() {
		if bg.enter() {
			defer bg.exit()
			q.fire()
		}
	}
}

func (q *timedQueue[T]) setLocked(x T) {
	q.items.set(x)
	q.armLocked()
}

func (q *timedQueue[T]) removeLocked(x T) {
	if i := *q.items.slot(x); i >= 0 {
		heap.Remove(&q.items, i)
	}
	q.idleLocked()
}

// idleLocked stops the timer once the queue is empty and no round runs,
// and runs idle: a set timer would keep the Client alive until it fires.
func (q *timedQueue[T]) idleLocked() {
	if q.items.Len() == 0 && !q.busy {
		q.timer.stop()
		q.idle()
	}
}

// armLocked sets the timer for the earliest item (or also), unless a round runs.
func (q *timedQueue[T]) armLocked() {
	if q.busy {
		return
	}
	at := q.also
	if q.items.Len() > 0 && (at.IsZero() || q.items.when(q.items.items[0]).Before(at)) {
		at = q.items.when(q.items.items[0])
	}
	if !at.IsZero() {
		q.timer.arm(at)
	}
}

// fire runs the rounds of what is due, then sets the timer for the next.
func (q *timedQueue[T]) fire() {
	q.mu.Lock()
	if q.busy {
		// An arm raced a running firing, which sets the timer when done.
		q.mu.Unlock()
		return
	}
	q.busy = true
	now := time.Now()
	q.pauses.note(q.timer.armed, now)
	q.timer.fired()
	q.beforeRounds(now)
	for due := q.takeDueLocked(time.Now()); len(due) > 0; due = q.takeDueLocked(time.Now()) {
		q.mu.Unlock()
		q.run(due)
		q.mu.Lock()
	}
	q.busy = false
	q.ended.Broadcast()
	q.idleLocked()
	q.armLocked()
	q.mu.Unlock()
}

// takeDueLocked takes out the items due by now (or within their slack).
func (q *timedQueue[T]) takeDueLocked(now time.Time) []T {
	var due []T
	for q.items.Len() > 0 {
		first := q.items.items[0]
		if q.items.when(first).After(now.Add(q.slack(first))) {
			break
		}
		due = append(due, heap.Pop(&q.items).(T))
	}
	return due
}

func (q *timedQueue[T]) close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.timer.close()
}

// notePause notes a pause still under way for this queue: its timer, due
// long ago, has not fired yet (a goroutine that runs first asks).
func (q *timedQueue[T]) notePause(now time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.pauses.note(q.timer.armed, now)
}

// settledLocked waits until no round runs; q.mu is held.
func (q *timedQueue[T]) settledLocked() {
	for q.busy {
		q.ended.Wait()
	}
}
