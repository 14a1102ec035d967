package redislock

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// notifier shares one pub/sub connection among a Client's rooms (on a
// cluster, one sharded subscription per room); its goroutines do the I/O,
// so a stalled connection stalls no waiter.
type notifier struct {
	rdb     redis.UniversalClient
	sharded bool

	mu sync.Mutex // never held across I/O
	// subs: the subscriptions to each channel, which rooms of one key may share.
	subs      map[string][]*subscription
	confirmed map[string]bool // by the server, on the shared connection (not sharded)

	// pending counts the reconcile and closing goroutines; idle, when not
	// nil, closes when it drops to 0 (see wait). Guarded by mu.
	pending int
	idle    chan struct{}

	io      sync.Mutex      // serialises reconcile
	pubsub  *redis.PubSub   // the shared connection (not sharded); guarded by io
	reading chan struct{}   // closed when its reader exits; guarded by io
	have    map[string]bool // channels asked for on pubsub; guarded by io
}

// subscription is a room's: the lock's channel, and this Client's hand-over channel.
type subscription struct {
	channels []string
	room     *waitRoom     // woken by the channels' announcements
	ready    chan struct{} // closed once the server confirmed every channel
	// confirmed (by channels' index) and gone are guarded by notifier.mu.
	confirmed []bool
	gone      bool          // unsubscribed
	pubsub    *redis.PubSub // sharded mode: its own, made without I/O
	done      chan struct{} // sharded mode: reader exited
}

func newNotifier(rdb redis.UniversalClient) *notifier {
	_, sharded := rdb.(*redis.ClusterClient)
	return &notifier{rdb: rdb, sharded: sharded, subs: map[string][]*subscription{},
		confirmed: map[string]bool{}, have: map[string]bool{}}
}

// subscribe records room's interest and returns at once; ready closes once
// the server confirmed every channel.
func (n *notifier) subscribe(room *waitRoom, channels ...string) *subscription {
	sub := &subscription{channels: channels, room: room, ready: make(chan struct{}), confirmed: make([]bool, len(channels))}
	n.mu.Lock()
	for _, channel := range channels {
		n.subs[channel] = append(n.subs[channel], sub)
		if !n.sharded && n.confirmed[channel] {
			sub.confirm(channel)
		}
	}
	if n.sharded {
		// No channel given: no I/O (the reader subscribes).
		sub.pubsub = n.rdb.(*redis.ClusterClient).SSubscribe(context.Background())
		sub.done = make(chan struct{})
		go n.read(sub.pubsub, sub.done, channels)
	} else {
		n.pending++
		go n.reconcile()
	}
	n.mu.Unlock()
	return sub
}

// unsubscribe drops sub at once; the connection or channels close in the background.
func (n *notifier) unsubscribe(sub *subscription) {
	n.mu.Lock()
	sub.gone = true
	for _, channel := range sub.channels {
		n.subs[channel] = slices.DeleteFunc(n.subs[channel], func(s *subscription) bool { return s == sub })
		if len(n.subs[channel]) == 0 {
			delete(n.subs, channel) // (reconcile drops a channel with no entry)
		}
	}
	n.pending++
	n.mu.Unlock()
	if n.sharded {
		go func() {
			defer n.done()
			_ = sub.pubsub.Close()
			<-sub.done
		}()
		return
	}
	go n.reconcile()
}

func (n *notifier) done() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.pending--; n.pending == 0 && n.idle != nil {
		close(n.idle)
		n.idle = nil
	}
}

// reconcile brings the shared connection in line with the subscriptions.
func (n *notifier) reconcile() {
	defer n.done()
	n.io.Lock()
	defer n.io.Unlock()
	n.mu.Lock()
	// have is what the connection is asked for once this reconcile is done
	// (a failure to ask only costs latency).
	var add, drop []string
	for channel := range n.subs {
		if !n.have[channel] {
			add = append(add, channel)
			n.have[channel] = true
		}
	}
	for channel := range n.have {
		if n.subs[channel] == nil {
			drop = append(drop, channel)
			delete(n.confirmed, channel)
			delete(n.have, channel)
		}
	}
	empty := len(n.subs) == 0
	n.mu.Unlock()
	ctx := context.Background()
	switch {
	case empty:
		if n.pubsub != nil {
			_ = n.pubsub.Close()
			<-n.reading
			n.pubsub, n.reading = nil, nil
		}
		return
	case n.pubsub == nil:
		n.pubsub, n.reading = n.rdb.Subscribe(ctx), make(chan struct{})
		go n.read(n.pubsub, n.reading, nil)
	}
	if len(add) > 0 {
		_ = n.pubsub.Subscribe(ctx, add...) // a failure only costs latency
	}
	if len(drop) > 0 {
		_ = n.pubsub.Unsubscribe(ctx, drop...)
	}
}

// wait waits, within ctx, for the reconcile and closing goroutines.
func (n *notifier) wait(ctx context.Context) {
	n.mu.Lock()
	if n.pending > 0 && n.idle == nil {
		n.idle = make(chan struct{})
	}
	idle := n.idle // nil when nothing is pending (see done)
	n.mu.Unlock()
	_ = closeWait(ctx, idle, "the notifier")
}

// read dispatches messages until ps is closed (a sharded one subscribes first).
func (n *notifier) read(ps *redis.PubSub, done chan struct{}, sharded []string) {
	defer close(done)
	ctx := context.Background()
	if len(sharded) > 0 {
		_ = ps.SSubscribe(ctx, sharded...) // a failure only costs latency
	}
	for {
		msg, err := ps.Receive(ctx)
		if err != nil {
			if errors.Is(err, redis.ErrClosed) {
				return
			}
			// go-redis reconnects and resubscribes on the next Receive; a
			// release missed meanwhile costs latency. No spinning on a dead server.
			time.Sleep(10 * time.Millisecond)
			continue
		}
		switch m := msg.(type) {
		case *redis.Message:
			n.heard(ps, m.Channel, m.Payload, false)
		case *redis.Subscription:
			if m.Kind == "subscribe" || m.Kind == "ssubscribe" {
				n.heard(ps, m.Channel, "", true)
			} // an unsubscribe confirmation is no release
		}
	}
}

// heard hands payload, heard on channel on ps, to the rooms subscribed to
// it; with confirm, it is the server's confirmation of the subscription.
func (n *notifier) heard(ps *redis.PubSub, channel, payload string, confirm bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if confirm && !n.sharded {
		n.confirmed[channel] = true
	}
	for _, sub := range n.subs[channel] {
		switch {
		case n.sharded && sub.pubsub != ps:
			// Sharded, each subscription hears on a connection of its own.
		case confirm:
			sub.confirm(channel)
		default:
			sub.room.wants(payload)
		}
	}
}

// confirm marks channel confirmed for sub, and sub ready once all are; n.mu is held.
func (sub *subscription) confirm(channel string) {
	for i, c := range sub.channels {
		if c == channel {
			sub.confirmed[i] = true
		}
	}
	if !slices.Contains(sub.confirmed, false) && !sub.gone && !received(sub.ready) {
		close(sub.ready)
	}
}
