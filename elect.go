package redislock

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"sync"
	"time"

	"github.com/redislock/redislock/internal/lockrules"
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
// wrapped. Each term is logged at Info, and announced at its start and end
// for ObserveLeader; Leader says who leads.
func (c *Client) Elect(ctx context.Context, name string, lead func(ctx context.Context) error, opts ...Option) error {
	switch err := c.usable(); {
	case err != nil:
		return err
	case ctx == nil:
		return invalidf("nil context")
	case lead == nil:
		return invalidf("nil lead function for election %q", name)
	}
	o, err := c.campaignOptions(opts)
	if err != nil {
		return err
	}
	key, err := lockrules.Lock(o.prefix, name)
	if err != nil {
		return keyError(err)
	}
	for {
		l, err := c.acquire(ctx, exclusiveLock, name, o, nil)
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
		o.log().Info("redislock: elected", "name", name, "holder", holderID(l.h.token()), "fence", l.h.fence)
		// Observers hear the term begin while lead starts: the
		// announcement is not on lead's way. (A goroutine per term, which
		// this call waits for.)
		var announcing sync.WaitGroup
		announcing.Go(func() { c.announceTerm(ctx, key, o.ttl/3) })
		leadErr := l.run(ctx, lead, nil)
		announcing.Wait()
		// Ended: released (maybe handed over), lost, or closed (then Close
		// announces it too, once it released the lock). A release with
		// nobody in line announces nothing itself (see release.lua).
		c.announceTerm(ctx, key, o.ttl/3)
		switch cause := context.Cause(l.Context()); {
		case ctx.Err() != nil:
			return electStopped(ctx, name, leadErr)
		case errors.Is(cause, ErrClosed):
			return join(fmt.Errorf("%w: elect %q: the Client closed while leading", ErrClosed, name), ownError(leadErr))
		case !errors.Is(cause, ErrLockLost): // of a hold's causes, only a *LostError matches it
			return leadErr // lead returned on its own, and leadership is given up
		}
		// Lost before lead returned (logged and observed): campaign on.
	}
}

func (c *Client) campaignOptions(opts []Option) (*options, error) {
	var perCall options // the call's own options, apart from the Client's
	applyOptions(&perCall, opts)
	resolved, err := c.resolve(opts) // pure: its error comes after the refusals below
	switch {
	case perCall.failOpen:
		return nil, invalidf("WithFailOpen does not apply to Elect: there is no leader without the lock")
	case perCall.retry != nil:
		return nil, invalidf("WithRetry does not apply to Elect: it waits for leadership until ctx ends")
	case err != nil:
		return nil, err
	case !resolved.watchdog:
		return nil, invalidf("Elect needs the watchdog: a leader's lease would run out under it")
	}
	o := *resolved
	// A campaign's waits never run out (LinearBackoff's, of a TTL): a
	// queued campaigner asks when woken (see acquisition.sleep); one that
	// cannot queue (a quorum) at the end of each wait, a TTL, or when a
	// majority of the leader's keys would expire.
	o.retry, o.campaign = linearBackoff{interval: o.ttl}, true
	return &o, nil
}

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

// announceTerm tells the observers of the election at key (ObserveLeader)
// that a term began or ended: one PUBLISH (SPUBLISH on a cluster) on its
// leader channel, detached from ctx (a term also ends with ctx) and bounded
// by within. Best effort: an observer that missed it reads the lock again
// at the lease's end. A quorum Client announces nothing.
func (c *Client) announceTerm(ctx context.Context, key string, within time.Duration) {
	if c.notify == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), within)
	defer cancel()
	_ = c.notify.Do(ctx, c.publish, lockrules.Leader(key), "1").Err()
}

// Leader says who leads the election called name now (see Elect): the
// holder of the lock of that name, with its metadata and lease left, and
// true; a zero HolderInfo and false when nobody leads. It reads the lock as
// Inspect does, in one round trip (on a quorum Client, each node), never
// sees a token, and works on any Client with the election's key prefix,
// also after Close.
//
// Errors: ErrInvalidArgument for a nil ctx or a name Elect would refuse
// (nothing sent); ErrNotALock when a shared lock or a semaphore holds the
// name, or a key of it holds another type; a *QuorumError when under a
// majority could be read; else the Redis error.
func (c *Client) Leader(ctx context.Context, name string) (HolderInfo, bool, error) {
	key, err := c.lockKey(ctx, name)
	if err != nil {
		return HolderInfo{}, false, err
	}
	leader, hold, err := c.readTerm(ctx, key)
	if err != nil {
		return HolderInfo{}, false, fmt.Errorf("redislock: leader %q: %w", name, err)
	}
	return leader, hold != "", nil
}

// readTerm reads the election's lock, as Inspect does: the leader, and the
// identity of its hold, "" when nobody leads. The identity is
// lua/state.lua's holder, a digest of the key's value (the token and
// metadata, the same for the whole hold), so one hold is told from the
// next without the token.
//
// A held exclusive lock lists its one holder, with its ID: parseState
// refuses a reply without it (readKind), and a quorum's inspect makes it.
func (c *Client) readTerm(ctx context.Context, key string) (HolderInfo, string, error) {
	info, hold, err := c.store.inspect(ctx, key)
	switch {
	case err != nil:
		return HolderInfo{}, "", err
	case !info.Held:
		return HolderInfo{}, "", nil
	case info.Kind != kindLock:
		return HolderInfo{}, "", notALockError{fmt.Sprintf("%s is held by a %s, not by a leader", key, info.Kind), nil}
	}
	return info.Holders[0], hold, nil
}

// ObserveLeader follows the election called name (see Elect): it yields
// the leader at once (a zero HolderInfo when nobody leads), then again at
// each change (another hold leads, or nobody does), and nothing while
// nothing changes, until ctx ends, the loop breaks or the Client is
// closed. It runs on the caller's goroutine and leaves nothing running
// once it returns. Any Client with the election's key prefix may observe,
// in any process.
//
// It listens to the lock's announcements, each term's start and end (Elect
// makes them, on the channel <key>:leader) and the releases and breaks
// announced to waiters, and reads the lock when one comes: a release, a
// hand-over or a Break is seen within a few round trips. It
// also reads the lock when the lease it last saw ends, so a leader that
// died is seen gone by then. It reads nothing else: a live leader's
// watchdog keeps its lease above two thirds of its TTL, so reads come at
// least TTL/3 apart, and never sooner than half the longest lease left it
// saw, which is at least two thirds of the election's TTL: TTL/3 (while
// nobody leads, every half of that lease, or every third of the observing
// Client's own TTL before any lease was seen). On a quorum Client, which has no
// announcements, changes are seen at those reads only, as are those of a
// holder that is not Elect's.
//
// A yielded TTL is the lease left when it was read. A read that fails is
// logged at Warn and made again at the same pace; the last leader yielded
// stands meanwhile. For a nil ctx or a name Elect would refuse it yields
// nothing, and logs why at Error (Leader returns that error).
func (c *Client) ObserveLeader(ctx context.Context, name string) iter.Seq[HolderInfo] {
	return func(yield func(HolderInfo) bool) {
		key, err := c.lockKey(ctx, name)
		if err != nil {
			logger := slog.Default() // a nil *Client has no logger
			if c != nil {
				logger = c.opts.log()
			}
			logger.Error("redislock: observe leader: nothing to observe", "name", name, "error", err)
			return
		}
		if c.closed.Load() {
			return
		}
		// A room of its own, outside the Client's rooms: the notifier wakes
		// it at any announcement but a hand-over's (those are on waiters'
		// channels, and the new leader announces its term). Without a
		// notifier (a quorum) nothing wakes it.
		room := &waitRoom{key: key}
		var ready <-chan struct{}
		if n := c.rooms().notifier; n != nil {
			sub := n.subscribe(room, lockrules.Released(key), lockrules.Leader(key))
			defer n.unsubscribe(sub)
			ready = sub.ready
		}
		timer := time.NewTimer(0)
		defer timer.Stop()
		var lastHold string
		var longest time.Duration // the longest lease seen: the TTL as far as it shows
		for first := true; ; {
			woken := room.wakeup() // before the read: what comes during it wakes us again
			if received(ready) {
				ready = nil // subscribed before this read: it misses nothing
			}
			leader, hold, err := c.readTerm(ctx, key)
			switch {
			case err != nil && ctx.Err() == nil:
				c.opts.log().Warn("redislock: observe leader: reading the lock failed", "name", name, "error", err)
			case err != nil:
			case first || hold != lastHold:
				first, lastHold = false, hold
				if !yield(leader) {
					return
				}
			}
			wait := c.opts.ttl / 3
			if hold != "" && leader.TTL > 0 {
				longest = max(longest, leader.TTL)
				// Just past the lease's end: a dead leader's key is gone by then.
				wait = max(longest/2, leader.TTL+time.Millisecond)
			} else if longest > 0 {
				wait = longest / 2
			}
			timer.Reset(wait)
			select {
			case <-ctx.Done():
				return
			case <-c.closing:
				return
			case <-woken:
			case <-ready:
				ready = nil // subscribed: read what may have come before
			case <-timer.C:
			}
		}
	}
}
