package redislock

import (
	"container/heap"
	"sync"
	"time"
)

// alarms rings the safe deadlines of every lock of a Client (see
// Lock.onSafeDeadline) on one lazyTimer, which never waits for Redis.
// Setting an alarm for later than the timer's next firing, moving one later
// and cancelling one touch no runtime timer, so an uncontended
// acquire + release, whose deadline is always later than the one armed
// before it, costs no timer operation. Each due lock's loss is signalled
// on a goroutine of its own, so a slow one (a user's logger or Observer)
// delays no other.
type alarms struct {
	mu    sync.Mutex
	queue alarmHeap
	timer lazyTimer // fires as.fire
}

func newAlarms() *alarms {
	as := &alarms{}
	as.timer.fire = as.fire
	return as
}

// alarm is one lock's safe deadline, kept in the lock.
type alarm struct {
	at    time.Time
	lock  *Lock
	index int // in the heap; -1 when not in it
}

type alarmHeap []*alarm

func (h alarmHeap) Len() int { return len(h) }

func (h alarmHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }

func (h alarmHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}

func (h *alarmHeap) Push(x any) {
	a := x.(*alarm)
	a.index = len(*h)
	*h = append(*h, a)
}

func (h *alarmHeap) Pop() any {
	old := *h
	a := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	a.index = -1
	return a
}

// set makes a ring at at (again, if it was set or has rung).
func (as *alarms) set(a *alarm, at time.Time) {
	as.mu.Lock()
	defer as.mu.Unlock()
	a.at = at
	if a.index >= 0 {
		heap.Fix(&as.queue, a.index)
	} else {
		heap.Push(&as.queue, a)
	}
	as.timer.arm(as.queue[0].at)
}

// cancel makes sure a does not ring (unless it is ringing already).
func (as *alarms) cancel(a *alarm) {
	as.mu.Lock()
	defer as.mu.Unlock()
	if a.index >= 0 {
		heap.Remove(&as.queue, a.index)
	}
}

// fire runs on the timer's goroutine: it rings every alarm that is due and
// sets the timer for the next.
func (as *alarms) fire() {
	as.mu.Lock()
	now := time.Now()
	var due []*alarm
	for len(as.queue) > 0 && !as.queue[0].at.After(now) {
		due = append(due, heap.Pop(&as.queue).(*alarm))
	}
	as.timer.fired()
	if len(as.queue) > 0 {
		as.timer.arm(as.queue[0].at)
	}
	as.mu.Unlock()
	for _, a := range due {
		go a.lock.onSafeDeadline()
	}
}
