package redislock

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/redis/go-redis/v9"
)

// A store is where locks live: one Redis deployment (singleStore: a
// server, Sentinel's failover client or a cluster), or a majority of
// independent servers (quorumStore). Client and Lock only talk to a store,
// so every feature above it works the same on both.
type store interface {
	// check rejects settings this store cannot honour.
	check(o *options) error
	// acquire makes one attempt. held reports the holder's remaining TTL
	// (negative when unknown) when the lock is someone else's.
	acquire(ctx context.Context, o *options, key, token string) (acquired bool, fence int64, holderTTL time.Duration, err error)
	// extend resets the lease; the reply is replyDone, replyGone or
	// replyForeign, and err is set when that could not be established.
	extend(ctx context.Context, o *options, key, token string, ttl time.Duration) (reply int64, err error)
	// release deletes the key if it holds token; replies as extend.
	release(ctx context.Context, key, token string) (reply int64, err error)
	// pttl returns the remaining TTL in ms, or -2 (gone) / -3 (foreign).
	pttl(ctx context.Context, key, token string) (int64, error)
}

// singleStore keeps every lock on one Redis deployment.
type singleStore struct{ rdb redis.UniversalClient }

func (s singleStore) check(o *options) error {
	if _, cluster := s.rdb.(*redis.ClusterClient); cluster && o.replicas > 0 {
		return invalidf("WithReplicaAck needs a client on one primary (WAIT must use the connection that wrote); a ClusterClient does not promise that")
	}
	return nil
}

func (s singleStore) acquire(ctx context.Context, o *options, key, token string) (bool, int64, time.Duration, error) {
	keys := []string{key}
	if o.fencing {
		keys = append(keys, fenceKeyFor(key))
	}
	cmd, ackErr := runScript(ctx, s.rdb, o, acquireScript, keys, token, o.ttl.Milliseconds())
	reply, err := cmd.Int64Slice()
	if err == nil && (len(reply) != 2 || reply[0] != 0 && reply[0] != 1 ||
		reply[0] == 1 && (o.fencing && reply[1] < 1 || !o.fencing && reply[1] != 0)) {
		err = fmt.Errorf("unexpected reply %v from the acquire script", reply)
	}
	if err != nil {
		return false, 0, 0, err
	}
	if reply[0] == 0 {
		return false, 0, holderTTL(reply[1]), nil
	}
	if ackErr != nil {
		// Not safe to hold: a failover could lose it. Give it back.
		_, _ = s.release(context.WithoutCancel(ctx), key, token)
		return false, 0, 0, ackErr
	}
	return true, reply[1], 0, nil
}

func (s singleStore) extend(ctx context.Context, o *options, key, token string, ttl time.Duration) (int64, error) {
	cmd, ackErr := runScript(ctx, s.rdb, o, extendScript, []string{key}, token, ttl.Milliseconds())
	reply, err := cmd.Int64()
	if err == nil && reply == replyDone && ackErr != nil {
		err = ackErr // extended on the primary only: not confirmed
	}
	return reply, err
}

func (s singleStore) release(ctx context.Context, key, token string) (int64, error) {
	publish := "PUBLISH"
	if _, cluster := s.rdb.(*redis.ClusterClient); cluster {
		publish = "SPUBLISH" // the channel lives on the lock's node
	}
	return releaseScript.Run(ctx, s.rdb, []string{key}, token, releaseChannel(key), publish).Int64()
}

func (s singleStore) pttl(ctx context.Context, key, token string) (int64, error) {
	return pttlScript.Run(ctx, s.rdb, []string{key}, token).Int64()
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

// extendBatch extends many locks in one round trip: their EVALSHAs go in one
// pipeline (on a cluster go-redis splits it by node), those that met
// NOSCRIPT are sent again with EVAL. Locks with WithReplicaAck are extended
// one by one, each with its WAIT.
func (s singleStore) extendBatch(ctx context.Context, reqs []extendRequest) {
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(reqs))
	for i := range reqs {
		if reqs[i].opts.replicas > 0 {
			continue
		}
		cmds[i] = extendScript.EvalSha(ctx, pipe, []string{reqs[i].key}, reqs[i].token, reqs[i].ttl.Milliseconds())
	}
	if pipe.Len() > 0 {
		_, _ = pipe.Exec(ctx) // errors are read per command
	}
	var retry []int
	for i, cmd := range cmds {
		if cmd != nil && redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
			retry = append(retry, i)
			cmds[i] = extendScript.Eval(ctx, pipe, []string{reqs[i].key}, reqs[i].token, reqs[i].ttl.Milliseconds())
		}
	}
	if len(retry) > 0 {
		_, _ = pipe.Exec(ctx)
	}
	for i := range reqs {
		r := &reqs[i]
		if cmds[i] == nil {
			r.reply, r.err = s.extend(ctx, r.opts, r.key, r.token, r.ttl)
			continue
		}
		r.reply, r.err = cmds[i].Int64()
	}
}

// holderTTL converts a holder's PTTL reply: a lease about to end (0) is
// reported as 1ms so that waiters retry then, and values that cannot be a
// TTL (negative: no expiry; beyond any Duration) as unknown.
func holderTTL(millis int64) time.Duration {
	switch {
	case millis == 0:
		return time.Millisecond
	case millis < 0 || millis > int64(math.MaxInt64/time.Millisecond):
		return 0
	}
	return time.Duration(millis) * time.Millisecond
}
