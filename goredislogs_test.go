package redislock_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"
	"github.com/stretchr/testify/require"

	"github.com/redislock/redislock"
)

// goRedisLog keeps what go-redis logs (redis.SetLogger).
type goRedisLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *goRedisLog) Printf(_ context.Context, format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

func (l *goRedisLog) matching(substr string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range l.lines {
		if strings.Contains(line, substr) {
			out = append(out, line)
		}
	}
	return out
}

// inFlight is a go-redis hook that counts the commands under way, but for
// a new connection's set-up (HELLO, CLIENT SETINFO): the pub/sub
// connection the Client's notifier may still be dialing when a call that
// waited less than a dial takes returns is the Client's, for all its
// waiters, not the call's (seen under load).
type inFlight struct{ n atomic.Int64 }

func (h *inFlight) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *inFlight) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		defer h.count([]redis.Cmder{cmd})()
		return next(ctx, cmd)
	}
}

func (h *inFlight) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		defer h.count(cmds)()
		return next(ctx, cmds)
	}
}

// count counts cmds under way until the returned function is called.
func (h *inFlight) count(cmds []redis.Cmder) (done func()) {
	if name := cmds[0].Name(); name == "hello" || name == "client" {
		return func() {} // a connection's set-up
	}
	h.n.Add(1)
	return func() { h.n.Add(-1) }
}

// A caller that waited in the server's queue and gave up gets its error
// once its place is given back: nothing of its call is still on a
// connection when it goes on. A go-redis client closed at that moment (a
// process that shuts down after a failed wait) used to have a connection
// returned to its closed pool, and go-redis logged "Unexpected conn[N]
// state changed by hook to CLOSED, closing it" for it.
func TestClosingTheGoRedisClientAfterAGiveUpLogsNothing(t *testing.T) {
	// The order is the point, not the bound: a waiter waits at most 250 ms
	// for the give-back, which a loaded machine (CI's -race run) can reach.
	t.Cleanup(redislock.SetLeaveWait(time.Minute))
	logs := &goRedisLog{}
	redis.SetLogger(logs)
	t.Cleanup(logging.Enable) // go-redis' default logger, as before the test

	const rounds = 20
	underWay, queued := 0, 0 // rounds
	kinds := map[string]func(ctx context.Context, c *redislock.Client, name string, opts ...redislock.Option) (*redislock.Lock, error){
		"Acquire": func(ctx context.Context, c *redislock.Client, name string, opts ...redislock.Option) (*redislock.Lock, error) {
			return c.Acquire(ctx, name, opts...)
		},
		"AcquireSemaphore": func(ctx context.Context, c *redislock.Client, name string, opts ...redislock.Option) (*redislock.Lock, error) {
			return c.AcquireSemaphore(ctx, name, 1, opts...)
		},
		"AcquireShared": func(ctx context.Context, c *redislock.Client, name string, opts ...redislock.Option) (*redislock.Lock, error) {
			return c.AcquireShared(ctx, name, opts...)
		},
	}
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		holders := redislock.New(b.rdb, quiet)
		for kind, acquire := range kinds {
			t.Run(kind, func(t *testing.T) {
				for round := range rounds {
					name := fmt.Sprintf("%s-%d", kind, round)
					var held *redislock.Lock
					var err error
					if kind == "AcquireSemaphore" {
						held, err = holders.AcquireSemaphore(ctx, name, 1)
					} else {
						held, err = holders.Acquire(ctx, name)
					}
					require.NoError(t, err)

					hook := &inFlight{}
					rdb := redis.NewClient(&redis.Options{Addr: b.rdb.Options().Addr})
					rdb.AddHook(hook)
					_, err = acquire(ctx, redislock.New(rdb, quiet), name,
						redislock.WithRetry(redislock.LimitRetry(redislock.LinearBackoff(time.Millisecond), 3)))
					require.ErrorIs(t, err, redislock.ErrNotAcquired)
					if hook.n.Load() != 0 {
						underWay++
					}
					if queueLen(t, b.rdb, name) != 0 {
						queued++
					}
					require.NoError(t, rdb.Close())
					require.NoError(t, held.Release(ctx))
				}
			})
		}
	})
	// go-redis warns when a connection in use comes back to its closed
	// pool, which a command of ours would do after the call returned.
	require.Empty(t, logs.matching("state changed by hook"), "go-redis warned")
	require.Zero(t, underWay, "calls returned with a command still under way")
	require.Zero(t, queued, "calls returned with their place still in the queue")
}
