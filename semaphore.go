package redislock

import (
	"context"
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
// release hands its slot to the first waiter in line, of whatever Client,
// which takes it at once; a slot that comes back when a crashed holder's
// lease ends is found when a waiter next looks (the holder's lease end,
// or its half-second refresh).
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
	return c.take(ctx, semaphoreSlot, name, opts, layoutSemaphore(limit))
}
