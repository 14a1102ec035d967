package redislock

import (
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
	bg    *background
	mu    sync.Mutex
	queue timeHeap[*alarm]
	timer lazyTimer // fires as.fire
}

func newAlarms(bg *background) *alarms {
	as := &alarms{bg: bg}
	as.queue.when = func(a *alarm) time.Time { return a.at }
	as.queue.slot = func(a *alarm) *int { return &a.index }
	as.timer.fire = func() {
		if bg.enter() {
			defer bg.exit()
			as.fire()
		}
	}
	return as
}

// alarm is one lock's safe deadline, kept in the lock.
type alarm struct {
	at    time.Time
	lock  *hold
	index int // in the heap; -1 when not in it
}

// set makes a ring at at (again, if it was set or has rung).
func (as *alarms) set(a *alarm, at time.Time) {
	as.mu.Lock()
	defer as.mu.Unlock()
	a.at = at
	as.queue.set(a)
	first, _ := as.queue.first()
	as.timer.arm(first.at)
}

// cancel makes sure a does not ring (unless it is ringing already).
func (as *alarms) cancel(a *alarm) {
	as.mu.Lock()
	defer as.mu.Unlock()
	as.queue.remove(a)
	if as.queue.Len() == 0 {
		// No lock held: a set timer would keep the Client alive until
		// it fires (see lazyTimer.stop).
		as.timer.stop()
	}
}

// fire runs on the timer's goroutine: it rings every alarm that is due and
// sets the timer for the next.
func (as *alarms) fire() {
	as.mu.Lock()
	now := time.Now()
	var due []*alarm
	for {
		a, ok := as.queue.popDue(now)
		if !ok {
			break
		}
		due = append(due, a)
	}
	as.timer.fired()
	if first, ok := as.queue.first(); ok {
		as.timer.arm(first.at)
	}
	as.mu.Unlock()
	for _, a := range due {
		if as.bg.enter() {
			go func() {
				defer as.bg.exit()
				a.lock.onSafeDeadline()
			}()
		}
	}
}

// held returns the locks whose alarms are set: every lock of the Client
// whose hold has not ended.
func (as *alarms) held() []*hold {
	as.mu.Lock()
	defer as.mu.Unlock()
	locks := make([]*hold, len(as.queue.items))
	for i, a := range as.queue.items {
		locks[i] = a.lock
	}
	return locks
}

// close stops the timer for good (Client.Close).
func (as *alarms) close() {
	as.mu.Lock()
	defer as.mu.Unlock()
	as.timer.close()
}
