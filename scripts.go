package redislock

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// The Lua scripts live in lua/*.lua, each with a header giving its KEYS,
// ARGV and replies. They are wrapped once here; redis.Script.Run sends
// EVALSHA and falls back to EVAL when the server answers NOSCRIPT (after a
// restart or SCRIPT FLUSH), so scripts need no loading step.
var (
	//go:embed lua/acquire.lua
	acquireSource string
	//go:embed lua/extend.lua
	extendSource string
	//go:embed lua/release.lua
	releaseSource string
	//go:embed lua/pttl.lua
	pttlSource string

	acquireScript = redis.NewScript(acquireSource)
	extendScript  = redis.NewScript(extendSource)
	releaseScript = redis.NewScript(releaseSource)
	pttlScript    = redis.NewScript(pttlSource)
)

// Replies of the extend and release scripts.
const (
	replyDone    = 1
	replyGone    = 0
	replyForeign = -1
)

// reasonFor maps a "not ours" script reply to a loss reason.
func reasonFor(reply int64) LostReason {
	if reply == replyGone {
		return Expired
	}
	return Taken
}

// runScript runs script and, with WithReplicaAck, WAIT in the same
// pipeline, so that WAIT travels on the connection that wrote. The script's
// reply is returned even when the replicas fell short; ackErr (matching
// ErrReplicaAck) says so.
func runScript(ctx context.Context, rdb redis.UniversalClient, o *options, script *redis.Script, keys []string, args ...any) (reply *redis.Cmd, ackErr error) {
	if o.replicas == 0 {
		return script.Run(ctx, rdb, keys, args...), nil
	}
	var acked func() (int64, error)
	exec := func(useSHA bool) {
		pipe := rdb.Pipeline()
		if useSHA {
			reply = script.EvalSha(ctx, pipe, keys, args...)
		} else {
			reply = script.Eval(ctx, pipe, keys, args...)
		}
		// go-redis' own WAIT (which also stretches the read timeout) is on
		// the concrete pipeline type only.
		if waiter, ok := pipe.(interface {
			Wait(context.Context, int, time.Duration) *redis.IntCmd
		}); ok {
			acked = waiter.Wait(ctx, o.replicas, o.replicaTimeout).Result
		} else {
			acked = pipe.Do(ctx, "wait", o.replicas, o.replicaTimeout.Milliseconds()).Int64
		}
		_, _ = pipe.Exec(ctx) // errors are read from each command
	}
	exec(true)
	if redis.HasErrorPrefix(reply.Err(), "NOSCRIPT") {
		exec(false)
	}
	if reply.Err() != nil {
		return reply, nil
	}
	n, err := acked()
	if err != nil {
		return reply, fmt.Errorf("%w: WAIT failed: %w", ErrReplicaAck, err)
	}
	if n < int64(o.replicas) {
		return reply, fmt.Errorf("%w: %d of %d replicas acknowledged within %v", ErrReplicaAck, n, o.replicas, o.replicaTimeout)
	}
	return reply, nil
}
