package redislock

import (
	"context"
	"time"
)

// The janitor gives back, from one timed queue per Client, what a caller
// could not: the key an unanswered attempt may still take, the queue place
// of a waiter that gave up, the key of a failed Release. Each is a
// token-checked release that also leaves the queue (lua/release.lua,
// ARGV[4]) and passes on a lock handed to a waiter that left. Rounds are
// one pipeline (one per node on a Cluster), with a growing backoff: a sure
// clean-up until any reply, an uncertain one until the key was deleted,
// each until its lease is over.
type janitor struct {
	store store
	timedQueue[*cleanup]
}

type cleanup struct {
	ref   *lockRef
	until time.Time // after it the lease has run out: nothing left to do
	// uncertain: an attempt that may yet take the key, even after a long partition: done once
	// the key was deleted (and way, known in the batcher, settled: landed, then as a sure one);
	// endless until Redis answers (see janitorMaxPartition), then a lease more.
	uncertain bool
	way       *onItsWay
	lease     time.Duration
	answered  bool
	due       time.Time
	tries     int
	index     int
}

// Janitor backoff: from janitorFirstRetry, doubling up to janitorMaxRetry.
const (
	janitorFirstRetry   = 10 * time.Millisecond
	janitorMaxRetry     = 250 * time.Millisecond
	janitorRoundTimeout = time.Second
	// janitorMaxPartition: about how long Linux retransmits a segment before
	// it drops the connection (tcp_retries2 = 15, 924.6 s); nothing sent
	// before a partition can arrive later.
	janitorMaxPartition = 15*time.Minute + 25*time.Second
)

// leftMarkMs: how long a waiter's mark lasts (see lockRef.giveBackArgs).
var leftMarkMs any = janitorMaxPartition.Milliseconds()

func newJanitor(s store, bg *background) *janitor {
	j := &janitor{store: s}
	j.init(bg, func(c *cleanup) time.Time { return c.due }, func(c *cleanup) *int { return &c.index }, j.round)
	return j
}

// add gives back a token whose last reply was read (nothing can still land), until until.
func (j *janitor) add(ref *lockRef, until time.Time) {
	j.push(&cleanup{ref: ref, until: until})
}

// addUncertain gives back what an attempt without an answer may take (see cleanup.uncertain).
func (j *janitor) addUncertain(ref *lockRef, lease time.Duration, way *onItsWay) {
	j.push(&cleanup{ref: ref, until: time.Now().Add(janitorMaxPartition + lease), uncertain: true, lease: lease, way: way})
}

// push queues c, due now, unless its lease is over already (nothing left
// to give back) or Client.Close swept the last round.
func (j *janitor) push(c *cleanup) {
	j.mu.Lock()
	defer j.mu.Unlock()
	c.due, c.index = time.Now(), -1
	if !c.until.After(c.due) || j.timer.closed {
		return
	}
	j.setLocked(c)
}

func (j *janitor) round(due []*cleanup) {
	ctx, cancel := context.WithTimeout(context.Background(), janitorRoundTimeout)
	defer cancel()
	j.sweep(ctx, due)
}

func (j *janitor) sweep(ctx context.Context, batch []*cleanup) {
	refs := make([]*lockRef, len(batch))
	j.mu.Lock()
	for i, c := range batch {
		refs[i] = c.ref
		if done, landed := c.way.settled(); done { // before this round
			c.way, c.uncertain = nil, !landed
		}
	}
	j.mu.Unlock()
	replies, errs := j.store.abandon(ctx, refs)
	now := time.Now()
	j.mu.Lock()
	defer j.mu.Unlock()
	for i, c := range batch {
		done := errs[i] == nil && (!c.uncertain || replies[i] == replyDone && c.way == nil)
		if errs[i] == nil && c.uncertain && !c.answered {
			// Redis answers: an attempt on its way lands now, so a lease more.
			c.answered, c.tries = true, 0
			c.until = now.Add(c.lease)
		}
		if done || !now.Before(c.until) || j.timer.closed {
			continue
		}
		c.tries++
		c.due = now.Add(min(janitorFirstRetry<<min(c.tries-1, 16), janitorMaxRetry))
		j.items.set(c) // a round is running: it sets the timer
	}
}

// flush sends one last round of everything pending and closes the janitor.
func (j *janitor) flush(ctx context.Context) {
	j.mu.Lock()
	j.settledLocked() // a round under way (at most janitorRoundTimeout) queues again what it did not finish
	batch := j.takeDueLocked(time.Now().Add(time.Hour * 24 * 365))
	j.timer.close()
	j.mu.Unlock()
	if len(batch) > 0 {
		j.sweep(ctx, batch)
	}
}
