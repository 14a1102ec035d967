package redislock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// Elect campaigns for the leadership of name until ctx ends, and calls lead
// each time this process becomes leader.
//
// Leadership is the lock called name: the leader holds it, with the
// watchdog extending it, for as long as lead runs. While another process
// leads, Elect waits in the server's queue of the lock, as a waiting
// Acquire does but with no cap on the wait (leadership may take hours to
// come): it tries again when the leader's release is announced (which
// hands the lock to the first in line), when the leader's lease would end
// (a leader that died without a release is replaced within its TTL), and
// every half second to keep its place in the queue (one small script call;
// it also catches an announcement that was lost). On a NewQuorum Client,
// which has neither queue nor announcements, it tries again when a
// majority of the leader's keys would have expired, and at least once per
// TTL: there a leader that gives up is replaced within a lease, not at
// once. Elect blocks: run it on a goroutine of its own. Any number of
// goroutines may call it.
//
// lead's context is derived from ctx and is cancelled when leadership is
// lost, with the *LostError as its cause, or when ctx ends;
// FenceFromContext on it returns the term's fence with WithFencing (each
// term's fence is above every earlier one, so the resource can refuse a
// deposed leader's writes). What happens when lead returns:
//   - if leadership was lost before (lead's context says so), Elect
//     campaigns again, whatever lead returned;
//   - if ctx ended, Elect gives leadership up and returns ctx's error
//     (below);
//   - otherwise lead returned on its own: Elect gives leadership up (a
//     release, which hands it to the next in line at once) and returns
//     lead's result. If the release found the lock no longer ours, the
//     result also matches ErrLockLost.
//
// WithMaxHold limits each term: at the limit lead's context is cancelled
// (MaxHoldReached), leadership goes to the next in line, and this process
// campaigns again, at the back of the line. A panic in lead gives
// leadership up and continues. Client.Close ends the term like any hold
// (lead's context is cancelled with a cause matching ErrClosed) and hands
// leadership over at once. A retry strategy set as the Client's default
// is ignored.
//
// While Redis cannot be reached, Elect keeps campaigning, with jittered
// backoff up to one second, and logs each failure at Warn: a leader
// election outlives a Redis restart. It does not retry errors that come
// from Redis's answer (WRONGTYPE, NOPERM…).
//
// Errors:
//   - an error matching ctx.Err() when ctx ended, whether campaigning or
//     leading (joined with lead's error when lead returned one of its own);
//   - lead's error when lead returned on its own;
//   - ErrClosed after Client.Close;
//   - ErrInvalidArgument for bad input, nothing sent: a nil ctx or lead, a
//     bad name, invalid options, and options that make no sense for a
//     campaign: WithRetry (Elect waits until ctx ends), WithFailOpen (no
//     leader without the lock), the watchdog off (a leader's lease would
//     run out under it);
//   - a Redis error that is an answer (WRONGTYPE on the lock key, NOPERM),
//     wrapped.
//
// Each term is logged at Info when it begins (a loss at Error, as for any
// lock). Elect never returns nil unless lead returned nil on its own. To know who
// leads now, ask for the lock called name from any process.
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
	failures := 0
	for {
		l, err := c.acquire(ctx, name, o)
		if err != nil {
			if ctx.Err() != nil {
				return electStopped(ctx, name, nil)
			}
			if !isUnreachable(err) {
				return err
			}
			failures++
			o.log().Warn("redislock: election: redis unreachable, campaigning again",
				"name", name, "failures", failures, "error", err)
			if err := c.campaignPause(ctx, name, failures); err != nil {
				return err
			}
			continue
		}
		failures = 0
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
		// Lost before lead returned: the loss is logged and observed (see
		// Lock.end), and the campaign goes on.
	}
}

// campaignOptions resolves Elect's options and makes them wait like a
// campaign: until ctx ends.
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

// campaignRetry is the strategy of a campaign: its waits never run out.
// A queued campaigner (one server, Sentinel, Cluster) does not ask at the
// end of a wait: a release announced, the leader's lease ending and the
// queue's refresh decide when it asks. A campaigner that cannot queue (a
// quorum: no queue, no announcements) asks when a majority of the leader's
// keys would have expired, and at the end of each wait, one TTL, when it
// could not tell (a node down).
type campaignRetry struct{ every time.Duration }

func (s campaignRetry) NextBackoff(int) (time.Duration, bool) { return s.every, true }

// campaignPause waits before campaigning again after Redis could not be
// reached: a jittered backoff from 50ms doubling up to 1s. It returns
// ctx's error or ErrClosed if either ends the wait.
func (c *Client) campaignPause(ctx context.Context, name string, failures int) error {
	ceiling := time.Second
	if failures < 6 {
		ceiling = 50 * time.Millisecond << (failures - 1)
	}
	t := time.NewTimer(ceiling/2 + rand.N(ceiling/2+1))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return electStopped(ctx, name, nil)
	case <-c.closing:
		return fmt.Errorf("%w: elect %q", ErrClosed, name)
	}
}

// electStopped is Elect's error when ctx ended: ctx's error (and its
// cause, when that is another error), joined with lead's own error.
func electStopped(ctx context.Context, name string, leadErr error) error {
	err := fmt.Errorf("redislock: elect %q: %w", name, ctx.Err())
	if cause := context.Cause(ctx); cause != ctx.Err() {
		err = join(err, cause)
	}
	return join(err, ownError(leadErr))
}

// ownError is lead's error unless it only reports its context's end, which
// Elect reports in its own words; nil then.
func ownError(leadErr error) error {
	if errors.Is(leadErr, context.Canceled) || errors.Is(leadErr, context.DeadlineExceeded) {
		return nil
	}
	return leadErr
}
