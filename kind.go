package redislock

import (
	"fmt"

	"github.com/redislock/redislock/internal/lockrules"
)

// lockKind is what a lock is on the server, as a value that the one
// acquisition loop (acquire.go), the one waiting room (waitroom.go) and
// the store (single.go) read: its scripts, how its waiters wait, its error
// words. What a kind needs beyond a name is in its lockRef (a semaphore's
// limit, a multi lock's names). An exclusive, shared or semaphore waiter
// queues on the server, where the release that lets it in hands it over; a
// multi waiter watches the name that keeps it out (lua/handover.lua).
type lockKind uint8

const (
	exclusiveLock lockKind = iota // Acquire's: the key holds the token
	sharedHold                    // AcquireShared's: a member of the shared holders' set
	semaphoreSlot                 // AcquireSemaphore's: a member of the holders' set
	multiLock                     // AcquireMulti's: every name's key holds the token
)

func (k lockKind) what() string {
	return [...]string{"acquire", "acquire shared", "acquire semaphore", "acquire multi"}[k]
}

func (k lockKind) handsOut() string {
	return [...]string{"a lock", "a share", "a slot", "locks"}[k]
}

// waiterMark is what a waiter's token carries after its Client's tag (see
// waiterToken), not base32, by which the scripts tell its kind: a release
// hands a name only to a waiter that can take what it lets go
// (lua/handover.lua). A shared caller's token has it also when it does not
// wait: the shared scripts tell shared holders by it.
func (k lockKind) waiterMark() string { return [...]string{"", "s", "n", ""}[k] }

// keepsTurn: an exclusive holder keeps its Client's turn for the key until
// it lets go; other kinds pass it on (others may hold with them, or their
// release sends no attempt).
func (k lockKind) keepsTurn() bool { return k == exclusiveLock }

func layoutSemaphore(limit int) func(o *options, r *lockRef) {
	return func(o *options, r *lockRef) {
		r.extraKey = r.key + lockrules.LimitSuffix
		r.arg = int64(limit)
	}
}

// The error words of each kind.

// subject names the lock in errors.
func (a *acquisition) subject() string {
	switch a.kind {
	case semaphoreSlot:
		return fmt.Sprintf("semaphore %q", a.name)
	case multiLock:
		if n := len(a.l.ref.multi.names); n > 1 {
			return fmt.Sprintf("multi lock %q and %d more names", a.name, n-1)
		}
		return fmt.Sprintf("multi lock %q", a.name)
	}
	return fmt.Sprintf("%q", a.name)
}

func (a *acquisition) heldWords() string {
	switch a.kind {
	case sharedHold:
		return a.subject() + " is held exclusively or an exclusive waiter is ahead" + a.holderLeft()
	case semaphoreSlot:
		return fmt.Sprintf("%s has all %d slots held", a.subject(), a.l.ref.arg)
	case multiLock:
		return fmt.Sprintf("%s: %q is held by another holder%s", a.subject(), a.blocker, a.holderLeft())
	}
	return a.subject() + " is held by another holder" + a.holderLeft()
}
