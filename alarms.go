package redislock

import (
	"time"
)

// alarms rings what a Client times without Redis: safe deadlines, maximum
// holds, idle rooms. Setting one after the next firing, moving one later or
// cancelling one touches no runtime timer. Each rings on a goroutine of its
// own: a slow one (a user's logger or Observer) delays no other.
type alarms struct {
	bg *background
	timedQueue[*alarm]
}

// alarm is one ringing time; its owner keeps it (and sets what rings).
type alarm struct {
	at    time.Time
	rings ringer
	index int // in the heap; -1 when not in it
}

// ringer is what an alarm rings: a small type over its owner (no allocation).
type ringer interface{ ring() }

type (
	safeDeadlineRing hold     // rings hold.onSafeDeadline
	maxHoldRing      hold     // rings hold.onMaxHold
	idleRoomRing     waitRoom // rings waitRooms.closeIdle
)

func (r *safeDeadlineRing) ring() { (*hold)(r).onSafeDeadline() }
func (r *maxHoldRing) ring()      { (*hold)(r).onMaxHold() }
func (r *idleRoomRing) ring()     { r.rooms.closeIdle((*waitRoom)(r)) }

func newAlarms(bg *background) *alarms {
	as := &alarms{bg: bg}
	as.init(bg, func(a *alarm) time.Time { return a.at }, func(a *alarm) *int { return &a.index }, as.ringAll)
	return as
}

func (as *alarms) set(a *alarm, at time.Time) {
	as.mu.Lock()
	defer as.mu.Unlock()
	a.at = at
	as.setLocked(a)
}

func (as *alarms) cancel(a *alarm) {
	as.mu.Lock()
	defer as.mu.Unlock()
	as.removeLocked(a)
}

func (as *alarms) ringAll(due []*alarm) {
	for _, a := range due {
		if as.bg.enter() {
			go func() {
				defer as.bg.exit()
				a.rings.ring()
			}()
		}
	}
}

// held returns the holds whose hold has not ended (safe-deadline alarm set).
func (as *alarms) held() []*hold {
	as.mu.Lock()
	defer as.mu.Unlock()
	var holds []*hold
	for _, a := range as.items.items {
		if r, ok := a.rings.(*safeDeadlineRing); ok {
			holds = append(holds, (*hold)(r))
		}
	}
	return holds
}
