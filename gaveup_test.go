package redislock_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/internal/faultproxy"
)

// What a waiter that gives up leaves behind, and how soon it returns
// (issue 37).

// A waiter whose ctx ends on a stalled link returns at once: its give-back
// (or the reply to a refresh on its way) is waited for only as long as the
// link usually takes, then finished in the background. It waited 250 ms
// for either, whatever the link's round trip.
func TestAWaiterThatGivesUpOnAStalledLinkReturnsAtOnce(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b *backend) {
		for _, refreshing := range []bool{false, true} {
			what := "waiting"
			if refreshing {
				what = "its refresh on its way"
			}
			t.Run(what, func(t *testing.T) {
				ctx := context.Background()
				name := "stalled-" + strings.ReplaceAll(what, " ", "-")
				proxy := newProxy(t, b.rdb.Options().Addr)
				rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ContextTimeoutEnabled: true})
				t.Cleanup(func() { _ = rdb.Close() })
				sends := &sentOn{key: "lock:{" + name + "}"}
				rdb.AddHook(sends)
				holder, err := redislock.New(b.rdb, quiet).Acquire(ctx, name, redislock.WithTTL(time.Minute))
				require.NoError(t, err)
				wctx, cancel := context.WithCancel(ctx)
				defer cancel()
				waiter := redislock.New(rdb, quiet)
				t.Cleanup(func() { _ = waiter.Close(ctx) }) // before rdb's: its give-backs end first
				returned := make(chan error, 1)
				go func() {
					_, err := waiter.Acquire(wctx, name, redislock.WithRetry(redislock.LinearBackoff(time.Minute)))
					returned <- err
				}()
				eventually(t, 10*time.Second, func() bool { return queueLen(t, b.rdb, name) == 1 }, "the waiter never queued")

				proxy.SetMode(faultproxy.Blackhole) // every connection stalls, new ones too
				if refreshing {
					// Its next look at the lock (every half second) goes
					// out into the stall.
					n := sends.n.Load()
					eventually(t, 10*time.Second, func() bool { return sends.n.Load() > n }, "the waiter sent no refresh")
				}
				cancel()
				gaveUp := time.Now()
				err = <-returned
				took := time.Since(gaveUp)
				require.ErrorIs(t, err, redislock.ErrNotAcquired)
				require.ErrorIs(t, err, context.Canceled)
				// The code before could not return in less than 250 ms (a
				// timer does not fire early). The fix waits for the link at
				// most the batcher's late bound (20 ms), and then only for
				// this goroutine to be scheduled: on a loaded 2-core machine
				// that is a few ms, far from the 105 ms the bound leaves.
				require.Less(t, took, 125*time.Millisecond, "returned %v after its ctx ended", took)
				t.Logf("returned %v after its ctx ended", took)
				proxy.SetMode(faultproxy.Pass)
				proxy.ResetAll() // go-redis gives up on the stalled connections now
				require.NoError(t, holder.Release(ctx))
			})
		}
	})
}

// sentOn is a go-redis hook that counts the commands on key it starts to
// send, lone or pipelined, whether or not a reply comes.
type sentOn struct {
	key string
	n   atomic.Int64
}

func (h *sentOn) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *sentOn) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count(cmd)
		return next(ctx, cmd)
	}
}

func (h *sentOn) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			h.count(cmd)
		}
		return next(ctx, cmds)
	}
}

func (h *sentOn) count(cmd redis.Cmder) {
	for _, arg := range cmd.Args() {
		if s, ok := arg.(string); ok && s == h.key {
			h.n.Add(1)
			return
		}
	}
}
