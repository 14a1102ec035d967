package redislock

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redislock/redislock/internal/lockrules"
)

// MaxSemaphoreLimit is the largest limit AcquireSemaphore accepts. A
// semaphore's scripts count its holders on every call, so a limit far
// beyond the holders one deployment can serve is a mistake, not a setting.
const MaxSemaphoreLimit = 100_000

// AcquireSemaphore takes one of the limit slots of the semaphore called
// name, or fails: at most limit holders, across every process that uses
// the name with the same limit, hold it at once.
//
// Each holder gets a Lock of its own, with everything a Lock from Acquire
// has: a random token, its own lease kept alive by the watchdog, a
// context cancelled with a *LostError cause when its slot is lost, the
// safe deadline and Valid, and a fence with WithFencing (one counter per
// name, taken by every holder: fences never go backwards). A holder that
// crashes gives its slot back when its lease ends; no counter is left
// behind.
//
// Waiting follows the retry strategy as Acquire does (default: no wait),
// bounded by ctx (and MaxWaitWithoutDeadline when ctx has no deadline).
// Waiters queue on the server and are served in arrival order: a waiter
// that comes back finds the free slots owed to the waiters ahead of it. A
// release wakes the waiters of this Client at once; a slot that comes
// back when a crashed holder's lease ends is found at that time.
//
// A name is either a lock or a semaphore: Acquire of a semaphore's name,
// or AcquireSemaphore of a lock's, fails with Redis' WRONGTYPE error.
// Inspect describes a semaphore (Info.Limit, Info.Holders); Break ends it.
//
// Errors: as Acquire's, and ErrLimitMismatch when the current holders use
// another limit (the caller is not queued); ErrInvalidArgument for a
// limit below 1 or above MaxSemaphoreLimit, WithFailOpen, or a Client
// from NewQuorum, which does not support semaphores. A failed call leaves
// no slot held and no place in the queue. On success the caller must call
// Lock.Release.
func (c *Client) AcquireSemaphore(ctx context.Context, name string, limit int, opts ...Option) (*Lock, error) {
	if err := c.usable(); err != nil {
		return nil, err
	}
	if limit < 1 || limit > MaxSemaphoreLimit {
		return nil, invalidf("semaphore limit %d is outside 1..%d", limit, MaxSemaphoreLimit)
	}
	if _, single := c.store.(singleStore); !single {
		return nil, invalidf("semaphores need a Client on one Redis deployment (New); a quorum Client does not support them")
	}
	var perCall options
	applyOptions(&perCall, opts)
	if perCall.failOpen {
		return nil, invalidf("WithFailOpen applies to RunWithLock only: AcquireSemaphore cannot hand out a slot it does not hold")
	}
	o, err := c.resolve(opts)
	if err != nil {
		return nil, err
	}
	names, keyLen, err := c.begin(ctx, "acquire semaphore", o.prefix, name)
	if err != nil {
		return nil, err
	}
	defer c.calls.exit()
	sem := *o
	sem.semLimit = limit
	a := semAcquisition{roomCall{call: call{c: c, ctx: ctx, parent: ctx, o: &sem, name: name, what: "acquire semaphore", start: time.Now()}, rooms: &c.semaphores}}
	a.init(names[:keyLen])
	defer a.close()
	return a.run()
}

// semAcquisition is one AcquireSemaphore call.
type semAcquisition struct {
	roomCall // its room: this Client's waiters on the name
}

func (a *semAcquisition) init(key string) {
	a.l = &Lock{client: a.c, opts: a.o, name: a.name}
	r := &a.l.ref
	r.key, r.keyArg, r.ttlArg, r.fenced, r.kind = key, key, a.o.ttl.Milliseconds(), a.o.fencing, semaphoreSlot
	r.queueKey, r.expiryKey = lockrules.Queue(key), lockrules.Expiry(key)
	if a.o.fencing {
		r.fenceKey = lockrules.Fence(key)
	}
	// One token for every attempt: it is our place in the queue.
	r.token = valueOf(rand.Text(), a.o.metadata)
	r.releaseArgs = [9]any{"evalsha", semReleaseSHA, 3, r.keyArg, &r.queueKey, &r.expiryKey, &r.token, a.c.publish, "0"}
	a.patience.strategy = a.o.retry
	a.waits = a.patience.mayWait()
	r.waiting = a.waits
	a.capWait(false)
}

// attempt sends one attempt and records its verdict.
func (a *semAcquisition) attempt() (bool, error) {
	if err := a.begin(a); err != nil {
		return false, err
	}
	ref := &a.l.ref
	keys := []string{ref.key, semaphoreLimitKey(ref.key), ref.queueKey, ref.expiryKey}
	fenced, wait := "0", "0"
	if ref.fenced {
		keys, fenced = append(keys, ref.fenceKey), "1"
	}
	if a.waits {
		wait = strconv.FormatInt(queueHold.Milliseconds(), 10)
	}
	store := a.c.store.(singleStore)
	acquired, err := a.record(runScript(a.ctx, store.rdb, a.o, semAcquireScript, keys, ref.token, a.o.ttl.Milliseconds(), a.o.semLimit, fenced, wait))
	if err != nil {
		return false, a.failed(err)
	}
	return acquired, nil
}

// failed turns an attempt's error into AcquireSemaphore's: a limit that
// disagrees with the holders' is said so; otherwise as call.failed.
func (a *semAcquisition) failed(err error) error {
	var reply redis.Error
	if errors.As(err, &reply) && redis.HasErrorPrefix(err, "SEMLIMIT") {
		holders := strings.TrimSpace(strings.TrimPrefix(err.Error(), "SEMLIMIT"))
		return fmt.Errorf("%w: semaphore %q: asked with limit %d, its holders use %s",
			ErrLimitMismatch, a.name, a.o.semLimit, holders)
	}
	return a.failedIn(a, err)
}

func (a *semAcquisition) nextWake() time.Time { return a.wakeTime(true) }

func (a *semAcquisition) run() (*Lock, error) { return a.runIn(a) }

// listen: a semaphore's waiters hear every release of a slot.
func (a *semAcquisition) listen() (key, channel string) {
	return a.l.ref.key, lockrules.Released(a.l.ref.key)
}

func (a *semAcquisition) heldError() error {
	return fmt.Errorf("%w: semaphore %q has all %d slots held, %s",
		ErrNotAcquired, a.name, a.o.semLimit, a.tally())
}

// stopped is the error of a wait that ended without a verdict: ctx ended,
// the cap passed, or the Client closed.
func (a *semAcquisition) stopped(why error) error {
	switch {
	case errors.Is(why, errClosing):
		return fmt.Errorf("%w: acquire semaphore %q: gave up waiting", ErrClosed, a.name)
	case a.attempts == 0:
		return fmt.Errorf("redislock: acquire semaphore %q: the context ended before any attempt had an answer: %w", a.name, why)
	case context.Cause(a.ctx) == errWaitCap:
		return fmt.Errorf("%w: semaphore %q still full after waiting %v, the cap for a context without deadline", ErrNotAcquired, a.name, MaxWaitWithoutDeadline)
	}
	return join(fmt.Errorf("%w: semaphore %q: gave up waiting after %d attempts", ErrNotAcquired, a.name, a.attempts), why)
}

// semaphoreLimitKey is the key of the limit a semaphore's holders use.
func semaphoreLimitKey(key string) string { return key + lockrules.LimitSuffix }

// semRooms are this Client's semaphore waiters (or its shared waiters, see
// shared.go), one room per name, so that they share one subscription to
// its release announcements. The zero value is ready to use.
type semRooms struct {
	mu    sync.Mutex
	rooms map[string]*semRoom
}

// semRoom wakes every waiter of this Client on one semaphore when a
// release is announced (a release frees one slot, and several of them may
// wait for it in different places of the queue). Its goroutine runs while
// it has waiters.
type semRoom struct {
	key   string
	users int // guarded by semRooms.mu
	inner *waitRoom
	sub   *subscription // nil: no announcements (no notifier)
	stop  chan struct{}
	done  chan struct{}

	mu  sync.Mutex
	gen chan struct{} // closed, and replaced, at each announcement
}

// enter returns the room of key, making it (and its subscription to
// channel) when this is its first waiter.
func (s *semRooms) enter(c *Client, key, channel string) *semRoom {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.rooms[key]; r != nil {
		r.users++
		return r
	}
	if s.rooms == nil {
		s.rooms = map[string]*semRoom{}
	}
	r := &semRoom{key: key, users: 1, gen: make(chan struct{})}
	s.rooms[key] = r
	if n := c.rooms().notifier; n != nil {
		r.inner = &waitRoom{key: key, released: make(chan struct{}, 1), everyHandover: true}
		r.stop, r.done = make(chan struct{}), make(chan struct{})
		r.sub = n.subscribe(r.inner, channel)
		go r.relay(n)
	}
	return r
}

// leave drops a waiter; the last one closes the room, its subscription
// and its goroutine, and waits for them.
func (s *semRooms) leave(r *semRoom) {
	s.mu.Lock()
	r.users--
	last := r.users == 0
	if last {
		delete(s.rooms, r.key)
	}
	s.mu.Unlock()
	if last && r.sub != nil {
		close(r.stop)
		<-r.done
	}
}

// relay turns each announcement into a wake-up of every waiter.
func (r *semRoom) relay(n *notifier) {
	defer close(r.done)
	defer n.unsubscribe(r.sub)
	for {
		select {
		case <-r.inner.released:
			r.mu.Lock()
			close(r.gen)
			r.gen = make(chan struct{})
			r.mu.Unlock()
		case <-r.stop:
			return
		}
	}
}

// wakeup returns a channel closed at the next announcement.
func (r *semRoom) wakeup() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.gen
}

// ready waits until the subscription is confirmed, until wake, or ctx
// ends, whichever comes first.
func (r *semRoom) ready(ctx context.Context, wake time.Time) {
	if r.sub == nil {
		return
	}
	t := time.NewTimer(time.Until(wake))
	defer t.Stop()
	select {
	case <-r.sub.ready:
	case <-t.C:
	case <-ctx.Done():
	}
}
