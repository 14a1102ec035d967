package redislock

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// A batcher lets the goroutines of one Client share round trips: a lock's
// commands (attempts, the SET before them, releases) go through it.
//
// A group commit, with no goroutine while idle. A caller with nothing ahead
// of it sends at once, on its own goroutine and ctx (two may). While a batch
// of several commands, or maxInFlight sends, are under way, commands queue;
// the first send to end has the queue sent as one pipeline by a flusher,
// which goes on while commands queue: up to two batches in flight on two
// pool connections, one written while the other's replies are read. Before
// taking the queue a flusher lets the callers it answered queue their next
// commands (gather): a batch's size follows the load. A send under way for
// lateAfter is late and stops counting: a lane timer hands the queue to a
// new send, so a stalled connection holds up only its own batch.
//
// A queued caller whose ctx ends gets ctx's error: still queued, its
// command is taken out; on its way, its reply is read by nobody (the
// janitor gives an attempt back). Only go-redis's own clients batch; a
// ClusterClient's commands queue per node (the primary of the key's slot),
// go-redis still routes them and follows MOVED and ASK.
type batcher struct {
	rdb              redis.UniversalClient
	cluster          *redis.ClusterClient // rdb, when it is one
	minLate, maxLate time.Duration        // bound lateAfter; long in gated tests

	mu       sync.Mutex
	lanes    map[string]*lane // a cluster's, by node address
	one      lane             // everything else's
	flushers sync.WaitGroup   // Close waits for them (see idle)
}

// maxInFlight is how many live sends of a lane may be under way before
// commands queue. Behind a batch of several, callers queue rather than go
// alone (a lone round trip costs CPU); behind a batch of one, they go.
const maxInFlight = 2

// maxSends bounds a lane's sends, late ones included: stalled connections
// cannot take the whole pool.
const maxSends = 8

// A send is late after lateAfter, within these bounds: a LAN round trip is
// well under a millisecond; go-redis's read timeout ends a stall in 5 s.
const (
	defaultMinLate = time.Millisecond
	defaultMaxLate = 20 * time.Millisecond
)

// lane is the queue of one node and its sends under way.
type lane struct {
	sends [maxSends]sendSlot
	usual time.Duration // moving average of sends not late
	queue []*batchCall
	spare []*batchCall // the last batch's slice, reused
	watch *time.Timer  // set while commands queue, till it fires (see watchLocked)
}

// sendSlot is one send under way: a lone caller's, or a flusher's.
type sendSlot struct {
	busy  bool
	crowd bool      // live, with a batch of several commands
	late  bool      // under way for longer than lateAfter: not live
	since time.Time // when its current command or batch went out
	// pipe and cmds: the slot's pipeline and its commands, kept for the
	// slot's next sends (go-redis allocates each new one): only the
	// slot's sender uses them.
	pipe redis.Pipeliner
	cmds []redis.Cmder
}

// batchCall is one caller's queued commands, sent together in one batch,
// and where their replies are signalled.
type batchCall struct {
	ctx  context.Context
	cmds []redis.Cmder // its backing array kept in the pool
	done chan struct{} // buffered: the flusher never blocks on it
}

var batchCalls = sync.Pool{New: func() any { return &batchCall{done: make(chan struct{}, 1)} }}

// free puts call back in the pool, once its flusher is done with it.
func (call *batchCall) free() {
	clear(call.cmds)
	call.ctx, call.cmds = nil, call.cmds[:0]
	batchCalls.Put(call)
}

// newBatcher returns a batcher for go-redis's own Client or ClusterClient;
// nil for another UniversalClient, whose Process a pipeline would bypass.
func newBatcher(rdb redis.UniversalClient) *batcher {
	b := &batcher{rdb: rdb, minLate: defaultMinLate, maxLate: defaultMaxLate}
	switch r := rdb.(type) {
	case *redis.Client:
		return b
	case *redis.ClusterClient:
		b.cluster, b.lanes = r, make(map[string]*lane)
		return b
	}
	return nil
}

// do sends cmd, routed by key, and returns it with its reply, or, when ctx
// ended first, a new command with doAll's error (cmd, which a flusher may
// still write, is then not to be touched).
func (b *batcher) do(ctx context.Context, key string, cmd *redis.Cmd, stop <-chan struct{}) *redis.Cmd {
	if err := b.doAll(ctx, key, stop, cmd); err != nil {
		failed := redis.NewCmd(ctx, cmd.Args()...)
		failed.SetErr(err)
		return failed
	}
	return cmd
}

// doAll sends cmds, routed by key, in one batch (one pipeline), and returns
// nil once each holds its reply; or, when ctx ended first, ctx's error:
// unsentError when none left the queue, else onItsWay (cmds, which a
// flusher may still write, are then not to be touched). With stop, a
// flusher sends them and the wait ends when stop closes: errClosing.
func (b *batcher) doAll(ctx context.Context, key string, stop <-chan struct{}, cmds ...redis.Cmder) error {
	l := b.lane(ctx, key)
	b.mu.Lock()
	if stop == nil {
		if slot := l.claim(); slot != nil {
			slot.crowd = len(cmds) > 1
			b.mu.Unlock()
			slot.cmds = append(slot.cmds, cmds...)
			b.process(ctx, slot)
			// The send ends: the queue goes to a flusher on its slot.
			took := time.Since(slot.since) // (only this goroutine writes it now)
			b.mu.Lock()
			if batch := l.next(slot, took); batch != nil {
				b.startFlusher(l, slot, batch)
			}
			b.mu.Unlock()
			return nil
		}
	}
	call := batchCalls.Get().(*batchCall)
	call.ctx, call.cmds = ctx, append(call.cmds, cmds...)
	l.queue = append(l.queue, call)
	b.dispatchLocked(l)
	b.mu.Unlock()
	var why error
	select {
	case <-call.done:
		call.free()
		return nil
	case <-ctx.Done():
		why = context.Cause(ctx)
	case <-stop:
		why = errClosing
	}
	b.mu.Lock()
	i := slices.Index(l.queue, call)
	if i >= 0 {
		l.queue = slices.Delete(l.queue, i, i+1)
	}
	b.mu.Unlock()
	switch {
	case i >= 0: // still queued
		call.free()
		return unsentError{why}
	case why != errClosing && b.replied(l, call):
		// Answered soon after ctx ended: that settles what it did.
		return nil
	}
	// The flusher signals a channel nobody reads. (A copy of cmds: only
	// this rare path keeps them.)
	return &onItsWay{why, call.done, slices.Clone(cmds)}
}

// process sends slot's commands, which its sender put in slot.cmds: alone,
// or in one pipeline.
func (b *batcher) process(ctx context.Context, slot *sendSlot) {
	if len(slot.cmds) == 1 {
		_ = b.rdb.Process(ctx, slot.cmds[0])
	} else {
		if slot.pipe == nil {
			slot.pipe = b.rdb.Pipeline()
		}
		_ = slot.pipe.BatchProcess(ctx, slot.cmds...)
		_, _ = slot.pipe.Exec(ctx) // errors are read per command
	}
	clear(slot.cmds)
	slot.cmds = slot.cmds[:0]
}

// onItsWay is the error of a command its caller stopped waiting for on its
// way (cause); sent is signalled once the flusher is done with cmd.
type onItsWay struct {
	cause error
	sent  <-chan struct{}
	cmds  []redis.Cmder
}

func (e *onItsWay) Error() string { return e.cause.Error() }
func (e *onItsWay) Unwrap() error { return e.cause }

// settled tells, without waiting, whether the flusher is done with cmds and then whether
// every one's reply was read (landed): after a network error one may land later all the
// same (on a Cluster a command redirected by ASK is sent again after the others).
// A nil e (no command on its way) is not done.
func (e *onItsWay) settled() (done, landed bool) {
	if e == nil || !received(e.sent) {
		return false, false
	}
	for _, cmd := range e.cmds {
		var reply redis.Error
		if err := cmd.Err(); err != nil && !errors.As(err, &reply) {
			return true, false
		}
	}
	return true, true
}

// replyGrace is how long past its callers' latest deadline a pipeline
// still reads its replies (see send): a reply read settles what the command
// did (onItsWay.settled), so the janitor need not give back blindly.
const replyGrace = 250 * time.Millisecond

// replied waits for the reply of call, on its way, as long as the link
// usually takes (usualWait): on a healthy link the reply settles what the
// command did; on a stalled one the caller goes on at once (its ctx has
// ended) and the janitor gives the attempt back. (A constant 250 ms made
// every waiter that gave up on a stalled link return that late.)
func (b *batcher) replied(l *lane, call *batchCall) bool {
	t := time.NewTimer(b.usualWait(l))
	defer t.Stop()
	select {
	case <-call.done:
		call.free()
		return true
	case <-t.C:
		return false
	}
}

// usualWait is how long a caller waits for a reply of l before it counts
// the link as stalled: the late rule within its usual bounds (which gated
// tests do not stretch), so 1 to 20 ms.
func (b *batcher) usualWait(l *lane) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	return l.lateWithin(defaultMinLate, defaultMaxLate)
}

// unsentError is the error of a command that never left the queue: its
// caller's ctx ended first (cause). Nothing of it can reach Redis.
type unsentError struct{ cause error }

func (e unsentError) Error() string { return e.cause.Error() }
func (e unsentError) Unwrap() error { return e.cause }

// lane returns the queue for key's node.
func (b *batcher) lane(ctx context.Context, key string) *lane {
	if b.cluster == nil {
		return &b.one
	}
	addr := nodeOf(ctx, b.cluster, key) // "" unknown: go-redis reports the error when it sends
	b.mu.Lock()
	defer b.mu.Unlock()
	l := b.lanes[addr]
	if l == nil {
		l = new(lane)
		b.lanes[addr] = l
	}
	return l
}

// claim takes a slot for a new send, or nil while a batch of several,
// maxInFlight live sends or maxSends in all are under way. b.mu is held.
func (l *lane) claim() *sendSlot {
	if n, crowded := l.live(); crowded || n >= maxInFlight {
		return nil
	}
	for i := range l.sends {
		if slot := &l.sends[i]; !slot.busy {
			*slot = sendSlot{busy: true, since: time.Now(), pipe: slot.pipe, cmds: slot.cmds}
			return slot
		}
	}
	return nil
}

// next ends slot's send, which took took, and returns what slot sends next:
// l's queue, nil (the slot freed) when it is empty or slot, late, finds no
// room among the live sends. How long a send took is folded into l.usual,
// unless it was late. b.mu is held.
func (l *lane) next(slot *sendSlot, took time.Duration) []*batchCall {
	switch {
	case slot.late:
	case l.usual == 0:
		l.usual = took
	default:
		l.usual += (took - l.usual) / 8
	}
	if n, _ := l.live(); len(l.queue) == 0 || slot.late && n >= maxInFlight {
		*slot = sendSlot{pipe: slot.pipe, cmds: slot.cmds}
		return nil
	}
	slot.late, slot.since = false, time.Now()
	return l.take(slot)
}

// lateAfter is how long a send of l may take before it is late: eight times
// its usual round trip, so a slow link or starved process does not split
// its own batches, within [minLate, maxLate]. A slow batch taken for late
// costs only the second batch it lets start. b.mu is held.
func (b *batcher) lateAfter(l *lane) time.Duration { return l.lateWithin(b.minLate, b.maxLate) }

// lateWithin is eight times l's usual round trip, within [lo, hi].
func (l *lane) lateWithin(lo, hi time.Duration) time.Duration { return min(max(8*l.usual, lo), hi) }

// live counts l's sends under way that are not late, and tells whether one
// of them carries a batch of several. b.mu is held.
func (l *lane) live() (n int, crowded bool) {
	for i := range l.sends {
		if slot := &l.sends[i]; slot.busy && !slot.late {
			n++
			crowded = crowded || slot.crowd
		}
	}
	return n, crowded
}

// dispatchLocked has l's queue sent by a new flusher if no batch of several
// is under way and a send may start; else the first send to end takes it,
// and the timer watches for late sends. b.mu is held.
func (b *batcher) dispatchLocked(l *lane) {
	if slot := l.claim(); slot != nil {
		b.startFlusher(l, slot, l.take(slot))
		return
	}
	b.watchLocked(l)
}

// startFlusher has a new flusher send batch on live slot. b.mu is held.
func (b *batcher) startFlusher(l *lane, slot *sendSlot, batch []*batchCall) {
	b.flushers.Add(1)
	go b.flush(l, slot, batch)
}

// take returns l's queue, which slot sends, and leaves l an empty one (its
// callers make sure the queue has something). b.mu is held.
func (l *lane) take(slot *sendSlot) []*batchCall {
	batch := l.queue
	l.queue, l.spare = l.spare[:0], nil
	slot.crowd = len(batch) > 1 || len(batch[0].cmds) > 1
	return batch
}

// flush sends batch, then what queued meanwhile, until l's queue is empty
// or its slot, late, has to make room for live sends.
func (b *batcher) flush(l *lane, slot *sendSlot, batch []*batchCall) {
	defer b.flushers.Done()
	for batch != nil {
		b.send(slot, batch)
		took := time.Since(slot.since)
		answered := len(batch)
		clear(batch)
		if answered > 1 {
			b.gather(l, answered)
		}
		b.mu.Lock()
		if l.spare == nil {
			l.spare = batch[:0]
		}
		batch = l.next(slot, took)
		b.mu.Unlock()
	}
}

// gather lets the callers just answered queue their next commands before
// the flusher takes the queue: it yields while each turn brings more, at
// most once per caller (at 16 goroutines, batches of 8 instead of 5). Only
// after a batch of several: a starved yield can wait behind hundreds.
func (b *batcher) gather(l *lane, answered int) {
	count := func() int { b.mu.Lock(); defer b.mu.Unlock(); return len(l.queue) }
	queued := count()
	for range answered {
		runtime.Gosched()
		now := count()
		if now == queued {
			return
		}
		queued = now
	}
}

// watchLocked sets l's timer, unless set, for when the earliest live send
// becomes late. b.mu is held.
func (b *batcher) watchLocked(l *lane) {
	if l.watch != nil {
		return
	}
	var earliest time.Time
	for i := range l.sends {
		if slot := &l.sends[i]; slot.busy && !slot.late && (earliest.IsZero() || slot.since.Before(earliest)) {
			earliest = slot.since
		}
	}
	if earliest.IsZero() {
		return // every send under way is late: the first to end takes the queue
	}
	l.watch = time.AfterFunc(time.Until(earliest.Add(b.lateAfter(l))), func() { b.checkLate(l) })
}

// checkLate runs on l's timer: late sends stop counting as live, and the
// queue is dispatched again.
func (b *batcher) checkLate(l *lane) {
	b.mu.Lock()
	defer b.mu.Unlock()
	l.watch = nil
	if len(l.queue) == 0 {
		return
	}
	now, lateAfter := time.Now(), b.lateAfter(l)
	for i := range l.sends {
		if slot := &l.sends[i]; slot.busy && !slot.late && now.Sub(slot.since) >= lateAfter {
			slot.late = true
		}
	}
	b.dispatchLocked(l)
}

// send sends batch in one pipeline and signals each caller. The pipeline is
// bounded by its callers' latest deadline plus replyGrace (none if one has
// none): a caller that gives up only stops waiting.
func (b *batcher) send(slot *sendSlot, batch []*batchCall) {
	ctx := context.WithoutCancel(batch[0].ctx) // its values, for hooks
	var latest time.Time
	for _, c := range batch {
		d, ok := c.ctx.Deadline()
		if !ok {
			latest = time.Time{}
			break
		}
		if d.After(latest) {
			latest = d
		}
	}
	if !latest.IsZero() {
		// Its replies are read replyGrace past that deadline, so that a
		// command whose caller gave up on its way is settled (see replied).
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, latest.Add(replyGrace))
		defer cancel()
	}
	for _, c := range batch {
		slot.cmds = append(slot.cmds, c.cmds...)
	}
	b.process(ctx, slot)
	for _, c := range batch {
		c.done <- struct{}{}
	}
}

// idle returns a channel closed once no flusher is left.
func (b *batcher) idle() <-chan struct{} { return waited(&b.flushers) }
