package redislock

import (
	"context"
	"crypto/rand"
	"errors"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redislock/redislock/internal/lockrules"
)

// waitRooms are a Client's waiting rooms: the callers that wait for one
// key, of any kind, share its room and its subscription (see notifier). A
// plain release wakes everyone in it; a hand-over only the caller seated
// with its ticket. Exclusive and multi callers wait in line for the room's
// turn, and only its holder asks Redis; shared and semaphore waiters each
// queue on the server instead.
type waitRooms struct {
	notifier *notifier
	alarms   *alarms // the Client's: they close the rooms left idle
	// tag begins this Client's waiters' tokens (see waiterToken), so that a
	// release handing one the lock announces it on handoverChannel(key,
	// tag), which only this Client hears; "" without a notifier.
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
	// linger closes the room once idle (see leave), ringing lingerRing.
	linger     alarm
	lingerRing idleRoomRing
	// seenHeld: the turn holder found the lock held, or holds it: callers
	// in line who give up report ErrNotAcquired. Cleared when idle.
	seenHeld atomic.Bool

	mu sync.Mutex // guards gen and seats; the notifier delivers under it
	// gen is closed, and replaced, at every plain announcement: whoever
	// took it before looking at the lock is woken.
	gen   chan struct{}
	seats map[string]*seat // by ticket (see handoffTicket)
}

// seat is where a hand-over to a caller's ticket finds it.
type seat struct {
	woken chan struct{} // buffered: a hand-over to it was announced
	// handed: the lease the last announced hand-over gave (0: none), which
	// the caller may take without a claim (see acquisition.handedOver).
	handed time.Duration
}

// queuedWaiter is a goroutine in line for a room's turn.
type queuedWaiter struct {
	turn chan struct{} // closed to hand over the turn
	// ref: the waiter's lock, whose first attempt a releaser may send behind
	// its release (nil: not); early: that attempt, set before turn closes.
	ref   *lockRef
	early *earlyAttempt
}

// earlyAttempt is an acquire attempt sent for a waiter by the releaser
// that handed it the turn, in the same round trip as the release.
type earlyAttempt struct {
	sent  time.Time // before the command left: the lease began later
	reply *redis.Cmd
}

// expect seats ticket's caller: a hand-over to it wakes it from now on.
func (r *waitRoom) expect(ticket string) *seat {
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
	return s
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

// wants delivers an announcement and tells whether it woke anyone: a plain
// release wakes everyone, a hand-over ("g:" ticket "/" lease in ms, see
// lua/handover.lua) only the caller seated with its ticket. One without the
// lease (an older release, a shared waiter let in) is claimed.
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

// maxLeaseMs bounds an announced lease (ms) to what a time.Duration holds.
const maxLeaseMs = math.MaxInt64 / int64(time.Millisecond)

// takeHandover returns the lease of the hand-over to ticket announced
// since the last call, if any.
func (r *waitRoom) takeHandover(ticket string) (time.Duration, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.seats[ticket]
	if s == nil || s.handed == 0 {
		return 0, false
	}
	lease := s.handed
	s.handed = 0
	return lease, true
}

// newWaitRooms returns the rooms of a Client; rdb nil means no release
// announcements to listen to (waiters poll).
func newWaitRooms(rdb redis.UniversalClient, as *alarms) *waitRooms {
	w := &waitRooms{rooms: map[string]*waitRoom{}, alarms: as}
	if rdb != nil {
		w.notifier = newNotifier(rdb)
		w.tag = rand.Text()[:handoverTagLen]
	}
	return w
}

// errPatience: a caller waiting in line spent its strategy's waits;
// errSeenHeld joins the error of a caller that gave up in line after the
// turn holder saw the lock held.
var (
	errPatience = errors.New("retry strategy spent while waiting in line")
	errSeenHeld = errors.New("seen held by the caller ahead in line")
)

// enter returns key's room, with its turn held by the caller when turn is
// set, waiting in line (counted against p) while another goroutine of this
// Client holds it; then also the attempt a releaser made for it (for ref,
// when not nil). It fails with ctx's error, errPatience, or errClosing; if
// the turn came as it gave up, it returns the room (and any early attempt)
// with the error: the caller cleans up and leaves the room.
func (w *waitRooms) enter(ctx context.Context, key string, turn bool, ref *lockRef, p *patience, closing <-chan struct{}) (*waitRoom, *earlyAttempt, error) {
	w.mu.Lock()
	room := w.rooms[key]
	if room == nil {
		room = &waitRoom{key: key}
		room.lingerRing = idleRoomRing{w, room}
		room.linger = alarm{rings: &room.lingerRing, index: -1}
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

	if early, err := me.wait(ctx, p, closing); err == nil {
		return room, early, nil
	} else if seenHeld, out := w.dropOut(room, me); out {
		if seenHeld {
			err = join(errSeenHeld, err)
		}
		return nil, nil, err
	} else {
		// The turn is being handed to us as we give up. A releaser may
		// be sending an attempt for us: wait for it (one round trip),
		// so that the caller can undo it.
		<-me.turn
		return room, me.early, err
	}
}

// wait waits for the turn, within ctx and p.
func (me *queuedWaiter) wait(ctx context.Context, p *patience, closing <-chan struct{}) (*earlyAttempt, error) {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		now := time.Now()
		if !p.waiting(now) && !p.begin(now) {
			return nil, errPatience
		}
		if timer == nil {
			timer = time.NewTimer(p.end.Sub(now))
		} else {
			timer.Reset(p.end.Sub(now))
		}
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

// dropOut takes me out of room's line, telling whether the turn holder saw
// the lock held; out is false when the turn is being handed to me.
func (w *waitRooms) dropOut(room *waitRoom, me *queuedWaiter) (seenHeld, out bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, queued := range room.line {
		if queued == me {
			room.line = append(room.line[:i], room.line[i+1:]...)
			room.users--
			return room.seenHeld.Load(), true
		}
	}
	return false, false
}

// takeNext hands room's turn, held by the caller, to the next in line if
// it accepts an early attempt, and returns it (nil: the caller leaves as
// usual); the caller sets its early attempt, then closes its turn.
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

// roomLinger is how long a room that nobody uses keeps its subscription,
// so that a lock taken again and again from this Client does not
// subscribe and unsubscribe each time.
const roomLinger = 100 * time.Millisecond

// leave takes a caller out of the room; with turn, its turn goes to the
// next in line. A room left idle closes after roomLinger.
func (w *waitRooms) leave(room *waitRoom, turn bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	room.users--
	if turn && len(room.line) > 0 {
		next := room.line[0]
		room.line = room.line[1:]
		close(next.turn)
		return
	}
	if turn {
		room.turnHeld = false
		room.seenHeld.Store(false)
	}
	if room.users > 0 {
		return
	}
	if room.sub == nil {
		delete(w.rooms, room.key)
		return
	}
	w.alarms.set(&room.linger, time.Now().Add(roomLinger))
}

// closeIdle closes room unless someone entered it since it went idle.
func (w *waitRooms) closeIdle(room *waitRoom) {
	w.mu.Lock()
	if room.users > 0 || w.rooms[room.key] != room {
		w.mu.Unlock()
		return
	}
	delete(w.rooms, room.key)
	sub := room.sub
	room.sub = nil
	w.mu.Unlock()
	if sub != nil {
		w.notifier.unsubscribe(sub)
	}
}

// hearing tells whether the room's subscription is confirmed: a release
// announced from now on will be heard.
func (w *waitRooms) hearing(room *waitRoom) bool {
	w.mu.Lock()
	sub := room.sub
	w.mu.Unlock()
	if sub == nil {
		return false
	}
	select {
	case <-sub.ready:
		return true
	default:
		return false
	}
}

// listen makes sure the room hears release announcements, and waits (at
// most within) until the server confirmed the subscription: before that a
// release can go unheard, so the caller tries again at once afterwards.
func (w *waitRooms) listen(ctx context.Context, room *waitRoom, within time.Duration, closing <-chan struct{}) {
	if w.notifier == nil {
		return
	}
	w.mu.Lock()
	sub := room.sub
	if sub == nil {
		// The lock's channel for plain releases, and ours for a hand-over,
		// whose confirmation makes the subscription ready.
		sub = w.notifier.subscribe(room, lockrules.Released(room.key), handoverChannel(room.key, w.tag))
		room.sub = sub
	}
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

// close closes every room (Client.Close, once no caller waits): the
// linger timers stop and the subscriptions end, waited for within ctx.
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

func (s *seat) wokenChan() <-chan struct{} {
	if s == nil {
		return nil
	}
	return s.woken
}
