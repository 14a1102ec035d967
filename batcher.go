package redislock

import (
	"context"
	"runtime"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// A batcher lets the goroutines of one Client share round trips: the
// commands they send for a lock (acquire attempts, the SET that may come
// before them, releases) go through it.
//
// It is a group commit, with no goroutine of its own while idle. A caller
// with nothing ahead of it sends its command at once on its own goroutine,
// with its own ctx, as if there were no batcher (no timer, no added wait);
// so do two at once. While a batch of several commands is under way, or
// maxInFlight sends, the commands that come meanwhile queue (see
// maxInFlight); the first send to finish takes the whole queue and has it
// sent as one go-redis pipeline by a flusher goroutine, which goes on with
// what queued during that round trip, and ends when nothing is left. So up
// to two batches are in flight, each on a pool connection of its own, one
// written while the other's replies are read. A batch's size follows the
// load: before it
// takes the queue, a flusher lets the callers it has just answered queue
// their next commands (see gather), so that under load one batch carries
// everyone's next command, in the system calls of one round trip.
//
// A send that takes eight times as long as the lane's sends usually do (a
// stalled connection, a server that stopped answering) is late: it stops
// counting against maxInFlight, and a lane timer hands the queue to a new
// send, so a stuck connection holds up its own batch and, for that short
// while only, the commands queued behind it (up to maxSends sends per
// lane; see lateAfter).
//
// Each queued caller waits for its reply or for its ctx, whichever comes
// first. A caller whose ctx ends first gets ctx's error: if its command
// was still queued it is taken out and never sent; if it was on its way,
// its reply, when it comes, is read by nobody, and the caller's error says
// it was not seen (an acquire attempt is then given back by the janitor,
// as after a timeout).
//
// Only go-redis's own clients batch (see newBatcher). On a ClusterClient,
// commands are queued per node (the primary that serves the key's slot
// when queued), so that one node's pipeline never waits for another's;
// go-redis still routes each command, and follows MOVED and ASK itself.
type batcher struct {
	rdb     redis.UniversalClient
	cluster *redis.ClusterClient // rdb, when it is one
	// minLate and maxLate bound how long a send may take before it is
	// late (see lateAfter): defaultMinLate and defaultMaxLate, an hour in
	// tests that hold sends at a gate on purpose.
	minLate, maxLate time.Duration

	mu    sync.Mutex
	lanes map[string]*lane // a cluster's, by node address
	one   lane             // everything else's
	// flushers counts the flusher goroutines, so that Close can wait
	// for them (see idle).
	flushers sync.WaitGroup
}

// maxInFlight is how many sends of one lane may be under way, and not
// late, before commands queue: two lone callers' at once, or a batch and
// the send that, ending first, takes the next. Commands that come while a
// batch of several commands is under way queue for the next one rather
// than go alone on another connection: under load, a command sent alone
// costs the system calls of a whole round trip on both sides, which at 16
// goroutines took a sixth of the client's CPU for the one command in
// twenty that went alone (go-redis's autopipeliner, v9.23, keeps one batch
// in flight by default, for deep batches, too). A batch of one is no sign
// of load (a waiter's attempt, say), and a release that comes meanwhile
// goes alone as before, instead of waiting for it.
const maxInFlight = 2

// maxSends bounds the sends of one lane under way at once, late ones
// included, so that stalled connections cannot take the whole pool.
const maxSends = 8

// defaultMinLate and defaultMaxLate bound how long a send may take before
// it is late (see lateAfter). A healthy round trip on a LAN takes well
// under a millisecond, and go-redis's read timeout, which ends a stalled
// one, is 5 s by default.
const (
	defaultMinLate = time.Millisecond
	defaultMaxLate = 20 * time.Millisecond
)

// lane is the queue of one node and its sends under way.
type lane struct {
	sends [maxSends]sendSlot
	live  int // sends under way that are not late: at most maxInFlight
	// crowded counts the live sends that carry a batch of several
	// commands: while one is under way, callers queue for the next batch
	// instead of going alone (see maxInFlight).
	crowded int
	// usual is how long l's sends take, a moving average of those that
	// were not late (see lateAfter).
	usual time.Duration
	queue []*batchCall
	spare []*batchCall // the last batch's slice, reused
	// watch fires when the earliest live send would become late while
	// commands are queued (see watchLocked); watching: it is set.
	watch    *time.Timer
	watching bool
}

// sendSlot is one send under way: a lone caller's, or a flusher's.
type sendSlot struct {
	busy  bool
	crowd bool      // live, with a batch of several commands
	late  bool      // under way for longer than lateAfter: not live
	since time.Time // when its current command or batch went out
}

// batchCall is one queued command and where its reply is signalled.
type batchCall struct {
	ctx  context.Context
	cmd  *redis.Cmd
	done chan struct{} // buffered: the flusher never blocks on it
}

var batchCalls = sync.Pool{New: func() any { return &batchCall{done: make(chan struct{}, 1)} }}

// newBatcher returns a batcher for go-redis's own clients (a Client, also
// from NewFailoverClient, or a ClusterClient), or nil for any other
// UniversalClient: a type of the user's may do its own work in Process,
// which a pipeline would go around, so its commands go one by one through
// its Process as before.
func newBatcher(rdb redis.UniversalClient) *batcher {
	switch r := rdb.(type) {
	case *redis.Client:
		return &batcher{rdb: r, minLate: defaultMinLate, maxLate: defaultMaxLate}
	case *redis.ClusterClient:
		return &batcher{rdb: r, cluster: r, lanes: make(map[string]*lane), minLate: defaultMinLate, maxLate: defaultMaxLate}
	}
	return nil
}

// do sends cmd and returns it with its reply, or, when ctx ended before
// the reply was read, a new command that holds ctx's error (cmd itself
// may still be written by the flusher then: the caller must not read it).
// key is the key that routes cmd. cmd's arguments must not change until
// do returns, nor afterwards when it returned ctx's error.
//
// With stop not nil, cmd always goes out from a flusher goroutine, and the
// caller also stops waiting once stop is closed: the command it returns
// then holds errClosing (wrapped in unsentError if cmd was never sent).
func (b *batcher) do(ctx context.Context, key string, cmd *redis.Cmd, stop <-chan struct{}) *redis.Cmd {
	l := b.lane(ctx, key)
	b.mu.Lock()
	if stop == nil && l.crowded == 0 {
		if slot := l.claim(); slot != nil {
			b.mu.Unlock()
			_ = b.rdb.Process(ctx, cmd)
			b.sent(l, slot)
			return cmd
		}
	}
	call := batchCalls.Get().(*batchCall)
	call.ctx, call.cmd = ctx, cmd
	l.queue = append(l.queue, call)
	b.dispatchLocked(l)
	b.mu.Unlock()
	var why error
	select {
	case <-call.done:
		call.ctx, call.cmd = nil, nil
		batchCalls.Put(call)
		return cmd
	case <-ctx.Done():
		why = context.Cause(ctx)
	case <-stop:
		why = errClosing
	}
	b.mu.Lock()
	queued := false
	for i, c := range l.queue {
		if c == call {
			l.queue = append(l.queue[:i], l.queue[i+1:]...)
			queued = true
			break
		}
	}
	b.mu.Unlock()
	if queued {
		call.ctx, call.cmd = nil, nil
		batchCalls.Put(call)
	} else if why != errClosing && b.replied(call) {
		// On its way when ctx ended, and answered soon after: an
		// answer settles what the command did, which an abandoned one
		// would leave the janitor to guess.
		return cmd
	} // else: the flusher signals a channel nobody reads
	failed := redis.NewCmd(ctx, cmd.Args()...)
	if queued {
		failed.SetErr(unsentError{why})
	} else {
		failed.SetErr(why)
	}
	return failed
}

// replyGrace is how long a caller whose ctx ended while its command was on
// its way still waits for the reply (see do).
const replyGrace = 250 * time.Millisecond

// replied waits up to replyGrace for the reply of call, which is on its way.
func (b *batcher) replied(call *batchCall) bool {
	t := time.NewTimer(replyGrace)
	defer t.Stop()
	select {
	case <-call.done:
		call.ctx, call.cmd = nil, nil
		batchCalls.Put(call)
		return true
	case <-t.C:
		return false
	}
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
	addr := ""
	if node, err := b.cluster.MasterForKey(ctx, key); err == nil {
		addr = node.Options().Addr
	} // else: go-redis reports the error when it sends; queue with the rest
	b.mu.Lock()
	defer b.mu.Unlock()
	l := b.lanes[addr]
	if l == nil {
		l = new(lane)
		b.lanes[addr] = l
	}
	return l
}

// claim takes a slot for a new send if fewer than maxInFlight live sends
// of l are under way and fewer than maxSends in all; nil otherwise. b.mu
// is held.
func (l *lane) claim() *sendSlot {
	if l.live >= maxInFlight {
		return nil
	}
	for i := range l.sends {
		if slot := &l.sends[i]; !slot.busy {
			*slot = sendSlot{busy: true, since: time.Now()}
			l.live++
			return slot
		}
	}
	return nil
}

// carryOn tells whether slot, whose send just ended, may send l's queue
// next: always when it was live, and when it was late only if the live
// sends leave room for it (it is then live again). b.mu is held.
func (l *lane) carryOn(slot *sendSlot) bool {
	if len(l.queue) == 0 {
		return false
	}
	if slot.late {
		if l.live >= maxInFlight {
			return false
		}
		slot.late = false
		l.live++
	}
	slot.since = time.Now()
	return true
}

// observe folds took, how long slot's send took, into l.usual, unless the
// send was late: a stall is not how long sends usually take. b.mu is held.
func (l *lane) observe(slot *sendSlot, took time.Duration) {
	switch {
	case slot.late:
	case l.usual == 0:
		l.usual = took
	default:
		l.usual += (took - l.usual) / 8
	}
}

// lateAfter returns how long a send of l may be under way before it is
// late: eight times as long as l's sends usually take, within
// [b.minLate, b.maxLate]. Relative, so that a slow link or a CPU-starved
// process, whose round trips take milliseconds, does not take its own
// pace for stalls and split its batches; bounded, so that the first
// sends, and a lane whose sends all got slow, are judged by a sane figure.
// A batch that is merely slow and taken for late costs no more than the
// second batch in flight it lets start. b.mu is held.
func (b *batcher) lateAfter(l *lane) time.Duration {
	return min(max(8*l.usual, b.minLate), b.maxLate)
}

// markLate stops counting slot, under way for too long, as live. b.mu is
// held.
func (l *lane) markLate(slot *sendSlot) {
	l.setCrowd(slot, false)
	slot.late = true
	l.live--
}

// free ends slot. b.mu is held.
func (l *lane) free(slot *sendSlot) {
	l.setCrowd(slot, false)
	if !slot.late {
		l.live--
	}
	*slot = sendSlot{}
}

// setCrowd records whether slot, live, now carries a batch of several
// commands. b.mu is held.
func (l *lane) setCrowd(slot *sendSlot, crowd bool) {
	switch {
	case crowd && !slot.crowd:
		l.crowded++
	case !crowd && slot.crowd:
		l.crowded--
	}
	slot.crowd = crowd
}

// dispatchLocked sees to l's queue, which is not empty: a new flusher
// sends it if no batch of several is under way and a send may start;
// otherwise the first send to end takes it, and the timer watches for late
// sends. b.mu is held.
func (b *batcher) dispatchLocked(l *lane) {
	if l.crowded == 0 {
		if slot := l.claim(); slot != nil {
			b.startFlusher(l, slot)
			return
		}
	}
	b.watchLocked(l)
}

// sent ends a lone caller's send on slot: the queue, if any, goes to a
// flusher on the same slot.
func (b *batcher) sent(l *lane, slot *sendSlot) {
	took := time.Since(slot.since) // (only this goroutine writes it now)
	b.mu.Lock()
	defer b.mu.Unlock()
	l.observe(slot, took)
	if l.carryOn(slot) {
		b.startFlusher(l, slot)
		return
	}
	l.free(slot)
}

// startFlusher hands l's queue to a new flusher that sends on slot, which
// is live. b.mu is held.
func (b *batcher) startFlusher(l *lane, slot *sendSlot) {
	batch := b.take(l)
	l.setCrowd(slot, len(batch) > 1)
	b.flushers.Add(1)
	go b.flush(l, slot, batch)
}

// take returns l's queue and leaves l an empty one; nil when empty. b.mu
// is held.
func (b *batcher) take(l *lane) []*batchCall {
	if len(l.queue) == 0 {
		return nil
	}
	batch := l.queue
	l.queue, l.spare = l.spare[:0], nil
	return batch
}

// flush sends batch, then what queued meanwhile, until l's queue is empty
// or its slot, late, has to make room for live sends.
func (b *batcher) flush(l *lane, slot *sendSlot, batch []*batchCall) {
	defer b.flushers.Done()
	for {
		b.send(batch)
		took := time.Since(slot.since)
		answered := len(batch)
		clear(batch)
		if answered > 1 {
			b.gather(l, answered)
		}
		b.mu.Lock()
		l.observe(slot, took)
		if l.spare == nil {
			l.spare = batch[:0]
		}
		if !l.carryOn(slot) {
			l.free(slot)
			b.mu.Unlock()
			return
		}
		batch = b.take(l)
		l.setCrowd(slot, len(batch) > 1)
		b.mu.Unlock()
	}
}

// gather lets the callers just answered (answered of them) queue their
// next commands before the flusher takes the queue, so that those go out
// in one batch instead of trickling out in several. Signalled, the callers
// are runnable, mostly on this flusher's P, where they do not run until it
// yields: it yields while each turn brought more commands, at most once per
// caller. This is what sizes a batch to the load: callers with no next
// command cost it one yield, and a lone caller never meets a flusher.
// (Taking the queue at once made batches of 5 commands at 16 goroutines,
// against about 8, and cost some 30 % more time per cycle, in the system
// calls of small batches on both sides.)
//
// flush gathers after a batch of several only: one caller is no crowd to
// wait for, so a yield would only put off the flusher's end, and under CPU
// starvation a yield can wait behind hundreds of runnable goroutines (a
// Client per goroutine, say, sends nothing but batches of one).
func (b *batcher) gather(l *lane, answered int) {
	queued := b.queued(l)
	for range answered {
		runtime.Gosched()
		now := b.queued(l)
		if now == queued {
			return
		}
		queued = now
	}
}

// queued returns how many commands wait in l's queue.
func (b *batcher) queued(l *lane) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(l.queue)
}

// watchLocked sets l's timer, unless it is set, for the moment the
// earliest live send becomes late, so that the queue waits no longer than
// lateAfter behind a stalled send. b.mu is held.
func (b *batcher) watchLocked(l *lane) {
	if l.watching {
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
	wait := time.Until(earliest.Add(b.lateAfter(l)))
	l.watching = true
	if l.watch == nil {
		l.watch = time.AfterFunc(wait, func() { b.checkLate(l) })
		return
	}
	l.watch.Reset(wait)
}

// checkLate runs on l's timer: sends under way for lateAfter or longer
// stop counting as live, and the queue goes to a new flusher if that
// leaves no batch under way and room for a send; otherwise the timer is
// set again for the next live send.
func (b *batcher) checkLate(l *lane) {
	b.mu.Lock()
	defer b.mu.Unlock()
	l.watching = false
	if len(l.queue) == 0 {
		return
	}
	now, lateAfter := time.Now(), b.lateAfter(l)
	for i := range l.sends {
		if slot := &l.sends[i]; slot.busy && !slot.late && now.Sub(slot.since) >= lateAfter {
			l.markLate(slot)
		}
	}
	b.dispatchLocked(l)
}

// send sends batch in one pipeline and signals each caller. The pipeline
// is bounded by the latest deadline among the callers, and replyGrace
// (none when one of them has none: go-redis's timeouts then bound it),
// not by the first ctx to end: a caller that gives up only stops waiting.
func (b *batcher) send(batch []*batchCall) {
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
		// A caller whose ctx ends while its command is on its way still
		// waits replyGrace for the reply (see do): so does the pipeline.
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, latest.Add(replyGrace))
		defer cancel()
	}
	if len(batch) == 1 {
		_ = b.rdb.Process(ctx, batch[0].cmd)
	} else {
		pipe := b.rdb.Pipeline()
		for _, c := range batch {
			_ = pipe.Process(ctx, c.cmd)
		}
		_, _ = pipe.Exec(ctx) // errors are read per command
	}
	for _, c := range batch {
		c.done <- struct{}{}
	}
}

// idle returns a channel closed once no flusher is left.
func (b *batcher) idle() <-chan struct{} {
	done := make(chan struct{})
	go func() {
		b.flushers.Wait()
		close(done)
	}()
	return done
}
