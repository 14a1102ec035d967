package redislock

import (
	"context"
	"fmt"
	"time"
)

// Close shuts the Client down gracefully, for a process that is told to
// stop (a pod that gets SIGTERM).
//
// From the call on, Acquire and RunWithLock return an error matching
// ErrClosed, also to the callers that were waiting for a lock. Close waits
// for attempts under way, then releases every lock the Client holds, in one
// pipeline bounded by ctx, so that another instance can take each at once
// instead of after its TTL; each lock's context is cancelled first, with a
// cause matching ErrClosed (RunWithLock's fn sees it through its ctx).
// Tokens the Client was still giving back in the background get one last
// try. Close returns once no goroutine, timer or pub/sub connection of the
// Client is left, or when ctx ends first (with ctx's error; what is left
// then stops by itself soon after).
//
// It returns nil when every lock was released, or an error saying how many
// could not be (they expire after their TTL). A second Close returns nil.
// Close does not close the go-redis client, which the caller owns.
func (c *Client) Close(ctx context.Context) error {
	if err := c.usable(); err != nil {
		return err
	}
	if ctx == nil {
		return invalidf("nil context")
	}
	if !c.closed.CompareAndSwap(false, true) {
		return nil
	}
	close(c.closing)
	var err error
	select {
	case <-c.calls.close():
	case <-ctx.Done():
		// An attempt that succeeds from now on gives its lock back (see
		// acquisition.succeed).
		err = fmt.Errorf("redislock: close: waiting for Acquire calls under way: %w", ctx.Err())
	}
	c.init.Do(c.setup)
	err = join(err, c.releaseHeld(ctx))
	c.cleaner.flush(ctx)
	watchDone := c.scheduler.close()
	c.deadlines.close()
	c.waiting.close()
	select {
	case <-c.bg.close():
	case <-ctx.Done():
		return join(err, fmt.Errorf("redislock: close: waiting for the watchdog: %w", ctx.Err()))
	}
	if s, ok := c.store.(singleStore); ok && s.batch != nil {
		select {
		case <-s.batch.idle():
		case <-ctx.Done():
			return join(err, fmt.Errorf("redislock: close: waiting for commands under way: %w", ctx.Err()))
		}
	}
	if watchDone != nil {
		select {
		case <-watchDone:
		case <-ctx.Done():
			return join(err, fmt.Errorf("redislock: close: waiting for the restart watch: %w", ctx.Err()))
		}
	}
	return err
}

// releaseHeld ends every hold of the Client with ErrClosed and releases
// the locks in one round.
func (c *Client) releaseHeld(ctx context.Context) error {
	var refs []*lockRef
	for _, l := range c.deadlines.held() {
		cause := fmt.Errorf("%w: lock %q released by Client.Close", ErrClosed, l.name)
		l.mu.Lock()
		mine := l.releasing == releaseNone
		if mine {
			l.releasing = releaseDone
		}
		l.mu.Unlock()
		if !mine {
			continue // a Release is on it
		}
		if room, ok := l.end(cause); ok {
			if room != nil {
				c.waiting.leave(room)
			}
			refs = append(refs, &l.ref)
		}
	}
	if len(refs) == 0 {
		return nil
	}
	start := time.Now()
	_, errs := c.store.abandon(ctx, refs)
	failed := 0
	var first error
	for _, err := range errs {
		if err != nil {
			failed++
			if first == nil {
				first = err
			}
		}
	}
	if failed > 0 {
		return fmt.Errorf("redislock: close: %d of %d locks not released (they expire after their TTL) after %v: %w",
			failed, len(refs), time.Since(start).Round(time.Millisecond), first)
	}
	return nil
}
