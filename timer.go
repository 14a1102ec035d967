package redislock

import (
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
func (t *lazyTimer) arm(at time.Time) {
	if t.closed || !t.armed.IsZero() && !t.armed.After(at) {
		return
	}
	t.armed = at
	if t.timer == nil {
		calls := &atomic.Pointer[func()]{}
		t.calls, t.timer = calls, time.AfterFunc(time.Hour, func() { (*calls.Load())() }) // Reset below
	}
	t.calls.Store(&t.fire)
	t.timer.Reset(time.Until(at))
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
