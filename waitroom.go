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

type waitRooms struct {
	notifier *notifier
	// tag names this Client's waiters to the release script: a waiter's
	// token begins with it (see waiterToken), and a release that hands the
	// lock to the waiter announces it on handoverChannel(key, tag), which
	// only this Client hears. "" without a notifier.
	tag string
	// sharedTag is tag for this Client's shared waiters (see
	// sharedToken): a room of theirs subscribes to a hand-over channel of
	// its own, next to the exclusive waiters' room of the same lock.
	sharedTag string

	mu    sync.Mutex
	rooms map[string]*waitRoom
}

type waitRoom struct {
	key      string
	turnHeld bool
	queue    []*queuedWaiter
	released chan struct{} // buffered: a release was announced
	sub      *subscription // nil until the turn holder first waited
	linger   *time.Timer   // closes the room once idle (see leave)
	// ticket is what a release announces when it hands the lock to the
	// turn holder, queued on the server (see handoffTicket). A hand-over
	// to anyone else does not wake the room.
	ticket atomic.Pointer[string]
	// handed is the last hand-over to ticket announced with the lease it
	// gave, which the turn holder may take without a claim (see
	// acquisition.handedOver).
	handed atomic.Pointer[handover]
	// everyHandover: every hand-over announced on the room's channels
	// wakes it (a room of shared waiters, see shared.go, each of whom
	// may be the one the lock was handed to or let in). Set before the
	// room subscribes; never written again.
	everyHandover bool
	// seenHeld: the turn holder found the lock held, or holds it; the
	// callers in line who give up then report ErrNotAcquired. Cleared
	// when the room goes idle.
	seenHeld atomic.Bool
}

// queuedWaiter is a goroutine in line for a room's turn.
type queuedWaiter struct {
	turn chan struct{} // closed to hand over the turn
	// ref is the waiter's lock, whose first attempt a releaser of this
	// Client may send right behind its release (see Lock.release); nil
	// when it may not. early is that attempt, set before turn is closed.
	ref   *lockRef
	early *earlyAttempt
}

// earlyAttempt is an acquire attempt sent for a waiter by the releaser
// that handed it the turn, in the same round trip as the release.
type earlyAttempt struct {
	sent  time.Time // before the command left: the lease began later
	reply *redis.Cmd
}

// handover is an announced hand-over: to the waiter of ticket, with the
// lease the release gave it.
type handover struct {
	ticket string
	lease  time.Duration
}

// expect makes the room wake for a hand-over to ticket.
func (r *waitRoom) expect(ticket string) { r.ticket.Store(&ticket) }

// wants tells whether an announcement wakes the room: a plain release
// does; a hand-over only when it is to the room's turn holder. A
// hand-over's announcement is "g:" and the ticket, then "/" and the lease
// in milliseconds the release gave (see lua/release.lua); one without the
// lease (a release of an earlier version) is claimed as before.
func (r *waitRoom) wants(payload string) bool {
	rest, isHandover := strings.CutPrefix(payload, "g:")
	if !isHandover || r.everyHandover {
		return true
	}
	ticket, lease, withLease := strings.Cut(rest, "/")
	expected := r.ticket.Load()
	if expected == nil || *expected != ticket {
		return false
	}
	if ms, err := strconv.ParseInt(lease, 10, 64); withLease && err == nil && ms > 0 && ms <= maxLeaseMs {
		r.handed.Store(&handover{ticket: ticket, lease: time.Duration(ms) * time.Millisecond})
	}
	return true
}

// maxLeaseMs bounds an announced lease (ms) to what a time.Duration holds.
const maxLeaseMs = math.MaxInt64 / int64(time.Millisecond)

// takeHandover returns the lease of the hand-over to ticket announced
// since the last call, if any.
func (r *waitRoom) takeHandover(ticket string) (time.Duration, bool) {
	h := r.handed.Swap(nil)
	if h == nil || h.ticket != ticket {
		return 0, false
	}
	return h.lease, true
}

// newWaitRooms returns the rooms of a Client; rdb nil means no release
// announcements to listen to (the turn holder polls).
func newWaitRooms(rdb redis.UniversalClient) *waitRooms {
	w := &waitRooms{rooms: map[string]*waitRoom{}}
	if rdb != nil {
		w.notifier = newNotifier(rdb)
		w.tag = rand.Text()[:handoverTagLen]
		w.sharedTag = rand.Text()[:handoverTagLen]
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

// enter returns the room of key with its turn held by the caller, waiting
// in line if another goroutine of this Client holds it, and the attempt
// the goroutine that handed it the turn made for it, if any (for ref, when
// not nil). The wait in line counts against p, the caller's strategy. It
// fails with ctx's error, errPatience, or errClosing once closing is
// closed; if the turn came as it gave up, it returns the room (and any
// early attempt) with the error: the caller cleans up and leaves the room.
func (w *waitRooms) enter(ctx context.Context, key string, ref *lockRef, p *patience, closing <-chan struct{}) (*waitRoom, *earlyAttempt, error) {
	w.mu.Lock()
	room := w.rooms[key]
	if room == nil {
		room = &waitRoom{key: key, released: make(chan struct{}, 1)}
		w.rooms[key] = room
	}
	if !room.turnHeld {
		room.turnHeld = true
		w.mu.Unlock()
		return room, nil, nil
	}
	me := &queuedWaiter{turn: make(chan struct{}), ref: ref}
	room.queue = append(room.queue, me)
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
		// be sending an attempt for us: wait for it (one round trip,
		// bounded by the releaser's context and the client's timeouts),
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

// dropOut takes me out of room's line, and tells whether the turn holder
// had seen the lock held; out is false when me was no longer in line (the
// turn is being handed to it).
func (w *waitRooms) dropOut(room *waitRoom, me *queuedWaiter) (seenHeld, out bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, queued := range room.queue {
		if queued == me {
			room.queue = append(room.queue[:i], room.queue[i+1:]...)
			return room.seenHeld.Load(), true
		}
	}
	return false, false
}

// takeNext hands the turn of room, held by the caller, straight to the
// next goroutine in line that accepts an early attempt, and returns it; the
// caller sets its early attempt and then closes its turn. nil: nobody in
// line (or the next does not accept one), and the caller leaves the room
// as usual.
func (w *waitRooms) takeNext(room *waitRoom) *queuedWaiter {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(room.queue) == 0 || room.queue[0].ref == nil {
		return nil
	}
	next := room.queue[0]
	room.queue = room.queue[1:]
	return next
}

// roomLinger is how long a room that nobody uses keeps its subscription,
// so that a lock taken again and again from this Client does not
// subscribe and unsubscribe each time.
const roomLinger = 100 * time.Millisecond

// leave hands the turn to the next in line, or leaves the room idle; an
// idle room closes after roomLinger unless someone enters it again.
func (w *waitRooms) leave(room *waitRoom) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(room.queue) > 0 {
		next := room.queue[0]
		room.queue = room.queue[1:]
		close(next.turn)
		return
	}
	room.turnHeld = false
	room.seenHeld.Store(false)
	if room.sub == nil {
		delete(w.rooms, room.key)
		return
	}
	if room.linger == nil {
		room.linger = time.AfterFunc(roomLinger, func() { w.closeIdle(room) })
	} else {
		room.linger.Reset(roomLinger)
	}
}

// closeIdle closes room unless someone entered it since it went idle.
func (w *waitRooms) closeIdle(room *waitRoom) {
	w.mu.Lock()
	if room.turnHeld || w.rooms[room.key] != room {
		w.mu.Unlock()
		return
	}
	delete(w.rooms, room.key)
	sub := room.sub
	room.sub = nil
	w.mu.Unlock()
	if sub != nil {
		// Not under w.mu: unsubscribing is network I/O, and every
		// waiter of this Client would wait for it.
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
	// Only the turn holder touches its room's subscription, so it can
	// subscribe without holding w.mu across the network call.
	w.mu.Lock()
	sub := room.sub
	w.mu.Unlock()
	if sub == nil {
		// The shared channel for plain releases (a release with nobody
		// live in line, or waiters that cannot queue), and ours for a
		// hand-over: one SUBSCRIBE, and the second's confirmation, which
		// comes last, makes the subscription ready.
		sub = w.notifier.subscribe(room, lockrules.Released(room.key), handoverChannel(room.key, w.tag))
		w.mu.Lock()
		room.sub = sub
		w.mu.Unlock()
	}
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
		if room.linger != nil {
			room.linger.Stop()
		}
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
