package redislock

import (
	"context"
	"crypto/rand"
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redislock/redislock/internal/lockrules"
)

// waitRooms are a Client's waiting rooms: the callers waiting for one key,
// of any kind, share its room and subscription (see notifier). Exclusive
// and multi callers wait in line for its turn, and only the turn's holder
// asks Redis; shared and semaphore waiters each queue on the server.
type waitRooms struct {
	notifier *notifier
	alarms   *alarms // the Client's: they close the rooms left idle
	// tag begins this Client's waiters' tokens (see waiterToken): a release
	// hands over on handoverChannel(key, tag), which only we hear.
	tag string

	mu    sync.Mutex
	rooms map[string]*waitRoom
}

type waitRoom struct {
	key string
	// users, turnHeld, line, sub and linger are guarded by waitRooms.mu.
	users    int // callers in the room, and the lock that holds its turn
	turnHeld bool
	line     []*queuedWaiter
	sub      *subscription // nil until someone in the room first waited
	// linger closes the room once idle (see leave), in rooms.
	linger alarm
	rooms  *waitRooms
	// seenHeld: the turn holder found the lock held, or holds it: callers
	// in line who give up report ErrNotAcquired.
	seenHeld atomic.Bool

	mu sync.Mutex // guards gen and seats; the notifier delivers under it
	// gen is closed, and replaced, at every plain announcement.
	gen   chan struct{}
	seats map[string]*seat // by ticket (see handoffTicket)
}

// seat is where a hand-over to a caller's ticket finds it.
type seat struct {
	woken chan struct{} // buffered: a hand-over to it was announced
	// handed: the lease the last hand-over announced (0: none).
	handed time.Duration
}

// queuedWaiter is a goroutine in line for a room's turn.
type queuedWaiter struct {
	turn chan struct{} // closed to hand over the turn
	// ref: the waiter's lock, whose first attempt a releaser may send
	// (nil: not); early: that attempt, set before turn closes.
	ref   *lockRef
	early *earlyAttempt
}

// earlyAttempt is an attempt sent for a waiter by its releaser, behind the release.
type earlyAttempt struct {
	sent  time.Time // before the command left: the lease began later
	reply *redis.Cmd
}

// expect seats ticket's caller: a hand-over to it wakes it from now on,
// on the channel returned.
func (r *waitRoom) expect(ticket string) <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seats == nil {
		r.seats = map[string]*seat{}
	}
	s := r.seats[ticket]
	if s == nil {
		s = &seat{woken: make(chan struct{}, 1)}
		r.seats[ticket] = s
	}
	return s.woken
}

func (r *waitRoom) unseat(ticket string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.seats, ticket)
}

func (r *waitRoom) wakeup() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.gen == nil {
		r.gen = make(chan struct{})
	}
	return r.gen
}

// wants delivers an announcement: a plain release wakes everyone; a
// hand-over ("g:" ticket "/" lease in ms, see lua/handover.lua) the caller
// seated with its ticket, who claims it when no lease is given.
func (r *waitRoom) wants(payload string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	rest, isHandover := strings.CutPrefix(payload, "g:")
	if !isHandover {
		if r.gen != nil {
			close(r.gen)
		}
		r.gen = make(chan struct{})
		return true
	}
	ticket, lease, withLease := strings.Cut(rest, "/")
	s := r.seats[ticket]
	if s == nil {
		return false // handed to a waiter of another process
	}
	s.handed = 0
	if ms, err := strconv.ParseInt(lease, 10, 64); withLease && err == nil && ms > 0 && ms <= maxLeaseMs {
		s.handed = time.Duration(ms) * time.Millisecond
	}
	select {
	case s.woken <- struct{}{}:
	default:
	}
	return true
}

// maxLeaseMs bounds a lease or PTTL read from Redis (ms: an announced
// hand-over's, a holder's, a Lock's TTL) to what a time.Duration holds.
const maxLeaseMs = math.MaxInt64 / int64(time.Millisecond)

// takeHandover takes the lease of a hand-over to ticket announced since the last call.
func (r *waitRoom) takeHandover(ticket string) (time.Duration, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s := r.seats[ticket]; s != nil && s.handed != 0 {
		lease := s.handed
		s.handed = 0
		return lease, true
	}
	return 0, false
}

// newWaitRooms returns a Client's rooms; rdb nil: no announcements (waiters poll).
func newWaitRooms(rdb redis.UniversalClient, as *alarms) *waitRooms {
	w := &waitRooms{rooms: map[string]*waitRoom{}, alarms: as}
	if rdb != nil {
		w.notifier = newNotifier(rdb)
		w.tag = rand.Text()[:handoverTagLen]
	}
	return w
}

// errPatience: a caller in line spent its strategy's waits; errSeenHeld:
// it gave up in line after the turn holder saw the lock held.
var (
	errPatience = errors.New("retry strategy spent while waiting in line")
	errSeenHeld = errors.New("seen held by the caller ahead in line")
)

// enter returns key's room, with its turn held by the caller when turn is
// set, waiting in line (counted against p) behind other goroutines of this
// Client; then also the attempt a releaser made for ref, if any. If the
// turn came as it gave up, it returns the room and attempt with the error.
func (w *waitRooms) enter(ctx context.Context, key string, turn bool, ref *lockRef, p *patience, closing <-chan struct{}) (*waitRoom, *earlyAttempt, error) {
	w.mu.Lock()
	room := w.rooms[key]
	if room == nil {
		room = &waitRoom{key: key, rooms: w}
		room.linger = alarm{rings: (*idleRoomRing)(room), index: -1}
		w.rooms[key] = room
	}
	room.users++
	if !turn || !room.turnHeld {
		room.turnHeld = room.turnHeld || turn
		w.mu.Unlock()
		return room, nil, nil
	}
	me := &queuedWaiter{turn: make(chan struct{}), ref: ref}
	room.line = append(room.line, me)
	w.mu.Unlock()

	early, err := me.wait(ctx, p, closing)
	if err == nil {
		return room, early, nil
	}
	// Out of line (with errSeenHeld when the turn holder saw the lock held),
	// unless we are not in it any more: the turn is being handed to us.
	w.mu.Lock()
	i := slices.Index(room.line, me)
	if i >= 0 {
		room.line = slices.Delete(room.line, i, i+1)
		room.users--
		if room.seenHeld.Load() {
			err = join(errSeenHeld, err)
		}
	}
	w.mu.Unlock()
	if i >= 0 {
		return nil, nil, err
	}
	// The turn is being handed to us as we give up: wait for the attempt
	// a releaser may be sending for us, so that the caller can undo it.
	<-me.turn
	return room, me.early, err
}

// wait waits for the turn, within ctx and p.
func (me *queuedWaiter) wait(ctx context.Context, p *patience, closing <-chan struct{}) (*earlyAttempt, error) {
	// Reset before each wait. Stopped, not left to the collector: the
	// GODEBUG defaults follow the main module's go line, and a program on
	// go 1.22 or older gets asynctimerchan=1, where a timer not stopped stays
	// in the runtime until it fires (an hour, per wait, here). So every timer
	// of ours is stopped once done.
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := time.Now()
		if !p.waiting(now) && !p.begin(now) {
			return nil, errPatience
		}
		timer.Reset(p.end.Sub(now))
		select {
		case <-me.turn:
			return me.early, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-closing:
			return nil, errClosing
		case <-timer.C: // a wait ended: the next begins
		}
	}
}

// takeNext hands room's turn to the next in line if it accepts an early
// attempt, and returns it; the caller sets the attempt, then closes its turn.
func (w *waitRooms) takeNext(room *waitRoom) *queuedWaiter {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(room.line) == 0 || room.line[0].ref == nil {
		return nil
	}
	next := room.line[0]
	room.line = room.line[1:]
	room.users--
	return next
}

// roomLinger: a lock taken again and again does not subscribe every time.
const roomLinger = 100 * time.Millisecond

// leave takes a caller out; with turn, the turn goes to the next in line.
func (w *waitRooms) leave(room *waitRoom, turn bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	room.users--
	if turn && len(room.line) > 0 {
		close(room.line[0].turn)
		room.line = room.line[1:]
		return
	}
	if turn {
		room.turnHeld = false
		room.seenHeld.Store(false)
	}
	switch {
	case room.users > 0:
	case room.sub == nil:
		delete(w.rooms, room.key)
	default: // idle: closed after roomLinger unless someone enters
		w.alarms.set(&room.linger, time.Now().Add(roomLinger))
	}
}

// closeIdle closes room unless someone entered it since it went idle.
func (w *waitRooms) closeIdle(room *waitRoom) {
	w.mu.Lock()
	var sub *subscription
	if room.users <= 0 && w.rooms[room.key] == room {
		delete(w.rooms, room.key)
		sub, room.sub = room.sub, nil
	}
	w.mu.Unlock()
	if sub != nil {
		w.notifier.unsubscribe(sub)
	}
}

// hearing tells whether the room's subscription is confirmed.
func (w *waitRooms) hearing(room *waitRoom) bool {
	w.mu.Lock()
	sub := room.sub
	w.mu.Unlock()
	return sub != nil && received(sub.ready)
}

// received tells, without waiting, whether ch is closed or has a value
// (which it takes).
func received(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// listen subscribes the room, and waits (at most within) for the server's
// confirmation: before it a release can go unheard, so the caller retries.
func (w *waitRooms) listen(ctx context.Context, room *waitRoom, within time.Duration, closing <-chan struct{}) {
	if w.notifier == nil {
		return
	}
	w.mu.Lock()
	if room.sub == nil {
		// The lock's channel, and ours for hand-overs: its confirmation makes the sub ready.
		room.sub = w.notifier.subscribe(room, lockrules.Released(room.key), handoverChannel(room.key, w.tag))
	}
	sub := room.sub
	w.mu.Unlock()
	t := time.NewTimer(within)
	defer t.Stop()
	select {
	case <-sub.ready:
	case <-ctx.Done():
	case <-t.C:
	case <-closing:
	}
}

// close closes every room (Client.Close), waiting within ctx for the subscriptions.
func (w *waitRooms) close(ctx context.Context) {
	w.mu.Lock()
	var subs []*subscription
	for key, room := range w.rooms {
		w.alarms.cancel(&room.linger)
		if room.sub != nil {
			subs = append(subs, room.sub)
			room.sub = nil
		}
		delete(w.rooms, key)
	}
	w.mu.Unlock()
	for _, sub := range subs {
		w.notifier.unsubscribe(sub)
	}
	if w.notifier != nil {
		w.notifier.wait(ctx)
	}
}
