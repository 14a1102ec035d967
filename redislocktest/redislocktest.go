// Package redislocktest lets you test the lost-lock and contention paths of
// your own code without a Redis server: an in-memory Redis (miniredis)
// wired to a *redislock.Client, and helpers that expire, steal or delete a
// held lock, or move the server's clock.
//
// A test creates an [Env] with [New], runs the code under test with
// Env.Client, and breaks the lock from the outside:
//
//	env := redislocktest.New(t)
//	go job.Run(ctx, env.Client)  // takes "report" and works under its context
//	env.Steal("report")          // another holder takes it
//	// the job's context is cancelled with a *redislock.LostError (Taken)
//
// The helpers work on every kind of lock: Acquire's, Elect's, a shared
// lock's and a semaphore's (Expire and Steal end every holder of the last
// two at once; Holder names the one whose lease ends first).
//
// The watchdog of a held lock runs on real time, not on the server's clock:
// it notices a broken lock at its next extension. So that this takes
// milliseconds, an Env's client extends every DefaultExtendInterval (10ms)
// unless the options given to New say otherwise.
//
// # FastForward or Client.Break
//
// Both end a lock from the outside, in different stories:
//
//   - Env.FastForward(d) is time passing on the server: every lease shorter
//     than d runs out, as when a holder crashed, froze or had too short a
//     TTL. Nothing is released or announced: holders learn at their next
//     extension (redislock.Expired), waiters find the lock free at their
//     next attempt, Client.ObserveLeader at its next read (when the lease it
//     saw ends, on real time). Use it to test
//     what your code does when its holder dies or pauses, and for TTLs and
//     deadlines. Env.Expire is the same for one lock, at once.
//   - Env.Client.Break(ctx, name) is an operator's break (redislock break):
//     the lock ends at once for every holder and passes on as a release
//     would, handed to the first waiter in line or announced, so a waiting
//     caller (or an Elect campaign) gets in at once and observers hear it;
//     the holders learn at their next extension. Use it to test a forced
//     takeover, or an operator's runbook.
//
// Env.Steal is a third story: another holder owns the lock (redislock.Taken).
package redislocktest

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/internal/lockrules"
)

// DefaultExtendInterval is the watchdog interval of an Env's client unless
// the options given to New set one: short, so that a lock broken by Expire,
// Steal, Delete or FastForward is noticed within milliseconds.
const DefaultExtendInterval = 10 * time.Millisecond

// TB is the part of testing.TB that an Env uses; *testing.T, *testing.B and
// *testing.F satisfy it.
type TB interface {
	Helper()
	Cleanup(func())
	Fatalf(format string, args ...any)
}

// Env is an in-memory Redis with a redislock client on it, for one test. Its
// fields are ready to use; its methods fail the test (Fatalf) when Redis
// refuses them. It is safe for concurrent use.
type Env struct {
	// Client takes locks on Mini, with the options given to New.
	Client *redislock.Client
	// Redis is a go-redis client on Mini, for the code under test and for
	// looking at keys.
	Redis *redis.Client
	// Mini is the in-memory server, for what the helpers do not cover
	// (SetError to make Redis fail, for instance).
	Mini *miniredis.Miniredis

	t      TB
	prefix string
}

// New starts an in-memory Redis and returns an Env on it; everything is
// closed in t.Cleanup. opts configure Env.Client as they would
// redislock.New, after the Env's defaults: logging off (pass
// redislock.WithLogger to see the logs) and DefaultExtendInterval (pass
// redislock.WithExtendInterval(0) for the library's TTL/3). A key prefix
// set with redislock.WithKeyPrefix is respected by the helpers. Invalid
// options fail the test.
//
// The server's clock does not move by itself: keys expire only through
// Expire, FastForward, or Mini.ClockTTL(true), which makes TTLs follow real
// time as on a real server.
func New(t TB, opts ...redislock.Option) *Env {
	t.Helper()
	mini := miniredis.NewMiniRedis()
	if err := mini.Start(); err != nil {
		t.Fatalf("redislocktest: starting miniredis: %v", err)
	}
	t.Cleanup(mini.Close)
	rdb := redis.NewClient(&redis.Options{Addr: mini.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })

	all := append([]redislock.Option{
		redislock.WithLogger(slog.New(slog.DiscardHandler)),
		redislock.WithExtendInterval(DefaultExtendInterval),
	}, opts...)
	env := &Env{Client: redislock.New(rdb, all...), Redis: rdb, Mini: mini, t: t}
	prefix, err := keyPrefix(rdb, all)
	if err != nil {
		t.Fatalf("redislocktest: %v", err)
		prefix = redislock.DefaultKeyPrefix
	}
	env.prefix = prefix
	return env
}

// keyPrefix finds the key prefix that opts give, by taking and releasing a
// lock on the Env's own server with events and fencing out of the way: the
// options are sealed, so the key of a lock is the only way to read it.
func keyPrefix(rdb *redis.Client, opts []redislock.Option) (string, error) {
	const probe = "redislocktest-probe"
	probeOpts := append(append([]redislock.Option(nil), opts...),
		redislock.WithObserver(nil), redislock.WithLogger(slog.New(slog.DiscardHandler)),
		redislock.WithWatchdog(false), redislock.WithRetry(redislock.NoRetry()))
	ctx := context.Background()
	lock, err := redislock.New(rdb).Acquire(ctx, probe, probeOpts...)
	if err != nil {
		return "", err
	}
	key := lock.Key()
	if err := lock.Release(ctx); err != nil {
		return "", err
	}
	// WithFencing may have created a counter: leave the server empty.
	if err := rdb.Del(ctx, lockrules.Fence(key)).Err(); err != nil {
		return "", err
	}
	return strings.TrimSuffix(key, "{"+probe+"}"), nil
}

// Key returns the Redis key of the lock called name: prefix + "{" + name +
// "}", the layout of internal/lockrules that the library uses. For a name
// the library refuses it returns prefix + "{" + name + "}" all the same:
// no lock can be held there.
func (e *Env) Key(name string) string {
	key, err := lockrules.Lock(e.prefix, name)
	if err != nil {
		return e.prefix + "{" + name + "}"
	}
	return key
}

// Holder returns the token of a holder of the lock called name and true,
// or "" and false when nobody holds it: the exclusive holder's, or, for a
// shared lock or a semaphore, the token of the holder whose lease ends
// first. Compare with Lock.Token (a holder's metadata, which the server
// keeps after the token, is left out: read it with Client.Inspect).
func (e *Env) Holder(name string) (token string, held bool) {
	e.t.Helper()
	_, tokens := e.holders(name)
	if len(tokens) == 0 {
		return "", false
	}
	return tokens[0], true
}

// holders returns the key of the lock called name and its holders'
// tokens, the first lease to end first, whatever kind holds it (see
// internal/lockrules): the key's value (an exclusive lock), the live
// members of its shared holders' set (the value is then the shared
// marker), or of the key itself (a semaphore, a sorted set). It fails the
// test for a key of another type, or when Redis fails.
func (e *Env) holders(name string) (key string, tokens []string) {
	e.t.Helper()
	ctx := context.Background()
	key = e.Key(name)
	kind, err := e.Redis.Type(ctx, key).Result()
	var value string
	if err == nil && kind == "string" {
		value, err = e.Redis.Get(ctx, key).Result()
	}
	if err != nil && err != redis.Nil {
		e.t.Fatalf("redislocktest: reading %s: %v", key, err)
		return key, nil
	}
	set := key
	switch {
	case kind == "none" || err == redis.Nil:
		return key, nil
	case kind == "string" && !strings.HasPrefix(value, lockrules.SharedMarker):
		token, _, _ := strings.Cut(value, lockrules.MetadataSeparator)
		return key, []string{token}
	case kind == "string":
		set = lockrules.Shared(key)
	case kind != "zset":
		e.t.Fatalf("redislocktest: %s holds a %s, not a lock", key, kind)
		return key, nil
	}
	// Holders are scored by the end of their lease on the server's clock
	// (ms); the ended ones may not be gone yet.
	now, err := e.Redis.Time(ctx).Result()
	if err == nil {
		live := &redis.ZRangeBy{Min: "(" + strconv.FormatInt(now.UnixMilli(), 10), Max: "+inf"}
		tokens, err = e.Redis.ZRangeByScore(ctx, set, live).Result()
	}
	if err != nil {
		e.t.Fatalf("redislocktest: reading %s: %v", set, err)
	}
	for i, member := range tokens {
		tokens[i], _, _ = strings.Cut(member, lockrules.MetadataSeparator)
	}
	return key, tokens
}

// Expire ends the lease of the lock called name now, as if its TTL had run
// out while the holder was paused: every holder of a shared lock or a
// semaphore loses it too (PEXPIRE 0 on the lock's keys but its fence
// counter and queue). The holders' watchdogs notice at their next
// extension and cancel the locks' contexts with reason redislock.Expired.
// No release is announced: waiters see the lock free at their next
// attempt. It fails the test when nobody holds the lock.
func (e *Env) Expire(name string) {
	e.t.Helper()
	key, ok := e.mustBeHeld(name)
	if !ok {
		return
	}
	// A non-positive expiry removes a key at once, through its expiry, all
	// in one transaction, so that no watchdog extends them in between.
	_, err := e.Redis.TxPipelined(context.Background(), func(pipe redis.Pipeliner) error {
		for _, k := range []string{key, lockrules.Shared(key), key + lockrules.LimitSuffix} {
			pipe.PExpire(context.Background(), k, 0)
		}
		return nil
	})
	if err != nil {
		e.t.Fatalf("redislocktest: expiring %s: %v", key, err)
	}
}

// Delete deletes the lock called name, as an operator running DEL would.
// The holders' watchdogs notice at their next extension and cancel the
// locks' contexts with reason redislock.Expired (a gone key looks the same
// however it went). It fails the test when nobody holds the lock.
func (e *Env) Delete(name string) {
	e.t.Helper()
	if key, ok := e.mustBeHeld(name); ok {
		e.Mini.Del(key)
	}
}

// Steal makes another holder own the lock called name, as if the lease had
// expired and another instance had acquired it: the key gets a new token,
// which Steal returns, and keeps its TTL; a shared lock's or a semaphore's
// holders are all replaced by that one exclusive holder. The holders'
// watchdogs notice at their next extension and cancel the locks' contexts
// with reason redislock.Taken; the thief's key is left alone (Release
// reports redislock.ErrNotHeld). It fails the test when nobody holds the
// lock.
func (e *Env) Steal(name string) (token string) {
	e.t.Helper()
	key, ok := e.mustBeHeld(name)
	if !ok {
		return ""
	}
	token = "stolen-by-redislocktest"
	ctx := context.Background()
	// SET replaces a value of any type (a semaphore's set of holders).
	_, err := e.Redis.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		pipe.SetArgs(ctx, key, token, redis.SetArgs{KeepTTL: true})
		pipe.Del(ctx, lockrules.Shared(key), key+lockrules.LimitSuffix)
		return nil
	})
	if err != nil {
		e.t.Fatalf("redislocktest: stealing %s: %v", key, err)
	}
	return token
}

// FastForward moves the server's clock by d: every TTL shrinks by d and the
// keys whose TTL runs out expire (locks, fence counters have none). It
// does not move Go's clock: a holder's watchdog, safe deadline, maximum
// hold and retry backoff run on real time. So a held lock whose TTL is
// shorter than d expires on the server and its holder learns it at its next
// extension (reason redislock.Expired), and a waiter sees a freed lock at
// its next attempt.
func (e *Env) FastForward(d time.Duration) {
	e.Mini.FastForward(d)
}

// mustBeHeld returns the key of the lock called name, or fails the test and
// returns false when nobody holds it.
func (e *Env) mustBeHeld(name string) (string, bool) {
	e.t.Helper()
	if _, held := e.Holder(name); !held {
		e.t.Fatalf("redislocktest: nobody holds the lock %q (key %s)", name, e.Key(name))
		return "", false
	}
	return e.Key(name), true
}
