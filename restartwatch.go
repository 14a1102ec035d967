package redislock

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// The restart watch hears a restart or a failover sooner than the next
// extension would.
//
// Between two extensions a Client sends nothing, so a server that restarts
// without the lock keys (no persistence, an older snapshot) or a failover to
// a replica that missed the SET goes unnoticed until the next extension, up
// to an extend interval (TTL/3) later, while another instance may already
// hold the lock. So while locks are held, one idle pub/sub connection stays
// open to the server, subscribed to a channel nobody publishes on. The
// server closing it (a restart, a shutdown, go-redis dropping the old
// primary after a failover) is seen at once; the watch then reconnects,
// with a short backoff while the server is down, and the moment the server
// confirms the new subscription, every held lock is checked in one batch
// (see scheduler.lookAtAll) instead of each at its next interval.
//
// There is one watch per go-redis client, shared by every Client made on
// it (a Client per request costs no connection of its own). A Client joins
// it once it has held locks for watchDelay (so short locks never open it)
// and leaves it with its last lock; it closes watchLinger after its last
// member left (so a stream of locks does not open and close it each time),
// at once on Client.Close when nobody else uses it, or when the go-redis
// client is closed. It runs on a single server
// and on Sentinel; on a Cluster and on a quorum Client the watchdog's own
// checks (a key found gone, Redis answering again after a failed batch)
// remain. A user without the right to subscribe gets no watch (logged at
// Debug once per go-redis client) and loses nothing else.
type restartWatch struct {
	rdb     redis.UniversalClient
	channel string
	logger  *slog.Logger // of the Client that opened it; nil: slog.Default()
	ps      *redis.PubSub
	exited  chan struct{} // closed when run returns

	mu        sync.Mutex
	members   map[*scheduler]struct{} // schedulers holding locks
	idleSince time.Time               // when members became empty
	done      bool                    // the goroutine exited: join a new watch
	refused   bool                    // the server refused the subscription
}

const (
	// watchRetryMin and watchRetryMax bound the backoff between the
	// watch's reconnection attempts while the server is down: the gap
	// between the server answering again and the holder being told is at
	// most watchRetryMax plus two round trips.
	watchRetryMin = 5 * time.Millisecond
	watchRetryMax = 50 * time.Millisecond
	// watchLinger is how long the watch stays open with no lock held: a
	// stream of locks with shorter gaps opens it once. watchTick is how
	// often its goroutine looks at that (the idle connection's read
	// timeout): it is gone within watchLinger+watchTick of the last lock.
	watchLinger = 100 * time.Millisecond
	// watchDelay is how long a Client holds locks before it joins the
	// watch: a lock released sooner never opens a connection (most are),
	// and a restart in a lock's first watchDelay is still heard at its
	// next extension.
	watchDelay = 50 * time.Millisecond
	watchTick  = 50 * time.Millisecond
	// watchChannel follows the Client's key prefix, so that an ACL that
	// grants the lock channels (&lock:*) grants it too.
	watchChannel = "redislock:restart-watch"
)

// watches holds the open watch of each go-redis client.
var watches = struct {
	sync.Mutex
	open map[redis.UniversalClient]*restartWatch
}{open: map[redis.UniversalClient]*restartWatch{}}

// restartWatchOff turns the watch off for tests (see export_test.go).
var restartWatchOff atomic.Bool

// watchable reports whether rdb gets a restart watch.
func watchable(rdb redis.UniversalClient) bool {
	if rdb == nil || restartWatchOff.Load() {
		return false
	}
	_, cluster := rdb.(*redis.ClusterClient)
	return !cluster
}

// joinWatch makes s a member of rdb's watch, opening it if needed, and
// returns it. A refused watch stays in the registry, so it is not tried
// again for that go-redis client.
func joinWatch(rdb redis.UniversalClient, o *options, s *scheduler) *restartWatch {
	watches.Lock()
	defer watches.Unlock()
	w := watches.open[rdb]
	if w == nil {
		w = &restartWatch{rdb: rdb, channel: o.prefix + watchChannel, logger: o.logger,
			ps:     rdb.Subscribe(context.Background()), // no channel yet: no I/O
			exited: make(chan struct{}), members: map[*scheduler]struct{}{}}
		watches.open[rdb] = w
		go w.run()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.refused {
		w.members[s] = struct{}{}
	}
	return w
}

// join makes s a member again; it returns false when w has closed and s
// must join a new one (see joinWatch).
func (w *restartWatch) join(s *scheduler) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return false
	}
	if !w.refused {
		w.members[s] = struct{}{}
	}
	return true
}

// leave takes s out; the watch closes watchLinger after its last member.
func (w *restartWatch) leave(s *scheduler) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.members, s)
	if len(w.members) == 0 {
		w.idleSince = time.Now()
	}
}

// run subscribes, then reads until the watch is idle for watchLinger or
// its go-redis client is closed, checking every member's locks each time
// the server confirms the subscription after the connection dropped.
func (w *restartWatch) run() {
	defer close(w.exited)
	ctx := context.Background()
	ps := w.ps
	defer func() { _ = ps.Close() }()
	down := ps.Subscribe(ctx, w.channel) != nil // the server is down already
	wait := watchRetryMin
	for {
		msg, err := ps.ReceiveTimeout(ctx, watchTick)
		switch {
		case err == nil:
			if s, ok := msg.(*redis.Subscription); ok && s.Kind == "subscribe" {
				wait = watchRetryMin
				if down {
					down = false
					w.serverBack()
				}
			}
		case errors.Is(err, redis.ErrClosed):
			w.exit(true)
			return
		case refusal(err):
			w.refuse(err)
			return
		case isTimeout(err):
			// An idle connection: nothing happened.
		default:
			if w.exit(false) {
				return // closed (closeIfIdle closed its connection), or idle
			}
			down = true
			time.Sleep(wait) // only while the server is unreachable
			wait = min(2*wait, watchRetryMax)
		}
		if w.exit(false) {
			return
		}
	}
}

// serverBack has every member check all its locks now.
func (w *restartWatch) serverBack() {
	w.mu.Lock()
	members := make([]*scheduler, 0, len(w.members))
	for s := range w.members {
		members = append(members, s)
	}
	w.mu.Unlock()
	for _, s := range members {
		s.lookAtAll()
	}
}

// exit closes the watch when forced (its client closed) or when it has had
// no member for watchLinger, and reports whether it did.
func (w *restartWatch) exit(force bool) bool {
	watches.Lock()
	defer watches.Unlock()
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done && !force && (len(w.members) > 0 || time.Since(w.idleSince) < watchLinger) {
		return false
	}
	w.closeLocked()
	return true
}

// closeLocked marks w closed and takes it out of the registry, with
// watches and w.mu held.
func (w *restartWatch) closeLocked() {
	w.done = true
	w.members = nil
	if watches.open[w.rdb] == w {
		delete(watches.open, w.rdb)
	}
}

// closeIfIdle closes w at once, without lingering, when it has no member
// left (Client.Close: a closed Client leaves no goroutine behind), and
// returns a channel closed when its goroutine has returned; nil when w
// stays open for other Clients or was refused.
func (w *restartWatch) closeIfIdle() <-chan struct{} {
	watches.Lock()
	w.mu.Lock()
	idle := len(w.members) == 0 && !w.done && !w.refused
	if idle {
		w.closeLocked()
	}
	w.mu.Unlock()
	watches.Unlock()
	if !idle {
		return nil
	}
	// Unblocks its Receive; on a goroutine of its own, since it waits
	// for the read under way (up to watchTick, or go-redis's read
	// timeout on a stalled connection) and Client.Close keeps to its ctx.
	go func() { _ = w.ps.Close() }()
	return w.exited
}

// refusal reports whether err is the server refusing the subscription
// (an ACL without the channel or the command), which retrying cannot mend.
func refusal(err error) bool {
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	msg := err.Error()
	return strings.HasPrefix(msg, "NOPERM") || strings.Contains(msg, "unknown command")
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

// refuse marks the watch refused: it stays registered, so that neither
// this nor another Client on the same go-redis client asks again.
func (w *restartWatch) refuse(err error) {
	w.mu.Lock()
	w.refused = true
	w.members = map[*scheduler]struct{}{}
	w.mu.Unlock()
	log := w.logger
	if log == nil {
		log = slog.Default()
	}
	log.Debug("redislock: no restart watch (the server refused the subscription); restarts are heard at the next extension",
		"channel", w.channel, "error", err)
}
