package redislock

import (
	"context"
	"fmt"
	"time"
)

// Close shuts the Client down. From the call on, the acquiring calls return
// an error matching ErrClosed, also to waiting callers. It waits for attempts
// under way, releases every lock the Client holds in one pipeline (one per
// node on a Cluster, at once) bounded by ctx (each lock's context cancelled
// first, cause ErrClosed) so that another instance can take each at once,
// and gives background give-backs one last try. It returns once nothing of the Client runs, or when ctx ends (with
// ctx's error); nil when every lock was released, else an error saying how
// many were not (they expire after their TTL). A second Close returns nil.
// It does not close the go-redis client.
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
		// An attempt that succeeds from now on gives its lock back (handOut).
		err = fmt.Errorf("redislock: close: waiting for Acquire calls under way: %w", ctx.Err())
	}
	c.init.Do(c.setup)
	refs, terms := c.endHeld()
	watchDone := c.scheduler.close()
	c.deadlines.close()
	c.store.stop()
	// The network part runs on a goroutine of its own: go-redis may not
	// honour ctx's deadline while it reads, and Close returns by that
	// deadline; what is left stops at the go-redis client's timeouts.
	released, swept := make(chan error, 1), make(chan struct{})
	go func() {
		err := c.releaseAll(ctx, refs)
		// Elect's term ends as Close releases it, not when its lead
		// returns (which may be before): announced for ObserveLeader now.
		for _, key := range terms {
			c.announceTerm(ctx, key, ReleaseTimeout)
		}
		released <- err
		// Attempts under way land first: the janitor's last try finds what they took.
		if idle := c.store.idle(); idle != nil {
			select {
			case <-idle:
			case <-ctx.Done():
			}
		}
		c.cleaner.flush(ctx)
		c.waiting.close(ctx)
		close(swept)
	}()
	select {
	case e := <-released:
		err = join(err, e)
	case <-ctx.Done():
		return join(err, fmt.Errorf("redislock: close: %s not confirmed released (they expire after their TTL): %w",
			count(len(refs), "lock"), ctx.Err()))
	}
	select {
	case <-swept:
	case <-ctx.Done():
		return join(err, fmt.Errorf("redislock: close: waiting for commands under way: %w", ctx.Err()))
	}
	return join(err, c.wait(ctx, watchDone))
}

// wait waits, within ctx, for the timers' goroutines and the restart watch.
func (c *Client) wait(ctx context.Context, watchDone <-chan struct{}) error {
	for _, step := range []struct {
		what string
		done <-chan struct{}
	}{{"the watchdog", c.bg.close()}, {"the restart watch", watchDone}} {
		if step.done == nil {
			continue
		}
		select {
		case <-step.done:
		case <-ctx.Done():
			return fmt.Errorf("redislock: close: waiting for %s: %w", step.what, ctx.Err())
		}
	}
	return nil
}

// endHeld ends every hold with ErrClosed now, and returns what is left to
// release: the locks no Release is sending, and the keys of Elect's terms
// among them.
func (c *Client) endHeld() (refs []*lockRef, terms []string) {
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
				c.waiting.leave(room, true)
			}
			refs = append(refs, &l.ref)
			if l.opts.campaign {
				terms = append(terms, l.ref.key)
			}
		}
	}
	return refs, terms
}

func (c *Client) releaseAll(ctx context.Context, refs []*lockRef) error {
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
