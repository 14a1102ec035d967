package redislock

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// restartWatch hears a restart or failover before the next extension: while
// locks are held, an idle pub/sub connection per go-redis client listens to
// a silent channel; when the server closes it, the watch resubscribes, then
// checks every member's locks. Not on a Cluster or quorum; a user who may
// not subscribe gets no watch (logged at Debug).
type restartWatch struct {
	rdb     redis.UniversalClient
	channel string
	logger  *slog.Logger // of the Client that opened it; nil: slog.Default()
	ps      *redis.PubSub
	exited  chan struct{} // closed when run returns

	mu        sync.Mutex
	members   map[*scheduler]struct{} // schedulers holding locks
	idleSince time.Time               // when members became empty
	done      bool                    // closed, and out of the registry: joinWatch opens a new watch
	refused   bool                    // the server refused the subscription
}

const (
	// While the server is down: a holder hears of its return within
	// watchRetryMax plus two round trips.
	watchRetryMin = 5 * time.Millisecond
	watchRetryMax = 50 * time.Millisecond
	// The watch closes watchLinger (+ watchTick, its read timeout) after
	// its last lock, so a stream of locks with shorter gaps opens it once.
	watchLinger = 100 * time.Millisecond
	watchTick   = 50 * time.Millisecond
	// A Client joins after holding locks for watchDelay: most locks are
	// released sooner, and a restart that early is heard at the next extension.
	watchDelay = 50 * time.Millisecond
	// watchChannel follows the key prefix, so an ACL granting the lock
	// channels (&lock:*) grants it too.
	watchChannel = "redislock:restart-watch"
)

var watches = struct {
	sync.Mutex
	open map[redis.UniversalClient]*restartWatch
}{open: map[redis.UniversalClient]*restartWatch{}}

// restartWatchOff turns the watch off for tests (see export_test.go).
var restartWatchOff atomic.Bool

// watchable: a client to watch (not a Cluster's: see restartWatch), unless
// tests turned the watch off.
func watchable(rdb redis.UniversalClient) bool {
	_, cluster := rdb.(*redis.ClusterClient)
	return rdb != nil && !cluster && !restartWatchOff.Load()
}

// joinWatch makes s a member of rdb's watch, opening it if needed; a
// refused watch stays registered, so that it is not asked again.
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
	// s joins w, unless w was refused. (A watch in the registry is not
	// done: closeIf takes it out. So s's last watch, if not done, is w.)
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.refused {
		w.members[s] = struct{}{}
	}
	return w
}

func (w *restartWatch) leave(s *scheduler) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.members, s)
	if len(w.members) == 0 {
		w.idleSince = time.Now()
	}
}

// run reads until the watch is idle or its client is closed (see exit).
func (w *restartWatch) run() {
	defer close(w.exited)
	ctx := context.Background()
	defer func() { _ = w.ps.Close() }()
	down := w.ps.Subscribe(ctx, w.channel) != nil // the server is down already
	wait := watchRetryMin
	for !w.exit(false) {
		msg, err := w.ps.ReceiveTimeout(ctx, watchTick)
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
	}
}

func (w *restartWatch) serverBack() {
	w.mu.Lock()
	members := slices.Collect(maps.Keys(w.members))
	w.mu.Unlock()
	for _, s := range members {
		s.lookAtAll()
	}
}

// exit closes the watch when forced (its client closed) or idle for watchLinger.
func (w *restartWatch) exit(force bool) bool {
	return w.closeIf(func() bool {
		return w.done || force || len(w.members) == 0 && time.Since(w.idleSince) >= watchLinger
	})
}

// closeIf, when closing holds (asked with watches and w.mu held), marks w
// done and takes it out of the registry.
func (w *restartWatch) closeIf(closing func() bool) bool {
	watches.Lock()
	defer watches.Unlock()
	w.mu.Lock()
	defer w.mu.Unlock()
	if !closing() {
		return false
	}
	w.done = true
	w.members = nil
	if watches.open[w.rdb] == w {
		delete(watches.open, w.rdb)
	}
	return true
}

// closeIfIdle closes w at once when it has no member (a closed Client leaves
// no goroutine), returning a channel closed when its goroutine returned;
// nil when it does not close it, or w is nil (no watch joined).
func (w *restartWatch) closeIfIdle() <-chan struct{} {
	if w == nil || !w.closeIf(func() bool { return len(w.members) == 0 && !w.done && !w.refused }) {
		return nil
	}
	// On a goroutine of its own: Close waits for the read under way (up to
	// watchTick, or a stalled connection's timeout), and Client.Close keeps to its ctx.
	go func() { _ = w.ps.Close() }()
	return w.exited
}

// refusal: the server refused the subscription (an ACL), which retrying cannot mend.
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

func (w *restartWatch) refuse(err error) {
	w.mu.Lock()
	w.refused = true
	w.members = map[*scheduler]struct{}{}
	w.mu.Unlock()
	cmp.Or(w.logger, slog.Default()).Debug("redislock: no restart watch (the server refused the subscription); restarts are heard at the next extension",
		"channel", w.channel, "error", err)
}
