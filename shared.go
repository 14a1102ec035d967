package redislock

import (
	"context"
)

// AcquireShared takes a shared hold of the lock called name (a reader's,
// in a readers-writer lock), or fails: any number of shared holders hold
// the name at once, and none while an exclusive holder (Acquire) does.
// An exclusive Acquire of the name waits until no shared holder is left,
// and writers are not starved: once an exclusive waiter is queued, later
// shared callers queue behind it.
//
// The Lock has everything a Lock from Acquire has: a random token and a
// lease of its own, kept alive by the watchdog; a context cancelled with a
// *LostError cause when the share is lost; the safe deadline and Valid;
// Extend, TTL and Release; WithMetadata. A shared holder that crashes
// gives its share back when its lease ends: the holders are a set of
// leases on the server, not a count that a crash could leave stuck. With
// WithFencing, every shared holder of one epoch (from the moment the name
// goes from free or exclusive to shared until the last share ends) gets
// the same fence, taken by the epoch's first fenced holder: above every
// fence before it, and below the next exclusive holder's. Fences never go
// backwards.
//
// Waiting follows the retry strategy as Acquire does (default: no wait),
// bounded by ctx (and MaxWaitWithoutDeadline when ctx has no deadline).
// A shared waiter queues on the server in the same line as exclusive
// waiters, in arrival order; a release that hands the lock to it lets in
// the shared waiters right behind it too, and wakes them.
//
// Errors: as Acquire's; ErrInvalidArgument for WithFailOpen and on a
// Client from NewQuorum, which does not support shared holds. A failed
// call leaves no share held and no place in the queue. On success the
// caller must call Lock.Release.
func (c *Client) AcquireShared(ctx context.Context, name string, opts ...Option) (*Lock, error) {
	return c.take(ctx, sharedHold, name, opts, layoutShared)
}
