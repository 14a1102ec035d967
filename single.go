package redislock

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// singleStore keeps every lock on one Redis deployment.
type singleStore struct {
	rdb redis.UniversalClient
	// scripted: a script of ours ran here, so a plain lock's first attempt may
	// be a SET (lockRef.setArgs); before, the script runs, so that a user who
	// may not run scripts is refused by Acquire. nil on a quorum's nodes.
	scripted *atomic.Bool
	batch    *batcher        // shares round trips among callers; nil on a quorum's nodes
	closing  <-chan struct{} // Client.Close: a waiter stops waiting for its attempt (see send)
	cleaner  *janitor        // the Client's: what a multi attempt cannot give back at once
	slots    *slotMap        // a Cluster's: reloads the slot map when a reply says it is stale
}

// send sends cmd through the batcher, if any. A waiter's command goes out from
// the batcher's goroutine, so that the waiter stops waiting when Close begins.
func (s singleStore) send(ctx context.Context, key string, cmd *redis.Cmd, waiting bool) *redis.Cmd {
	switch {
	case s.batch == nil:
		_ = s.rdb.Process(ctx, cmd)
	case waiting:
		cmd = s.batch.do(ctx, key, cmd, s.closing)
	default:
		cmd = s.batch.do(ctx, key, cmd, nil)
	}
	s.slots.note(cmd.Err())
	return cmd
}

// publishCommand announces releases: SPUBLISH on a cluster (on the lock's node).
func (s singleStore) publishCommand() string {
	if _, cluster := s.rdb.(*redis.ClusterClient); cluster {
		return "SPUBLISH"
	}
	return "PUBLISH"
}

// run sends a prebuilt EVALSHA (keys from args[3]) through send, and again
// as evalAgain says (not runScripts: this is every lock's path, and one
// command needs no slice).
func (s singleStore) run(ctx context.Context, args []any, waiting bool) *redis.Cmd {
	key, _ := args[3].(string)
	cmd := s.send(ctx, key, scriptCmd(ctx, args), waiting)
	if eval := evalAgain(ctx, cmd); eval != nil {
		cmd = s.send(ctx, key, eval, waiting)
	}
	return cmd
}

func (s singleStore) queues() bool { return true }

func (s singleStore) slotted() bool {
	_, cluster := s.rdb.(*redis.ClusterClient)
	return cluster
}

// serves refuses on a Ring what one script over several keys needs.
func (s singleStore) serves(k lockKind) error {
	if _, ring := s.rdb.(*redis.Ring); ring {
		return k.needsOneScript()
	}
	return nil
}

func (s singleStore) idle() <-chan struct{} {
	if s.batch == nil {
		return nil
	}
	return s.batch.idle()
}

func (s singleStore) check(o *options) error {
	return invalidIf(s.slotted() && o.replicas > 0, "WithReplicaAck needs a client on one primary (WAIT must use the connection that wrote); a ClusterClient does not promise that")
}

func (s singleStore) acquire(ctx context.Context, o *options, ref *lockRef) (bool, int64, time.Duration, error) {
	switch {
	case ref.multi != nil:
		return s.acquireMulti(ctx, o, ref)
	case o.replicas > 0:
		// With WithReplicaAck's WAIT, an attempt that took the lock but too
		// few replicas acknowledged fails with ErrReplicaAck: not safe to
		// hold, a failover could lose it; the caller gives it back
		// (acquisition.failed).
		reply, ackErr := runAcked(ctx, s.rdb, o, ref.acquireCommand(true))
		if acquired, fence, holder, err := parseAcquire(reply, o.fencing); err != nil || !acquired || ackErr == nil {
			return acquired, fence, holder, err
		}
		return false, 0, 0, ackErr
	}
	first := !ref.attempted
	ref.attempted = true
	if first && ref.setArgs[0] != nil && !ref.fenced && !ref.waiting && s.scripted != nil && s.scripted.Load() {
		cmd := redis.NewCmd(ctx, ref.setArgs[:]...)
		cmd.SetFirstKeyPos(1)
		cmd = s.send(ctx, ref.key, cmd, false)
		switch err := cmd.Err(); {
		case err == nil:
			if val, _ := cmd.Val().(string); val != "OK" {
				return false, 0, 0, fmt.Errorf("%w %v to SET NX", errBadReply, cmd.Val())
			}
			return true, 0, 0, nil
		case err != redis.Nil:
			return false, 0, 0, err
		}
		// Not set: the script says why.
	}
	reply := s.run(ctx, ref.acquireCommand(true), ref.waiting)
	// A slot in migration: wait without a place in the queue meanwhile.
	// Built only after that reply (see acquireOutOfQueue).
	if ref.waiting && isTryAgain(reply.Err()) {
		if plain := ref.acquireOutOfQueue(); plain != nil {
			reply = s.run(ctx, plain, true)
		}
	}
	acquired, fence, holder, err := parseAcquire(reply, o.fencing)
	s.ranScript(err)
	return acquired, fence, holder, err
}

// isTryAgain checks err != nil first: HasErrorPrefix allocates even for a
// nil error, and this runs on every acquire and release.
func isTryAgain(err error) bool { return err != nil && redis.HasErrorPrefix(err, "TRYAGAIN") }

// acquireKey is acquire from strings, for a quorum's nodes (WAIT included;
// no queue: a quorum's waiters poll), which give back themselves.
func (s singleStore) acquireKey(ctx context.Context, o *options, key, token string) (bool, int64, time.Duration, error) {
	cmd, ackErr := runAcked(ctx, s.rdb, o, scriptArgs(acquireScript, []string{key}, token, o.ttl.Milliseconds(), "0", "0"))
	acquired, fence, holder, err := parseAcquire(cmd, o.fencing)
	if err != nil || !acquired {
		return false, 0, holder, err
	}
	if ackErr != nil {
		// Not safe to hold: a failover could lose it. Give it back.
		_, _ = s.releaseKey(context.WithoutCancel(ctx), key, token)
		return false, 0, 0, ackErr
	}
	return true, fence, 0, nil
}

// parseAcquire reads the acquire script's reply: a fence (>= 1, with
// fencing), 0 (acquired without fencing), or -2 - the holder's PTTL.
func parseAcquire(cmd *redis.Cmd, fencing bool) (acquired bool, fence int64, holder time.Duration, err error) {
	val, err := cmd.Result()
	if err != nil {
		return false, 0, 0, err
	}
	n, ok := val.(int64)
	switch {
	case !ok || fencing && n == 0 || !fencing && n > 0:
		// Not a number, or a fence that does not match the request.
		return false, 0, 0, fmt.Errorf("%w %v from the acquire script", errBadReply, val)
	case n < 0:
		// -1: the key has no expiry, a PTTL of -1 (unknown to holderTTL);
		// no overflow: n + 2 > math.MinInt64.
		return false, 0, holderTTL(-(n + 2)), nil
	}
	return true, n, 0, nil
}

func (s singleStore) extend(ctx context.Context, r extendRequest) (int64, error) {
	if r.multi != nil {
		return s.extendMulti(ctx, r.opts, r.multi, r.token, r.ttl)
	}
	cmd, ackErr := runAcked(ctx, s.rdb, r.opts, scriptArgs(r.kind.rules().extend, r.kind.scriptKeys(r.key, r.extraKey), r.token, r.ttl.Milliseconds()))
	reply, err := cmd.Int64()
	s.slots.note(err)
	if err == nil && reply == replyDone && ackErr != nil {
		err = ackErr // extended on the primary only: not confirmed
	}
	return reply, err
}

func (s singleStore) release(ctx context.Context, ref *lockRef) (int64, error) {
	if ref.multi != nil {
		return s.releaseMulti(ctx, ref, len(ref.multi.groups))
	}
	reply, err := s.run(ctx, ref.releaseArgs[:], false).Int64()
	if isTryAgain(err) { // a slot in migration
		if plain := ref.releaseOutOfQueue(); plain != nil {
			reply, err = s.run(ctx, plain, false).Int64()
		}
	}
	s.ranScript(err)
	return reply, err
}

// releaseAttempter sends a release and the next waiter's attempt in one round trip.
type releaseAttempter interface {
	// releaseAndAttempt releases ref (reply and err as release) and then
	// attempts next; the attempt is nil when it was not sent or not run.
	releaseAndAttempt(ctx context.Context, ref, next *lockRef) (attempt *earlyAttempt, reply int64, err error)
}

func (s singleStore) releaseAndAttempt(ctx context.Context, ref, next *lockRef) (*earlyAttempt, int64, error) {
	rel, acq := scriptCmd(ctx, ref.releaseArgs[:]), scriptCmd(ctx, next.acquireCommand(true))
	pipe := s.rdb.Pipeline()
	_ = pipe.Process(ctx, rel)
	_ = pipe.Process(ctx, acq)
	sent := time.Now()
	_, err := pipe.Exec(ctx)
	s.slots.note(err)
	if err := rel.Err(); scriptMissing(err) || isTryAgain(err) {
		// The script cache was flushed (the release, and maybe the attempt
		// after it, ran nothing) or the slot is migrating: release the long
		// way (run sends it as EVAL); the waiter makes its own
		// attempt, as one sent with a release that ran nothing tells nothing.
		reply, err := s.release(ctx, ref)
		return nil, reply, err
	}
	reply, err := rel.Int64()
	s.ranScript(err)
	return &earlyAttempt{sent: sent, reply: acq}, reply, err
}

// abandon sends each ref's release as a waiter that leaves (ARGV[4]), in one
// pipeline per node (see eachNode).
func (s singleStore) abandon(ctx context.Context, refs []*lockRef) ([]int64, []error) {
	if slices.ContainsFunc(refs, func(ref *lockRef) bool { return ref.multi != nil }) {
		return s.abandonWithMulti(ctx, refs)
	}
	return s.eachNode(refs, func(refs []*lockRef) ([]int64, []error) { return s.abandonOn(ctx, refs) })
}

// abandonOn is abandon for refs on one node.
func (s singleStore) abandonOn(ctx context.Context, refs []*lockRef) ([]int64, []error) {
	cmds := make([]*redis.Cmd, len(refs))
	for i, ref := range refs {
		cmds[i] = scriptCmd(ctx, ref.giveBackArgs())
	}
	runScripts(ctx, cmds, s.pipelined(ctx, true))
	replies, errs := make([]int64, len(refs)), make([]error, len(refs))
	for i, cmd := range cmds {
		replies[i], errs[i] = cmd.Int64()
		if isTryAgain(errs[i]) {
			// The slot is migrating (see release); a place left lapses.
			replies[i], errs[i] = s.release(ctx, refs[i])
		}
	}
	return replies, errs
}

// pipelined is a send for runScripts: the commands in one pipeline, on
// one node (errors are read per command), and with alone a lone command on
// the main pool: go-redis dials pipeline connections on demand, and a
// Close that gives back one lock (a leader's) should hand it over in a
// round trip, not a dial.
func (s singleStore) pipelined(ctx context.Context, alone bool) func([]*redis.Cmd) {
	return func(cmds []*redis.Cmd) {
		pipe := s.rdb.Pipeline()
		var last *redis.Cmd
		for _, cmd := range cmds {
			if cmd != nil {
				_ = pipe.Process(ctx, cmd)
				last = cmd
			}
		}
		var err error
		switch {
		case last == nil:
			return
		case alone && pipe.Len() == 1:
			err = s.rdb.Process(ctx, last)
		default:
			_, err = pipe.Exec(ctx)
		}
		s.slots.note(err)
	}
}

// ranScript notes, when err is nil, that a script of ours ran here (see scripted).
func (s singleStore) ranScript(err error) {
	if err == nil && s.scripted != nil && !s.scripted.Load() {
		s.scripted.Store(true)
	}
}

func (s singleStore) releaseKey(ctx context.Context, key, token string) (int64, error) {
	return runOn(ctx, s.rdb, scriptArgs(releaseScript, []string{key}, token, s.publishCommand())).Int64()
}

func (s singleStore) pttl(ctx context.Context, ref *lockRef) (int64, error) {
	if ref.multi != nil {
		return s.pttlMulti(ctx, ref)
	}
	return runOn(ctx, s.rdb, scriptArgs(ref.kind.rules().pttl, ref.kind.scriptKeys(ref.key, ref.extraKey), ref.token)).Int64()
}

// runOn sends a script command on rdb, not batched (see runScripts).
func runOn(ctx context.Context, rdb redis.UniversalClient, args []any) *redis.Cmd {
	cmds := []*redis.Cmd{scriptCmd(ctx, args)}
	runScripts(ctx, cmds, func(cmds []*redis.Cmd) { _ = rdb.Process(ctx, cmds[0]) })
	return cmds[0]
}

// runAcked runs a prepared EVALSHA ("evalsha", sha, numkeys, keys, args)
// on rdb, and, with WithReplicaAck, WAIT in the same pipeline; ackErr
// (matching ErrReplicaAck) says when the replicas fell short: it is nil when
// enough replicas acknowledged the script (or the script failed).
func runAcked(ctx context.Context, rdb redis.UniversalClient, o *options, command []any) (reply *redis.Cmd, ackErr error) {
	if o.replicas == 0 {
		return runOn(ctx, rdb, command), nil
	}
	cmds := []*redis.Cmd{scriptCmd(ctx, command)}
	var acked func() (int64, error) // WAIT's reply
	runScripts(ctx, cmds, func(cmds []*redis.Cmd) {
		pipe := rdb.Pipeline()
		_ = pipe.Process(ctx, cmds[0])
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
	})
	if reply = cmds[0]; reply.Err() != nil {
		return reply, nil
	}
	switch n, err := acked(); {
	case err != nil:
		return reply, fmt.Errorf("%w: WAIT failed: %w", ErrReplicaAck, err)
	case n < int64(o.replicas):
		return reply, fmt.Errorf("%w: %d of %d replicas acknowledged within %v", ErrReplicaAck, n, o.replicas, o.replicaTimeout)
	}
	return reply, nil
}

// extendBatch extends many locks, on one node, in one pipeline (see
// runScripts); those with WithReplicaAck and multi locks go one by one.
func (s singleStore) extendBatch(ctx context.Context, reqs []extendRequest) {
	cmds := make([]*redis.Cmd, len(reqs))
	for i := range reqs {
		if r := &reqs[i]; r.opts.replicas == 0 && r.multi == nil { // (the others one by one, below)
			cmds[i] = scriptCmd(ctx, scriptArgs(r.kind.rules().extend, r.kind.scriptKeys(r.key, r.extraKey), r.token, r.ttl.Milliseconds()))
		}
	}
	runScripts(ctx, cmds, s.pipelined(ctx, false))
	for i := range reqs {
		r := &reqs[i]
		if cmds[i] == nil { // WithReplicaAck, or a multi lock
			r.reply, r.err = s.extend(ctx, *r)
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
	case millis < 0 || millis > maxLeaseMs:
		return 0
	}
	return time.Duration(millis) * time.Millisecond
}
