package redislock

import (
	"context"
	"fmt"
	"math"
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

// run sends a prebuilt EVALSHA (keys from args[3]), and EVAL after NOSCRIPT.
func (s singleStore) run(ctx context.Context, source string, args []any, waiting bool) *redis.Cmd {
	cmd := redis.NewCmd(ctx, args...)
	cmd.SetFirstKeyPos(3)
	key, _ := args[3].(string)
	cmd = s.send(ctx, key, cmd, waiting)
	if err := cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		eval := make([]any, len(args))
		copy(eval, args)
		eval[0], eval[1] = "eval", source
		cmd = redis.NewCmd(ctx, eval...)
		cmd.SetFirstKeyPos(3)
		cmd = s.send(ctx, key, cmd, waiting)
	}
	return cmd
}

func (s singleStore) queues() bool { return true }

func (s singleStore) slotted() bool {
	_, cluster := s.rdb.(*redis.ClusterClient)
	return cluster
}

// serves refuses a multi lock on a Ring: one script cannot span its shards.
func (s singleStore) serves(k lockKind) error {
	if _, ring := s.rdb.(*redis.Ring); ring && k == multiLock {
		return invalidf("AcquireMulti needs one server, Sentinel or a Cluster: a Ring's shards are independent servers, which one script cannot span")
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
	if _, cluster := s.rdb.(*redis.ClusterClient); cluster && o.replicas > 0 {
		return invalidf("WithReplicaAck needs a client on one primary (WAIT must use the connection that wrote); a ClusterClient does not promise that")
	}
	return nil
}

func (s singleStore) acquire(ctx context.Context, o *options, ref *lockRef) (bool, int64, time.Duration, error) {
	switch {
	case ref.kind == multiLock:
		return s.acquireMulti(ctx, o, ref)
	case o.replicas > 0:
		return s.acquireAcked(ctx, o, ref)
	}
	first := !ref.attempted
	ref.attempted = true
	if first && ref.kind == exclusiveLock && !ref.fenced && !ref.waiting && s.scripted != nil && s.scripted.Load() {
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
	reply := s.run(ctx, ref.acquireSource(), ref.acquireCommand(true), ref.waiting)
	if ref.waiting && ref.kind == exclusiveLock && isTryAgain(reply.Err()) {
		// A slot in migration refuses scripts whose keys are not all there
		// (the queue's): wait without a place in the queue meanwhile.
		reply = s.run(ctx, acquireSource, ref.acquireCommand(false), true)
	}
	acquired, fence, holder, err := parseAcquire(reply, o.fencing)
	if err == nil {
		s.ranScript()
	}
	return acquired, fence, holder, err
}

// acquireAcked is an attempt with WithReplicaAck's WAIT. One it took that
// too few replicas acknowledged fails with ErrReplicaAck: not safe to hold,
// a failover could lose it; the caller gives it back (acquisition.failed).
func (s singleStore) acquireAcked(ctx context.Context, o *options, ref *lockRef) (bool, int64, time.Duration, error) {
	reply, ackErr := runAcked(ctx, s.rdb, o, ref.acquireSource(), ref.acquireCommand(true))
	acquired, fence, holder, err := parseAcquire(reply, o.fencing)
	if err == nil && acquired && ackErr != nil {
		return false, 0, 0, ackErr
	}
	return acquired, fence, holder, err
}

// isTryAgain checks err != nil first: HasErrorPrefix allocates even for a
// nil error, and this runs on every acquire and release.
func isTryAgain(err error) bool { return err != nil && redis.HasErrorPrefix(err, "TRYAGAIN") }

// acquireKey is acquire from strings, for a quorum's nodes (WAIT included;
// no queue: a quorum's waiters poll), which give back themselves.
func (s singleStore) acquireKey(ctx context.Context, o *options, key, token string) (bool, int64, time.Duration, error) {
	cmd, ackErr := runScript(ctx, s.rdb, o, acquireScript, []string{key}, token, o.ttl.Milliseconds(), "0", "0")
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
		pttl := int64(-1) // the key has no expiry
		if n < -1 {
			pttl = -(n + 2) // no overflow: n + 2 > math.MinInt64
		}
		return false, 0, holderTTL(pttl), nil
	}
	return true, n, 0, nil
}

func (s singleStore) extend(ctx context.Context, r extendRequest) (int64, error) {
	if r.multi != nil {
		return s.extendMulti(ctx, r.opts, r.multi, r.token, r.ttl)
	}
	script, keys := extendCommand(&r)
	cmd, ackErr := runScript(ctx, s.rdb, r.opts, script, keys, r.token, r.ttl.Milliseconds())
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
	reply, err := s.run(ctx, ref.releaseSource(), ref.releaseArgs[:], false).Int64()
	if isTryAgain(err) && ref.kind == exclusiveLock {
		// A slot in migration: release without the queue's keys, so without
		// handing on. Rare: built here, not kept in every lock.
		plain := []any{"evalsha", releaseSHA, 1, ref.keyArg, &ref.token, ref.releaseArgs[7]}
		reply, err = s.run(ctx, releaseSource, plain, false).Int64()
	}
	if err == nil {
		s.ranScript()
	}
	return reply, err
}

// releaseAttempter sends a release and the next waiter's attempt in one round trip.
type releaseAttempter interface {
	// releaseAndAttempt releases ref (reply and err as release) and then
	// attempts next; the attempt is nil when it was not sent or not run.
	releaseAndAttempt(ctx context.Context, ref, next *lockRef) (attempt *earlyAttempt, reply int64, err error)
}

func (s singleStore) releaseAndAttempt(ctx context.Context, ref, next *lockRef) (*earlyAttempt, int64, error) {
	rel := redis.NewCmd(ctx, ref.releaseArgs[:]...)
	rel.SetFirstKeyPos(3)
	acq := redis.NewCmd(ctx, next.acquireCommand(true)...)
	acq.SetFirstKeyPos(3)
	pipe := s.rdb.Pipeline()
	_ = pipe.Process(ctx, rel)
	_ = pipe.Process(ctx, acq)
	sent := time.Now()
	_, err := pipe.Exec(ctx)
	s.slots.note(err)
	if err := rel.Err(); err != nil && (redis.HasErrorPrefix(err, "NOSCRIPT") || isTryAgain(err)) {
		// The script cache was flushed (both failed) or the slot is
		// migrating: release the long way; the waiter makes its own attempt.
		reply, err := s.release(ctx, ref)
		return nil, reply, err
	}
	reply, err := rel.Int64()
	if err == nil {
		s.ranScript()
	}
	return &earlyAttempt{sent: sent, reply: acq}, reply, err
}

// abandon sends each ref's release as a waiter that leaves (ARGV[4]), in one
// pipeline per node (see eachNode).
func (s singleStore) abandon(ctx context.Context, refs []*lockRef) ([]int64, []error) {
	for _, ref := range refs {
		if ref.multi != nil {
			return s.abandonWithMulti(ctx, refs)
		}
	}
	return s.eachNode(refs, func(refs []*lockRef) ([]int64, []error) { return s.abandonOn(ctx, refs) })
}

// abandonOn is abandon for refs on one node.
func (s singleStore) abandonOn(ctx context.Context, refs []*lockRef) ([]int64, []error) {
	cmds := make([]*redis.Cmd, len(refs))
	args := make([][]any, len(refs))
	pipe := s.rdb.Pipeline()
	for i, ref := range refs {
		args[i] = ref.giveBackArgs()
		cmds[i] = redis.NewCmd(ctx, args[i]...)
		cmds[i].SetFirstKeyPos(3)
		_ = pipe.Process(ctx, cmds[i])
	}
	var err error
	if len(refs) == 1 {
		// One command goes on the main pool: go-redis dials pipeline
		// connections on demand, and a Close that gives back one lock (a
		// leader's) should hand it over in a round trip, not a dial.
		err = s.rdb.Process(ctx, cmds[0])
	} else {
		_, err = pipe.Exec(ctx) // errors are read per command
	}
	s.slots.note(err)
	replies, errs := make([]int64, len(refs)), make([]error, len(refs))
	for i, cmd := range cmds {
		replies[i], errs[i] = cmd.Int64()
		switch {
		case errs[i] == nil:
		case redis.HasErrorPrefix(errs[i], "NOSCRIPT"):
			replies[i], errs[i] = s.run(ctx, refs[i].releaseSource(), args[i], false).Int64()
		case isTryAgain(errs[i]):
			// The slot is migrating (see release); a place left lapses.
			replies[i], errs[i] = s.release(ctx, refs[i])
		}
	}
	return replies, errs
}

func (s singleStore) ranScript() {
	if s.scripted != nil && !s.scripted.Load() {
		s.scripted.Store(true)
	}
}

func (s singleStore) releaseKey(ctx context.Context, key, token string) (int64, error) {
	return releaseScript.Run(ctx, s.rdb, []string{key}, token, s.publishCommand()).Int64()
}

func (s singleStore) pttl(ctx context.Context, ref *lockRef) (int64, error) {
	switch ref.kind {
	case multiLock:
		return s.pttlMulti(ctx, ref)
	case semaphoreSlot:
		return semPTTLScript.Run(ctx, s.rdb, []string{ref.key}, ref.token).Int64()
	case sharedHold:
		return sharedPTTLScript.Run(ctx, s.rdb, []string{ref.key, ref.extraKey}, ref.token).Int64()
	}
	return pttlScript.Run(ctx, s.rdb, []string{ref.key}, ref.token).Int64()
}

// runScript runs script and, with WithReplicaAck, WAIT in the same pipeline;
// ackErr (matching ErrReplicaAck) says when the replicas fell short.
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
		acked = wait(ctx, pipe, o)
		_, _ = pipe.Exec(ctx) // errors are read from each command
	}
	exec(true)
	if redis.HasErrorPrefix(reply.Err(), "NOSCRIPT") {
		exec(false)
	}
	return reply, ackOf(reply, acked, o)
}

func wait(ctx context.Context, pipe redis.Pipeliner, o *options) func() (int64, error) {
	// go-redis' own WAIT (which also stretches the read timeout) is on
	// the concrete pipeline type only.
	if waiter, ok := pipe.(interface {
		Wait(context.Context, int, time.Duration) *redis.IntCmd
	}); ok {
		return waiter.Wait(ctx, o.replicas, o.replicaTimeout).Result
	}
	return pipe.Do(ctx, "wait", o.replicas, o.replicaTimeout.Milliseconds()).Int64
}

// runAcked is runScript for a prepared EVALSHA ("evalsha", sha, numkeys,
// keys, args), source being the script's for EVAL after NOSCRIPT.
func runAcked(ctx context.Context, rdb redis.UniversalClient, o *options, source string, command []any) (reply *redis.Cmd, ackErr error) {
	pipe := rdb.Pipeline()
	send := func(command []any) func() (int64, error) {
		reply = redis.NewCmd(ctx, command...)
		reply.SetFirstKeyPos(3)
		_ = pipe.Process(ctx, reply)
		acked := wait(ctx, pipe, o)
		_, _ = pipe.Exec(ctx) // errors are read from each command
		return acked
	}
	acked := send(command)
	if err := reply.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		eval := append([]any{"eval", source}, command[2:]...)
		acked = send(eval)
	}
	return reply, ackOf(reply, acked, o)
}

// ackOf is the ErrReplicaAck of a script's reply whose WAIT answered
// acked, nil when enough replicas acknowledged it (or the script failed).
func ackOf(reply *redis.Cmd, acked func() (int64, error), o *options) error {
	if reply.Err() != nil {
		return nil
	}
	n, err := acked()
	if err != nil {
		return fmt.Errorf("%w: WAIT failed: %w", ErrReplicaAck, err)
	}
	if n < int64(o.replicas) {
		return fmt.Errorf("%w: %d of %d replicas acknowledged within %v", ErrReplicaAck, n, o.replicas, o.replicaTimeout)
	}
	return nil
}

// extendBatch extends many locks, on one node, in one pipeline (EVAL after
// NOSCRIPT); those with WithReplicaAck and multi locks go one by one.
func (s singleStore) extendBatch(ctx context.Context, reqs []extendRequest) {
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(reqs))
	for i := range reqs {
		if reqs[i].opts.replicas > 0 || reqs[i].multi != nil {
			continue // one by one, below
		}
		script, keys := extendCommand(&reqs[i])
		cmds[i] = script.EvalSha(ctx, pipe, keys, reqs[i].token, reqs[i].ttl.Milliseconds())
	}
	if pipe.Len() > 0 {
		_, err := pipe.Exec(ctx) // errors are read per command
		s.slots.note(err)
	}
	var retry []int
	for i, cmd := range cmds {
		if cmd != nil && redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
			retry = append(retry, i)
			script, keys := extendCommand(&reqs[i])
			cmds[i] = script.Eval(ctx, pipe, keys, reqs[i].token, reqs[i].ttl.Milliseconds())
		}
	}
	if len(retry) > 0 {
		_, _ = pipe.Exec(ctx)
	}
	for i := range reqs {
		r := &reqs[i]
		if cmds[i] == nil { // WithReplicaAck, or a multi lock
			r.reply, r.err = s.extend(ctx, *r)
			continue
		}
		r.reply, r.err = cmds[i].Int64()
	}
}

func extendCommand(r *extendRequest) (*redis.Script, []string) {
	switch r.kind {
	case semaphoreSlot:
		return semExtendScript, []string{r.key, r.extraKey}
	case sharedHold:
		return sharedExtendScript, []string{r.key, r.extraKey}
	}
	return extendScript, []string{r.key}
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
