package redislock

import (
	"context"
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
// with its own ctx, as if there were no batcher (no timer, no added wait).
// While maxInFlight sends are under way, the commands that come meanwhile
// queue; the first send to finish takes the whole queue and has it sent as
// one go-redis pipeline by a flusher goroutine, which goes on with what
// queued during that round trip, and ends when nothing is left. Each
// queued caller waits for its reply or for its ctx, whichever comes first.
// A caller whose ctx ends first gets ctx's error: if its command was still
// queued it is taken out and never sent; if it was on its way, its reply,
// when it comes, is read by nobody, and the caller's error says it was not
// seen (an acquire attempt is then given back by the janitor, as after a
// timeout).
//
// Only go-redis's own clients batch (see newBatcher). On a ClusterClient, commands are queued per node (the primary that
// serves the key's slot when queued), so that one node's pipeline never
// waits for another's; go-redis still routes each command, and follows
// MOVED and ASK itself.
type batcher struct {
	rdb     redis.UniversalClient
	cluster *redis.ClusterClient // rdb, when it is one

	mu    sync.Mutex
	lanes map[string]*lane // a cluster's, by node address
	one   lane             // everything else's
	// flushers counts the flusher goroutines, so that Close can wait
	// for them (see idle).
	flushers sync.WaitGroup
}

// maxInFlight is how many sends of one lane may be under way before
// commands queue: two, so that a batch forms while the previous one is on
// the wire, without taking more connections from the pool.
const maxInFlight = 2

// lane is the queue of one node.
type lane struct {
	inFlight int
	queue    []*batchCall
	spare    []*batchCall // the last batch's slice, reused
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
		return &batcher{rdb: r}
	case *redis.ClusterClient:
		return &batcher{rdb: r, cluster: r, lanes: make(map[string]*lane)}
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
	if l.inFlight < maxInFlight && stop == nil {
		l.inFlight++
		b.mu.Unlock()
		_ = b.rdb.Process(ctx, cmd)
		b.next(l)
		return cmd
	}
	call := batchCalls.Get().(*batchCall)
	call.ctx, call.cmd = ctx, cmd
	l.queue = append(l.queue, call)
	if l.inFlight < maxInFlight {
		// Nothing under way would take the queue: a flusher sends it.
		l.inFlight++
		b.flushers.Add(1)
		go b.flush(l, b.take(l))
	}
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

// next ends one send of l: the queue, if any, goes to a flusher.
func (b *batcher) next(l *lane) {
	b.mu.Lock()
	batch := b.take(l)
	if batch == nil {
		l.inFlight--
		b.mu.Unlock()
		return
	}
	b.flushers.Add(1)
	b.mu.Unlock()
	go b.flush(l, batch)
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

// flush sends batch, then what queued meanwhile, until l's queue is empty.
func (b *batcher) flush(l *lane, batch []*batchCall) {
	defer b.flushers.Done()
	for batch != nil {
		b.send(batch)
		clear(batch)
		b.mu.Lock()
		if l.spare == nil {
			l.spare = batch[:0]
		}
		if batch = b.take(l); batch == nil {
			l.inFlight--
		}
		b.mu.Unlock()
	}
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
