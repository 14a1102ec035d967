package redislock

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Elect campaigns for the leadership of name until ctx ends, and calls lead
// each time this process becomes leader. It blocks: run it on a goroutine
// of its own. Any number of goroutines may call it.
//
// Leadership is the lock called name, held with the watchdog while lead
// runs. Elect waits in the lock's queue without a cap: a release hands
// leadership over at once, a dead leader is replaced within its TTL. lead's
// context, from ctx, is cancelled when leadership is lost (cause: the
// *LostError) or ctx ends; FenceFromContext gives the term's fence. When
// lead returns, Elect campaigns again if leadership was lost first; else it
// hands leadership on and returns ctx's error if ctx ended, else lead's
// result (matching ErrLockLost too if the release found the lock gone).
//
// WithMaxHold limits each term (then it campaigns again, at the back). A
// panic in lead gives leadership up and goes on. The Client's default retry
// strategy is ignored. It rides through Redis errors as every waiting call
// does (see Acquire), logged at Warn.
//
// Errors: ctx.Err() when ctx ended (joined with lead's, or with the last
// Redis error if Redis was failing); lead's when it returned on its own (nil
// only then); ErrClosed after Client.Close; ErrInvalidArgument, nothing
// sent, for a nil ctx or lead, a bad name or options, WithRetry, WithFailOpen
// or the watchdog off; a Redis error that is an answer (WRONGTYPE, NOPERM),
// wrapped. Each term is logged at Info; to know who leads, Inspect the lock.
func (c *Client) Elect(ctx context.Context, name string, lead func(ctx context.Context) error, opts ...Option) error {
	if err := c.usable(); err != nil {
		return err
	}
	if ctx == nil {
		return invalidf("nil context")
	}
	if lead == nil {
		return invalidf("nil lead function for election %q", name)
	}
	o, err := c.campaignOptions(opts)
	if err != nil {
		return err
	}
	if _, _, err := lockKeys(o.prefix, name); err != nil {
		return err
	}
	for {
		l, err := c.acquire(ctx, name, o)
		if err != nil {
			// A campaign's wait ends only with ctx, Close or a verdict.
			var failing *failingError
			switch {
			case ctx.Err() == nil:
				return err
			case errors.As(err, &failing):
				return join(electStopped(ctx, name, nil), failing.last)
			}
			return electStopped(ctx, name, nil)
		}
		o.log().Info("redislock: elected", "name", name, "fence", l.h.fence)
		leadErr := l.run(ctx, lead)
		var lost *LostError
		switch cause := context.Cause(l.Context()); {
		case ctx.Err() != nil:
			return electStopped(ctx, name, leadErr)
		case errors.Is(cause, ErrClosed):
			return join(fmt.Errorf("%w: elect %q: the Client closed while leading", ErrClosed, name), ownError(leadErr))
		case !errors.As(cause, &lost):
			return leadErr // lead returned on its own, and leadership is given up
		}
		// Lost before lead returned (logged and observed): campaign on.
	}
}

func (c *Client) campaignOptions(opts []Option) (*options, error) {
	if len(opts) > 0 {
		var perCall options
		applyOptions(&perCall, opts)
		switch {
		case perCall.failOpen:
			return nil, invalidf("WithFailOpen does not apply to Elect: there is no leader without the lock")
		case perCall.retry != nil:
			return nil, invalidf("WithRetry does not apply to Elect: it waits for leadership until ctx ends")
		}
	}
	resolved, err := c.resolve(opts)
	if err != nil {
		return nil, err
	}
	if !resolved.watchdog {
		return nil, invalidf("Elect needs the watchdog: a leader's lease would run out under it")
	}
	o := new(options)
	*o = *resolved
	o.retry, o.campaign = campaignRetry{every: o.ttl}, true
	return o, nil
}

// campaignRetry's waits never run out: a queued campaigner asks when woken
// (see acquisition.sleep); one that cannot queue (a quorum) at the end of
// each wait, a TTL, or when a majority of the leader's keys would expire.
type campaignRetry struct{ every time.Duration }

func (s campaignRetry) NextBackoff(int) (time.Duration, bool) { return s.every, true }

// electStopped is Elect's error when ctx ended: ctx's error (and its cause),
// joined with lead's own.
func electStopped(ctx context.Context, name string, leadErr error) error {
	err := fmt.Errorf("redislock: elect %q: %w", name, ctx.Err())
	if cause := context.Cause(ctx); cause != ctx.Err() {
		err = join(err, cause)
	}
	return join(err, ownError(leadErr))
}

// ownError is lead's error unless it only reports its context's end.
func ownError(leadErr error) error {
	if errors.Is(leadErr, context.Canceled) || errors.Is(leadErr, context.DeadlineExceeded) {
		return nil
	}
	return leadErr
}
