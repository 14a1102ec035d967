package redislock

import (
	"container/heap"
	"time"
)

// timeHeap is the one min-heap of the package: items ordered by a time
// (the watchdog's due extensions, the safe-deadline alarms, the janitor's
// clean-ups), each keeping its own index, so that it can be moved or taken
// out in O(log n). when and slot say where an item keeps its time and its
// index (-1: not in the heap). The owner's mutex guards it.
type timeHeap[T any] struct {
	items []T
	when  func(T) time.Time
	slot  func(T) *int
}

// set puts x in the heap, or moves it after its time changed.
func (h *timeHeap[T]) set(x T) {
	if i := *h.slot(x); i >= 0 {
		heap.Fix(h, i)
		return
	}
	heap.Push(h, x)
}

// remove takes x out, if it is in.
func (h *timeHeap[T]) remove(x T) {
	if i := *h.slot(x); i >= 0 {
		heap.Remove(h, i)
	}
}

// first returns the earliest item; ok is false when the heap is empty.
func (h *timeHeap[T]) first() (x T, ok bool) {
	if len(h.items) == 0 {
		return x, false
	}
	return h.items[0], true
}

// popDue takes out the earliest item if its time is at or before due.
func (h *timeHeap[T]) popDue(due time.Time) (x T, ok bool) {
	if len(h.items) == 0 || h.when(h.items[0]).After(due) {
		return x, false
	}
	return heap.Pop(h).(T), true
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
	var zero T
	h.items[n] = zero
	h.items = h.items[:n]
	*h.slot(item) = -1
	return item
}
