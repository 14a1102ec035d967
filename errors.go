package redislock

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Sentinel errors. Every error this package returns wraps one of them, a
// Redis error, or ctx.Err() (returned as it is when ctx ended before
// anything was decided): match with [errors.Is], never with ==.
var (
	// ErrNotAcquired means someone else holds the lock and the retry strategy
	// ran out, or ctx ended while waiting (the error then matches ctx.Err()).
	ErrNotAcquired = errors.New("redislock: not acquired")

	// ErrNotHeld is returned by Release, Extend and TTL on a lock that is no
	// longer ours: already released, expired, or taken by another holder;
	// and by Client.BreakHolder when no running hold has the ID given.
	ErrNotHeld = errors.New("redislock: lock not held")

	// ErrLockLost matches every *LostError: the lock was lost while held.
	ErrLockLost = errors.New("redislock: lock lost")

	// ErrReleased is the cause of Lock.Context() after Release.
	ErrReleased = errors.New("redislock: lock released")

	// ErrReplicaAck: fewer replicas than WithReplicaAck asked for acked a
	// write in time; the lock was given back (an extension: retried). A
	// waiting caller tries again (see WithReplicaAck).
	ErrReplicaAck = errors.New("redislock: not acknowledged by enough replicas")

	// ErrClosed is returned by the calls of a closed Client, also to waiting
	// ones, and is the cause of the contexts of the locks Close released.
	ErrClosed = errors.New("redislock: client closed")

	// ErrNotALock is matched by the errors of Inspect, Break and the
	// acquiring calls when a key they need holds a value of another type (a
	// lock of another kind included), wrapping Redis' WRONGTYPE error.
	ErrNotALock = errors.New("redislock: not a lock")

	// ErrInvalidArgument is wrapped by every error about bad input (an
	// empty name, a TTL out of range, a Client not made by New); nothing sent.
	ErrInvalidArgument = errors.New("redislock: invalid argument")

	// ErrLimitMismatch: AcquireSemaphore's holders use another limit (it may
	// change once all have left); neither ErrNotAcquired nor ErrInvalidArgument.
	ErrLimitMismatch = errors.New("redislock: semaphore limit differs from its holders'")
)

// LostReason says why a held lock was lost.
type LostReason int

const (
	// Expired: the key was gone when the watchdog (or Extend) came to
	// extend it, or, with the watchdog off, the lease ran out.
	Expired LostReason = iota + 1
	// Taken: the key holds another holder's token (or a value of another
	// type): someone else owns the lock now.
	Taken
	// Unreachable: no extension was confirmed before the safe deadline, so
	// the lease may have expired on the server while we could not tell:
	// Redis could not be reached, or this process did not run (then
	// LostError.Paused says for how long).
	Unreachable
	// MaxHoldReached: the hold reached the limit set with WithMaxHold.
	MaxHoldReached
)

// String returns the reason in words, as used in logs.
func (r LostReason) String() string {
	if r < Expired || r > MaxHoldReached {
		return fmt.Sprintf("LostReason(%d)", int(r))
	}
	return [...]string{"expired", "taken by another holder", "redis unreachable until the safe deadline", "maximum hold time reached"}[r-Expired]
}

// LostError reports that a held lock was lost, and why. It is the cause of
// the lock's context (see [context.Cause]) and matches [ErrLockLost] with
// [errors.Is]; use [errors.As] to read the reason.
type LostError struct {
	// Name is the lock name; for AcquireMulti's, the name found gone or
	// taken, or the first when all were lost at once.
	Name string
	// Reason says why the lock was lost.
	Reason LostReason
	// HeldFor is how long the lock was held, from its acquiring command's send.
	HeldFor time.Duration
	// Err is the last Redis error seen before an Unreachable loss, if any.
	Err error
	// Paused, for an Unreachable loss, is how long this process did not run
	// across the safe deadline (its timers fired that late, on the monotonic
	// clock: SIGSTOP, a long GC pause, a starved VM), when that is why the
	// lock could not be extended in time: at least 500 ms and a quarter of
	// the TTL, and no extension had failed on Redis before (only by its own
	// deadline, if any). 0 otherwise.
	Paused time.Duration
}

// Error describes the loss; one to a pause says "this process did not run".
func (e *LostError) Error() string {
	msg := fmt.Sprintf("redislock: lock %q lost after %v: %s", e.Name, e.HeldFor.Round(time.Millisecond), e.why())
	if e.Err != nil {
		msg += ": " + oneLine(e.Err.Error())
	}
	return msg
}

// why is the loss's reason in words, as logged.
func (e *LostError) why() string {
	if e.Paused > 0 {
		return fmt.Sprintf("this process did not run for %v, past its safe deadline", e.Paused.Round(10*time.Millisecond))
	}
	return e.Reason.String()
}

// Is reports whether target is ErrLockLost.
func (e *LostError) Is(target error) bool { return target == ErrLockLost }

// Unwrap returns the last Redis error seen, if any.
func (e *LostError) Unwrap() error { return e.Err }

// errNilLock is what the methods of a nil or zero Lock report.
var errNilLock = fmt.Errorf("%w: nil or zero Lock (a failed Acquire returns no lock)", ErrNotHeld)

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidArgument}, args...)...)
}

// join is errors.Join on one line: it matches every non-nil err, and its
// message is theirs joined by "; ", so a log record stays one line.
func join(errs ...error) error {
	// Callers pass their errors one by one, so errs is join's own to
	// compact; a caller's slice passed with ... would be compacted too.
	errs = slices.DeleteFunc(errs, func(err error) bool { return err == nil })
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	return &joinError{errs}
}

type joinError struct{ errs []error }

func (e *joinError) Error() string {
	msgs := make([]string, len(e.errs))
	for i, err := range e.errs {
		msgs[i] = oneLine(err.Error())
	}
	return strings.Join(msgs, "; ")
}

func (e *joinError) Unwrap() []error { return e.errs }

// oneLine replaces the line breaks of msg by "; " (a run of them by one,
// none at the ends); a msg without any comes back as it is (Join of one).
func oneLine(msg string) string {
	return strings.Join(strings.FieldsFunc(msg, func(r rune) bool { return r == '\n' || r == '\r' }), "; ")
}

func count(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return strconv.Itoa(n) + " " + thing + "s"
}
