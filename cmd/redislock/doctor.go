//go:build unix

package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redislock/redislock"
	"github.com/redislock/redislock/internal/lockrules"
)

const doctorUsage = `Usage: redislock doctor [flags]

Checks a Redis deployment for locking and prints one line per check:
its status (ok, risk, broken, or unknown when the user may not look), the
check, and why. The checks: server (version and mode), eviction
(maxmemory-policy), persistence (appendonly, appendfsync, save),
replication (replicas, min-replicas-to-write), latency (p50/p99 of 100
PINGs against --ttl), clock (the server's TIME against the local clock),
and permissions (every command the library sends, with ACL DRYRUN when the
user may run it, else a probe on a scratch key under --prefix that is
deleted afterwards). A last line counts the statuses.

Exits 0 when no check is broken, 1 when one is, 64 on a usage error, 69
when Redis cannot be reached.

With --json, one JSON array of {"check","status","detail"} objects and no
count line.

Flags:
`

// The statuses of a check, worst last. unknown is for what the user may not
// read (CONFIG GET, INFO, TIME refused): it never makes doctor fail.
const (
	statusOK      = "ok"
	statusUnknown = "unknown"
	statusRisk    = "risk"
	statusBroken  = "broken"
)

// exitBroken is doctor's exit code when a check is broken.
const exitBroken = 1

// latencyPings is how many PINGs the latency check sends.
const latencyPings = 100

// maxClockSkew is the skew between the server's clock and ours above which
// the clock check reports a risk.
const maxClockSkew = time.Second

// check is one line of doctor's report; its JSON form is part of the CLI's
// stable output.
type check struct {
	Check  string `json:"check"`
	Status string `json:"status"`
	Detail string `json:"detail"`
}

func cmdDoctor(args []string, stdout, stderr io.Writer) int {
	var (
		conn    redisFlags
		asJSON  bool
		ttl     time.Duration
		timeout time.Duration
	)
	flags := newFlags("doctor", &conn)
	flags.BoolVar(&asJSON, "json", false, "print one JSON array instead of text")
	durationVar(flags, &ttl, "ttl", redislock.DefaultTTL, "the lock `DURATION` the latency is compared with")
	durationVar(flags, &timeout, "timeout", 10*time.Second, "give up on Redis after this `DURATION` (the whole report)")
	names, exit, ok := parseCommand(flags, "doctor", doctorUsage, args, stdout, stderr)
	if !ok {
		return exit
	}
	if n := len(names); n != 0 {
		return usageError(stderr, "doctor: takes no arguments, got %d", n)
	}
	if ttl <= 0 || timeout <= 0 {
		return usageError(stderr, "doctor: --ttl and --timeout must be positive")
	}
	if _, err := lockKey(conn.prefix, "redislock-doctor"); err != nil {
		return usageError(stderr, "doctor: %v", err)
	}
	rdb, err := conn.connect()
	if err != nil {
		return usageError(stderr, "doctor: %v", err)
	}
	newLogger(stderr, false)
	defer rdb.Close()

	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	// A refused PING (NOPERM) is an answer: the server is there.
	if err := rdb.Ping(ctx).Err(); err != nil && !isRefusal(err) {
		what := "Redis cannot be reached"
		var redisErr redis.Error
		if errors.As(err, &redisErr) {
			what = "Redis refused the connection" // a wrong password, LOADING...
		}
		fmt.Fprintf(stderr, "redislock: doctor: %s: %s\n", what, line(err))
		return exitUnavailable
	}
	d := &doctor{rdb: rdb, prefix: conn.prefix, ttl: ttl, sentinel: conn.mode == "sentinel", cluster: conn.mode == "cluster"}
	checks := d.run(ctx)

	code := 0
	counts := map[string]int{}
	for i, c := range checks {
		checks[i].Detail = oneLine(c.Detail)
		counts[c.Status]++
		if c.Status == statusBroken {
			code = exitBroken
		}
	}
	if asJSON {
		out, _ := json.Marshal(checks) // strings only: cannot fail
		fmt.Fprintf(stdout, "%s\n", out)
		return code
	}
	for _, c := range checks {
		fmt.Fprintf(stdout, "%-7s  %-11s  %s\n", c.Status, c.Check, c.Detail)
	}
	fmt.Fprintf(stdout, "%d ok, %d risk, %d broken, %d unknown\n",
		counts[statusOK], counts[statusRisk], counts[statusBroken], counts[statusUnknown])
	return code
}

// oneLine keeps a detail on its line whatever a server put in it.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// doctor runs the checks against one deployment.
type doctor struct {
	rdb      redis.UniversalClient
	prefix   string
	ttl      time.Duration
	sentinel bool // the client found the primary through Sentinel
	cluster  bool // a Redis Cluster client

	// Read once by run, shared by the checks; nil when INFO was refused.
	info    map[string]string
	infoErr error
}

func (d *doctor) run(ctx context.Context) []check {
	d.info, d.infoErr = d.readInfo(ctx)
	return []check{
		d.server(),
		d.eviction(ctx),
		d.persistence(ctx),
		d.replication(ctx),
		d.latency(ctx),
		d.clock(ctx),
		d.permissions(ctx),
	}
}

// readInfo reads INFO server and INFO replication into one map.
func (d *doctor) readInfo(ctx context.Context) (map[string]string, error) {
	fields := map[string]string{}
	for _, section := range []string{"server", "replication"} {
		raw, err := d.rdb.Info(ctx, section).Result()
		if err != nil {
			return nil, err
		}
		for l := range strings.SplitSeq(raw, "\n") {
			if key, value, ok := strings.Cut(strings.TrimSpace(l), ":"); ok && !strings.HasPrefix(key, "#") {
				fields[key] = value
			}
		}
	}
	return fields, nil
}

// unknown is the check's line when the server refused to tell (or failed).
func unknown(name, what string, err error) check {
	if isRefusal(err) {
		return check{name, statusUnknown, "unknown (no permission: " + what + " refused)"}
	}
	return check{name, statusUnknown, "unknown (" + what + " failed: " + line(err) + ")"}
}

// isRefusal tells a NOPERM reply (the user may not run the command) from
// other failures.
func isRefusal(err error) bool {
	var redisErr redis.Error
	return errors.As(err, &redisErr) && strings.HasPrefix(redisErr.Error(), "NOPERM")
}

// role returns the server's role: "primary" or "replica".
func (d *doctor) role() string {
	if r := d.info["role"]; r == "slave" || r == "replica" {
		return "replica"
	}
	return "primary"
}

func (d *doctor) server() check {
	const name = "server"
	if d.infoErr != nil {
		return unknown(name, "INFO", d.infoErr)
	}
	version, mode := d.info["redis_version"], d.info["redis_mode"]
	desc := "Redis " + version + ", "
	switch {
	case mode == "sentinel":
		return check{name, statusBroken, desc + "a Sentinel, not a data server: locks cannot be stored here; use --redis-mode sentinel with ?master_name=NAME"}
	case mode == "cluster":
		desc += "Redis Cluster node (" + d.role() + ")"
		if major(version) < 7 {
			return check{name, statusRisk, desc + ": waiters are woken by sharded pub/sub (SSUBSCRIBE), which needs Redis 7; without it they only retry"}
		}
	case d.sentinel:
		desc += d.role() + " found through Sentinel"
	default:
		desc += "standalone " + d.role()
	}
	return check{name, statusOK, desc}
}

// major returns the major version of a "7.0.15" string, 0 if unreadable.
func major(version string) int {
	n, _ := strconv.Atoi(strings.SplitN(version, ".", 2)[0])
	return n
}

// configGet reads one setting with CONFIG GET.
func (d *doctor) configGet(ctx context.Context, param string) (string, error) {
	values, err := d.rdb.ConfigGet(ctx, param).Result()
	if err != nil {
		return "", err
	}
	value, ok := values[param]
	if !ok {
		return "", fmt.Errorf("CONFIG GET %s returned nothing", param)
	}
	return value, nil
}

// configs reads several settings, stopping at the first error.
func (d *doctor) configs(ctx context.Context, params ...string) (map[string]string, error) {
	values := map[string]string{}
	for _, p := range params {
		v, err := d.configGet(ctx, p)
		if err != nil {
			return nil, err
		}
		values[p] = v
	}
	return values, nil
}

func (d *doctor) eviction(ctx context.Context) check {
	const name = "eviction"
	cfg, err := d.configs(ctx, "maxmemory-policy", "maxmemory")
	if err != nil {
		return unknown(name, "CONFIG GET", err)
	}
	policy := cfg["maxmemory-policy"]
	desc := "maxmemory-policy " + policy
	unlimited := cfg["maxmemory"] == "0"
	if unlimited {
		desc += " with maxmemory 0 (no limit)"
	} else {
		desc += " with maxmemory " + cfg["maxmemory"] + " bytes"
	}
	switch {
	case policy == "noeviction":
		return check{name, statusOK, desc + ": no key is evicted; writes fail when memory runs out, and locks fail closed"}
	case unlimited:
		return check{name, statusRisk, desc + ": nothing is evicted while there is no limit, but a limit set later evicts lock keys" +
			map[bool]string{true: " and fence counters", false: ""}[strings.HasPrefix(policy, "allkeys-")] + "; set noeviction"}
	case strings.HasPrefix(policy, "allkeys-"):
		return check{name, statusBroken, desc + ": evicts lock keys (a second holder takes a held lock) and fence counters (fences stay ahead: the next is raised to the server clock); set noeviction"}
	case strings.HasPrefix(policy, "volatile-"):
		return check{name, statusRisk, desc + ": evicts lock keys, which carry a TTL, so a second holder can take a held lock; set noeviction"}
	}
	return check{name, statusRisk, desc + ": an eviction policy this check does not know; noeviction is the safe one"}
}

func (d *doctor) persistence(ctx context.Context) check {
	const name = "persistence"
	cfg, err := d.configs(ctx, "appendonly", "appendfsync", "save")
	if err != nil {
		return unknown(name, "CONFIG GET", err)
	}
	save := strings.TrimSpace(cfg["save"])
	if cfg["appendonly"] == "yes" {
		switch fsync := cfg["appendfsync"]; fsync {
		case "always":
			return check{name, statusOK, "AOF with appendfsync always: a restart, even after a crash of the host, keeps every acknowledged lock and fence counter"}
		case "everysec":
			return check{name, statusRisk, "AOF with appendfsync everysec: a crash of the host loses up to 1 s of writes, so a lock taken in that second is forgotten and a second holder can take it (fences stay ahead: raised to the server clock); appendfsync always closes the window"}
		default:
			return check{name, statusRisk, "AOF with appendfsync " + fsync + ": the OS flushes when it likes (about 30 s on Linux), so a crash of the host forgets the locks taken in that time (fences stay ahead: raised to the server clock); use appendfsync always"}
		}
	}
	if save != "" {
		return check{name, statusRisk, `RDB snapshots only (save "` + save + `"): a restart forgets every lock taken since the last snapshot, so a second holder can take one in use (the fence counter comes back older; the next fence is raised to the server clock, above it); use appendonly yes with appendfsync always`}
	}
	return check{name, statusRisk, `none (appendonly no, save ""): a restart forgets every lock (a second holder can take one in use) and every fence counter (fences stay ahead: the next is raised to the server clock); use appendonly yes with appendfsync always`}
}

func (d *doctor) replication(ctx context.Context) check {
	const name = "replication"
	if d.infoErr != nil {
		return unknown(name, "INFO", d.infoErr)
	}
	if d.role() == "replica" {
		primary := d.info["master_host"] + ":" + d.info["master_port"]
		return check{name, statusBroken, "a replica of " + primary + ": writes fail (READONLY) or are never replicated; point --redis at the primary"}
	}
	replicas, _ := strconv.Atoi(d.info["connected_slaves"])
	if replicas == 0 {
		return check{name, statusOK, "no connected replicas: a lock acknowledged is a lock stored (no failover can lose it)"}
	}
	minReplicas, err := d.configGet(ctx, "min-replicas-to-write")
	if isRefusal(err) {
		minReplicas = "unknown (CONFIG GET refused)"
	} else if err != nil {
		minReplicas = "unknown (" + line(err) + ")"
	}
	remedy := "unless clients use WithReplicaAck"
	if d.cluster || d.info["redis_mode"] == "cluster" {
		// New refuses WithReplicaAck on a ClusterClient: advise only what works there.
		remedy = "(no client can wait for replicas on a Cluster: fence what a second holder must not write)"
	}
	return check{name, statusRisk, fmt.Sprintf("%d connected replica(s), min-replicas-to-write %s: replication is asynchronous, so a failover can lose a lock just taken %s", replicas, minReplicas, remedy)}
}

func (d *doctor) latency(ctx context.Context) check {
	const name = "latency"
	rtts := make([]time.Duration, 0, latencyPings)
	for range latencyPings {
		start := time.Now()
		// A refused PING is still a round trip.
		if err := d.rdb.Ping(ctx).Err(); err != nil && !isRefusal(err) {
			return check{name, statusUnknown, "unknown (PING failed: " + line(err) + ")"}
		}
		rtts = append(rtts, time.Since(start))
	}
	slices.Sort(rtts)
	p50, p99 := percentile(rtts, 0.50), percentile(rtts, 0.99)
	share := float64(p99) / float64(d.ttl) * 100
	desc := fmt.Sprintf("p50 %v, p99 %v over %d PINGs; p99 is %s%% of the %v TTL",
		p50.Round(time.Microsecond), p99.Round(time.Microsecond), latencyPings, strconv.FormatFloat(share, 'g', 2, 64), d.ttl)
	switch {
	case p99 >= d.ttl/3:
		return check{name, statusBroken, desc + ": above the extension interval (TTL/3), so held locks are lost; use a longer TTL or a closer server"}
	case share >= 1:
		return check{name, statusRisk, desc + ": a slow round trip eats into the margin of every extension; use a longer TTL or a closer server"}
	}
	return check{name, statusOK, desc}
}

// percentile returns the nearest-rank p-quantile of sorted (0 < p <= 1).
func percentile(sorted []time.Duration, p float64) time.Duration {
	rank := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[max(0, min(rank, len(sorted)-1))]
}

func (d *doctor) clock(ctx context.Context) check {
	const name = "clock"
	before := time.Now()
	serverTime, err := d.rdb.Time(ctx).Result()
	after := time.Now()
	if err != nil {
		return unknown(name, "TIME", err)
	}
	// The server read its clock somewhere in the round trip: compare with
	// its middle, give or take half of it.
	rtt := after.Sub(before)
	local := before.Add(rtt / 2)
	skew := serverTime.Sub(local)
	direction := "ahead of"
	if skew < 0 {
		direction = "behind"
	}
	desc := fmt.Sprintf("the server clock is %v %s the local clock (±%v)",
		skew.Abs().Round(time.Microsecond), direction, (rtt / 2).Round(time.Microsecond))
	if skew.Abs() > maxClockSkew+rtt/2 {
		return check{name, statusRisk, desc + ": leases are timed on each side and do not compare clocks, but a clock this far off points at a host without NTP, where a step can also move the server's TTLs; check NTP on both hosts"}
	}
	return check{name, statusOK, desc}
}

// need is one command the library sends, how to ask ACL DRYRUN about it, and
// how to probe it on the scratch lock key without changing anything.
type need struct {
	command  string
	required bool // without it locks fail; the others degrade waiting only
	// dryRun is the command and arguments given to ACL DRYRUN (on the keys
	// the library would use), probe those the probe sends (on the scratch
	// lock key).
	dryRun, probe []string
	// subscribe: probed with a subscription to the channel probe[1].
	subscribe bool
}

// needs returns the commands the library sends (the client: SET, EVALSHA,
// EVAL, SUBSCRIBE or SSUBSCRIBE; the scripts in lua/: the rest), in the
// order the probe runs them. Every probe but SET and DEL runs on the scratch
// lock key holding SET's string: INCR and the sorted-set commands then fail
// with an error that proves the right without writing, and DEL, last,
// removes the key.
func needs(key string, cluster bool) []need {
	fence, queue, released := lockrules.Fence(key), lockrules.Queue(key), lockrules.Released(key)
	same := func(required bool, args ...string) need {
		return need{command: strings.ToLower(args[0]), required: required, dryRun: args, probe: args}
	}
	on := func(required bool, dryRunKey string, args ...string) need {
		dryRun := append([]string{args[0], dryRunKey}, args[2:]...)
		return need{command: strings.ToLower(args[0]), required: required, dryRun: dryRun, probe: args}
	}
	const noSuchScript = "0000000000000000000000000000000000000000"
	publish, subscribe := "PUBLISH", "SUBSCRIBE"
	if cluster {
		publish, subscribe = "SPUBLISH", "SSUBSCRIBE"
	}
	return []need{
		same(true, "SET", key, "redislock-doctor", "NX", "PX", "10000"),
		same(true, "GET", key),
		same(true, "PTTL", key),
		same(true, "PEXPIRE", key, "10000"),
		on(true, fence, "INCR", key),
		same(true, "EVALSHA", noSuchScript, "1", key),
		same(true, "EVAL", "return 0", "1", key),
		on(false, queue, "ZADD", key, "1", "waiter"),
		on(false, queue, "ZREM", key, "waiter"),
		on(false, queue, "ZRANGE", key, "0", "0"),
		on(false, queue, "ZSCORE", key, "waiter"),
		on(false, queue, "ZCARD", key),
		// Semaphores (AcquireSemaphore, run --limit) also need these.
		same(false, "ZRANK", key, "waiter"),
		same(false, "ZRANGEBYSCORE", key, "0", "0"),
		same(false, "ZREMRANGEBYSCORE", key, "0", "0"),
		same(false, "TYPE", key),
		same(false, "TIME"),
		same(false, publish, released, "1"),
		{command: strings.ToLower(subscribe), dryRun: []string{subscribe, released}, probe: []string{subscribe, released}, subscribe: true},
		same(true, "DEL", key),
	}
}

func (d *doctor) permissions(ctx context.Context) check {
	const name = "permissions"
	key, _ := lockKey(d.prefix, "redislock-doctor-"+rand.Text()[:8]) // the prefix was checked by cmdDoctor
	list := needs(key, d.cluster || d.info["redis_mode"] == "cluster")

	username, err := d.rdb.Do(ctx, "ACL", "WHOAMI").Text()
	user, method := "user "+username, "ACL DRYRUN"
	allowed := func(n need) (bool, string, error) {
		ok, err := d.dryRun(ctx, username, n)
		return ok, "", err
	}
	if err == nil {
		// Redis before 7 has no DRYRUN; a user without ACL rights may not run it.
		_, _, err = allowed(list[0])
	}
	if err != nil {
		user, method = "the current user", "a probe on "+key+", deleted afterwards"
		allowed = func(n need) (bool, string, error) { return d.probe(ctx, n) }
	}
	var lackRequired, lackOptional []string
	for _, n := range list {
		ok, other, err := allowed(n)
		if other != "" {
			// The client could not send n at all: what it needed is required.
			if !slices.Contains(lackRequired, other) {
				lackRequired = append(lackRequired, other)
			}
			continue
		}
		if err != nil {
			// Best effort: a probe cut short may have left the key.
			_ = d.rdb.Del(context.WithoutCancel(ctx), key).Err()
			return check{name, statusUnknown, "unknown (" + method + " failed at " + n.command + ": " + line(err) + ")"}
		}
		switch {
		case ok:
		case n.required:
			lackRequired = append(lackRequired, n.command)
		default:
			lackOptional = append(lackOptional, n.command)
		}
	}
	if method != "ACL DRYRUN" && slices.Contains(lackRequired, "del") {
		// The probe could not delete its key: let it expire instead.
		_ = d.rdb.PExpire(ctx, key, 10*time.Second).Err()
	}
	return permissionCheck(user, method, lackRequired, lackOptional)
}

// queueCommands are the commands of the waiters' queue, which the scripts
// run with pcall: all or none of them should be granted. (The queue also
// reads TIME, which fenced locks need in any case: see permissionCheck.)
var queueCommands = []string{"zadd", "zrem", "zrange", "zscore", "zcard"}

// semaphoreCommands are the commands only semaphores run (with the
// queue's and TIME, all without pcall: a semaphore fails without them).
var semaphoreCommands = []string{"zrank", "zrangebyscore", "zremrangebyscore", "type"}

// permissionCheck words the permissions line.
func permissionCheck(user, method string, lackRequired, lackOptional []string) check {
	const name = "permissions"
	var optionalNote string
	if len(lackOptional) > 0 {
		var effects []string
		queueLacking, semaphoreLacking := 0, 0
		for _, c := range lackOptional {
			if slices.Contains(queueCommands, c) {
				queueLacking++
			}
			if slices.Contains(semaphoreCommands, c) {
				semaphoreLacking++
			}
		}
		switch {
		case queueLacking == len(queueCommands):
			effects = append(effects, "waiters do not queue")
		case queueLacking > 0:
			effects = append(effects, "the waiters' queue half works (grant "+strings.Join(queueCommands, ", ")+" together)")
		}
		noTime := slices.Contains(lackOptional, "time")
		if noTime {
			effects = append(effects, "fenced locks fail: a fence is the counter raised to the server's TIME; the queue does not work either")
		}
		if others := len(lackOptional) - queueLacking - semaphoreLacking; others > 1 || (others == 1 && !noTime) {
			effects = append(effects, "waiters are not woken by a release and only retry")
		}
		if queueLacking > 0 || semaphoreLacking > 0 || noTime {
			effects = append(effects, "semaphores (run --limit) fail with NOPERM")
		}
		optionalNote = "; lacks the optional " + strings.Join(lackOptional, ", ") + " (" + strings.Join(effects, "; ") + ")"
	}
	checked := " (checked with " + method + ")"
	switch {
	case len(lackRequired) > 0:
		return check{name, statusBroken, user + " lacks " + strings.Join(lackRequired, ", ") + ": locks fail with NOPERM" + optionalNote + checked}
	case len(lackOptional) > 0:
		return check{name, statusRisk, user + " may run every required command" + optionalNote + checked}
	}
	return check{name, statusOK, user + " may run every command the library sends" + checked}
}

// dryRun asks ACL DRYRUN whether user may run n. It answers OK, or a
// sentence saying why not.
func (d *doctor) dryRun(ctx context.Context, user string, n need) (bool, error) {
	args := []any{"ACL", "DRYRUN", user}
	for _, a := range n.dryRun {
		args = append(args, a)
	}
	reply, err := d.rdb.Do(ctx, args...).Text()
	if err != nil {
		return false, err
	}
	return reply == "OK", nil
}

// refusedCommand matches the command a NOPERM reply names ("NOPERM this
// user has no permissions to run the 'evalsha' command").
var refusedCommand = regexp.MustCompile(`'([^']+)' command`)

// probe runs n and reports whether the server refused it with NOPERM. Any
// other reply, errors included (WRONGTYPE, NOSCRIPT, not an integer),
// proves the right. A refusal of another command (the cluster client's
// CLUSTER SLOTS, say) is returned as that command: the client needs it too.
func (d *doctor) probe(ctx context.Context, n need) (ok bool, other string, err error) {
	if n.subscribe {
		var pubsub *redis.PubSub
		if n.probe[0] == "SSUBSCRIBE" {
			pubsub = d.rdb.SSubscribe(ctx, n.probe[1])
		} else {
			pubsub = d.rdb.Subscribe(ctx, n.probe[1])
		}
		_, err = pubsub.Receive(ctx)
		_ = pubsub.Close()
	} else {
		args := make([]any, len(n.probe))
		for i, a := range n.probe {
			args[i] = a
		}
		err = d.rdb.Do(ctx, args...).Err()
	}
	var redisErr redis.Error
	switch {
	case err == nil || errors.Is(err, redis.Nil):
		return true, "", nil
	case isRefusal(err):
		if m := refusedCommand.FindStringSubmatch(err.Error()); m != nil && !strings.EqualFold(m[1], n.command) {
			return false, strings.ToLower(m[1]), nil
		}
		return false, "", nil
	case errors.As(err, &redisErr):
		return true, "", nil
	}
	return false, "", err
}
