package redislock

import (
	"sync"
	"sync/atomic"
	"time"
)

// lazyTimer is a runtime timer only ever moved earlier (moving one earlier
// may wake an idle thread, on a small machine often the Redis server's
// core). Its owner's mutex guards it.
type lazyTimer struct {
	fire   func()                  // what the timer calls
	timer  *time.Timer             // created by the first arm
	calls  *atomic.Pointer[func()] // &fire, or noFire once stopped: a stopped timer the runtime keeps keeps no owner
	armed  time.Time               // when timer is set to fire; zero: not set
	closed bool                    // the owner is closed (Client.Close): arm does nothing
}

var noFire = func() {}

// arm makes the timer fire at at, unless it fires at or before at anyway.
// A time past counts as now: armed is when the timer is due to fire, which a
// pause (see pauses) makes it fire far later than.
func (t *lazyTimer) arm(at time.Time) {
	if t.closed || !t.armed.IsZero() && !t.armed.After(at) {
		return
	}
	now := time.Now()
	if at.Before(now) {
		at = now
	}
	t.armed = at
	if t.timer == nil {
		calls := &atomic.Pointer[func()]{}
		t.calls, t.timer = calls, time.AfterFunc(time.Hour, func() { (*calls.Load())() }) // Reset below
	}
	t.calls.Store(&t.fire)
	t.timer.Reset(at.Sub(now))
}

func (t *lazyTimer) fired() { t.armed = time.Time{} }

// stop stops the timer, also when not marked armed (a late firing may have
// set it): a set timer keeps its owner, and the Client, alive until it fires.
func (t *lazyTimer) stop() {
	if t.timer != nil {
		t.timer.Stop()
		t.calls.Store(&noFire)
	}
	t.armed = time.Time{}
}

func (t *lazyTimer) close() { t.stop(); t.closed = true }

// pauses is what a Client's timers saw of its process not running: a timer
// that fires far later than it was due, on the monotonic clock, means that
// no goroutine of the process ran meanwhile (SIGSTOP, a stop-the-world
// pause, a starved VM). A busy machine makes timers late by far less than
// pauseFloor, below which nothing is noted.
type pauses struct {
	mu       sync.Mutex
	from, to time.Time // the last pause seen: from a timer's due time to its firing
}

const pauseFloor = 500 * time.Millisecond

// note notes a timer due at due that fires at now (zero due: none); a pause
// that overlaps the last one (the same pause seen by another timer) extends it.
func (p *pauses) note(due, now time.Time) {
	if due.IsZero() || now.Sub(due) < pauseFloor {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if due.After(p.to) || due.Before(p.from) {
		p.from = due
	}
	if now.After(p.to) {
		p.to = now
	}
}

// across returns how long the pause seen across at lasted, if at least least.
func (p *pauses) across(at time.Time, least time.Duration) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.from.After(at) || p.to.Before(at) || p.to.Sub(p.from) < least {
		return 0
	}
	return p.to.Sub(p.from)
}
