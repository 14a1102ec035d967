package redislock

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// notifier shares one pub/sub connection among every room of a Client
// (on a cluster, one sharded subscription per room, since the locks live on
// different nodes; a room's two channels share its lock's slot). Its
// reader goroutine runs while at least one channel is subscribed.
type notifier struct {
	rdb     redis.UniversalClient
	sharded bool

	mu      sync.Mutex
	pubsub  *redis.PubSub // one connection (not sharded)
	reading chan struct{} // closed when the reader exits
	// subs: every subscription to a channel. Rooms of one key may share
	// a channel (an Acquire waiter's room and an AcquireMulti waiter's
	// both hear the lock's releases): each announcement wakes them all.
	subs map[string][]*subscription
}

// subscription is a room's: the lock's shared channel and, for a room
// whose waiters queue, the channel on which releases hand the lock to this
// Client's waiters (see handoverChannel).
type subscription struct {
	channels []string
	room     *waitRoom     // woken by the channels' announcements
	ready    chan struct{} // closed once the server confirmed the last channel
	pubsub   *redis.PubSub // sharded mode: its own
	done     chan struct{} // sharded mode: reader exited
}

func newNotifier(rdb redis.UniversalClient) *notifier {
	_, sharded := rdb.(*redis.ClusterClient)
	return &notifier{rdb: rdb, sharded: sharded, subs: map[string][]*subscription{}}
}

func (n *notifier) subscribe(room *waitRoom, channels ...string) *subscription {
	n.mu.Lock()
	defer n.mu.Unlock()
	sub := &subscription{channels: channels, room: room, ready: make(chan struct{})}
	for _, channel := range channels {
		n.subs[channel] = append(n.subs[channel], sub)
	}
	ctx := context.Background()
	if n.sharded {
		sub.pubsub = n.rdb.SSubscribe(ctx, channels...)
		sub.done = make(chan struct{})
		go n.read(sub.pubsub, sub.done)
		return sub
	}
	if n.pubsub == nil {
		n.pubsub = n.rdb.Subscribe(ctx, channels...)
		n.reading = make(chan struct{})
		go n.read(n.pubsub, n.reading)
	} else {
		_ = n.pubsub.Subscribe(ctx, channels...) // a failure only costs latency
	}
	return sub
}

func (n *notifier) unsubscribe(sub *subscription) {
	n.mu.Lock()
	var closing *redis.PubSub
	var done chan struct{}
	// A channel another room still listens to stays subscribed
	// (sharded: we close only our own connection).
	var ours []string
	for _, channel := range sub.channels {
		others := slices.DeleteFunc(n.subs[channel], func(s *subscription) bool { return s == sub })
		if len(others) > 0 {
			n.subs[channel] = others
			continue
		}
		delete(n.subs, channel)
		ours = append(ours, channel)
	}
	switch {
	case n.sharded:
		closing, done = sub.pubsub, sub.done
	case len(n.subs) == 0 && n.pubsub != nil:
		closing, done = n.pubsub, n.reading
		n.pubsub, n.reading = nil, nil
	case len(ours) > 0:
		_ = n.pubsub.Unsubscribe(context.Background(), ours...)
	}
	n.mu.Unlock()
	if closing != nil {
		_ = closing.Close()
		<-done
	}
}

// read dispatches messages until its pub/sub is closed.
func (n *notifier) read(ps *redis.PubSub, done chan struct{}) {
	defer close(done)
	ctx := context.Background()
	for {
		msg, err := ps.Receive(ctx)
		if err != nil {
			if errors.Is(err, redis.ErrClosed) {
				return
			}
			// go-redis reconnects and resubscribes on the next Receive;
			// a release missed meanwhile only costs latency. Avoid
			// spinning on a dead server.
			time.Sleep(10 * time.Millisecond)
			continue
		}
		var channel, payload string
		confirmed := false
		switch m := msg.(type) {
		case *redis.Message:
			channel, payload = m.Channel, m.Payload
		case *redis.Subscription:
			if m.Kind != "subscribe" && m.Kind != "ssubscribe" {
				continue // an unsubscribe confirmation is no release
			}
			channel, confirmed = m.Channel, true
		default:
			continue
		}
		n.mu.Lock()
		for _, sub := range n.subs[channel] {
			// Sharded, each subscription has a connection of its own and
			// hears its own confirmations and messages.
			if !n.sharded || sub.pubsub == ps {
				sub.deliver(channel, payload, confirmed)
			}
		}
		n.mu.Unlock()
	}
}

// deliver passes a message (or the confirmation of a channel) of one of
// its channels to the subscription's room. It never blocks: the notifier
// calls it under its mutex.
func (sub *subscription) deliver(channel, payload string, confirmed bool) {
	if confirmed {
		// The server confirms a subscription's channels in order: the
		// last one confirmed, every one is.
		if channel == sub.channels[len(sub.channels)-1] {
			select {
			case <-sub.ready:
			default:
				close(sub.ready)
			}
		}
		return
	}
	if !sub.room.wants(payload) {
		return // handed to a waiter of another process
	}
	select {
	case sub.room.released <- struct{}{}:
	default:
	}
}
