package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/internal/monoclock"
)

// childEnv carries a child's configuration, as JSON, from the parent. The
// parent re-executes its own binary with it set; main (and the test
// binary's TestMain) run childMain when it is present.
const childEnv = "LOCKTORTURE_CHILD"

// childConfig is what one child process needs.
type childConfig struct {
	Proc       int           `json:"proc"`
	Redis      string        `json:"redis"`
	Resource   string        `json:"resource"`
	Goroutines int           `json:"goroutines"`
	Names      []string      `json:"names"`
	End        int64         `json:"end"` // monoclock.Now() after which no acquisition starts
	TTL        time.Duration `json:"ttl"`
	Work       time.Duration `json:"work"`
	Unfenced   bool          `json:"unfenced"` // no fences, no writes
}

// event is one line a child writes to stdout: "start" when a hold begins
// (so the parent knows whom to pause), "hold" with the complete record
// when it ends, and "miss" when an acquisition fails.
type event struct {
	Kind string `json:"kind"`
	Hold *hold  `json:"hold,omitempty"`
	Err  string `json:"err,omitempty"`
	// NotAcquired: the miss was ErrNotAcquired, not a Redis error.
	NotAcquired bool `json:"not_acquired,omitempty"`
}

// writeScript is the protected resource's only write: the fenced update
// the README tells users to make (WHERE fence < :fence), on a Redis hash,
// plus an append-only log of every attempt in the order the resource ran
// them, which the checker replays.
//
// KEYS[1] the resource hash (fields value, fence); KEYS[2] its log.
// ARGV[1] the writer's fence; ARGV[2] the value to store.
// Returns 1 accepted, 0 rejected (a newer fence has written).
var writeScript = redis.NewScript(`
local stored = tonumber(redis.call('HGET', KEYS[1], 'fence') or '0')
local fence = tonumber(ARGV[1])
if fence > stored then
  redis.call('HSET', KEYS[1], 'fence', ARGV[1], 'value', ARGV[2])
  redis.call('RPUSH', KEYS[2], ARGV[1])
  return 1
end
redis.call('RPUSH', KEYS[2], '-' .. ARGV[1])
return 0
`)

func resourceKey(name string) string    { return "resource:{" + name + "}" }
func resourceLogKey(name string) string { return "resource:{" + name + "}:log" }

// childMain runs one child: its goroutines contend for the names until
// cfg.End, and every hold is reported on out.
func childMain(raw string, out io.Writer) error {
	var cfg childConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		return fmt.Errorf("bad %s: %w", childEnv, err)
	}
	lockRDB := redis.NewClient(&redis.Options{Addr: cfg.Redis})
	defer lockRDB.Close()
	resourceRDB := redis.NewClient(&redis.Options{Addr: cfg.Resource})
	defer resourceRDB.Close()
	opts := []redislock.Option{redislock.WithLogger(slog.New(slog.DiscardHandler)),
		redislock.WithTTL(cfg.TTL),
		redislock.WithRetry(redislock.ExponentialBackoff(time.Millisecond, 20*time.Millisecond))}
	if !cfg.Unfenced {
		opts = append(opts, redislock.WithFencing())
	}
	locker := redislock.New(lockRDB, opts...)

	var mu sync.Mutex
	enc := json.NewEncoder(out)
	emit := func(e event) {
		mu.Lock()
		defer mu.Unlock()
		_ = enc.Encode(e)
	}
	var wg sync.WaitGroup
	for g := range cfg.Goroutines {
		rng := rand.New(rand.NewPCG(uint64(cfg.Proc), uint64(g)))
		wg.Go(func() {
			for monoclock.Now() < cfg.End {
				name := cfg.Names[rng.IntN(len(cfg.Names))]
				criticalSection(cfg, locker, resourceRDB, name, emit)
			}
		})
	}
	wg.Wait()
	return nil
}

// criticalSection takes the lock, reads the resource, works, writes with
// the fence, and releases, recording every step.
func criticalSection(cfg childConfig, locker *redislock.Client, resource *redis.Client, name string, emit func(event)) {
	waitCtx, cancel := context.WithTimeout(context.Background(), 2*time.Second+2*cfg.TTL)
	lock, err := locker.Acquire(waitCtx, name)
	cancel()
	if err != nil {
		emit(event{Kind: "miss", Err: err.Error(), NotAcquired: errors.Is(err, redislock.ErrNotAcquired)})
		return
	}
	h := &hold{Proc: cfg.Proc, Name: name, Fence: lock.Fence(), Acquired: monoclock.Now()}
	emit(event{Kind: "start"})

	// Stamp the loss signal as it fires (the lock's context ends with
	// ErrReleased, not a *LostError, when it was not lost first).
	signalled := make(chan struct{})
	var lostAt int64
	var lostReason string
	stopWatching := context.AfterFunc(lock.Context(), func() {
		defer close(signalled)
		at := monoclock.Now()
		var lost *redislock.LostError
		if errors.As(context.Cause(lock.Context()), &lost) {
			lostAt, lostReason = at, lost.Reason.String()
		}
	})

	ctx := lock.Context()
	if cfg.Unfenced {
		time.Sleep(cfg.Work) // no fence to write with: the hold's times are the record
	} else if ctx.Err() == nil {
		// Like real code, check the lock before starting the work...
		value, err := resource.HGet(ctx, resourceKey(name), "value").Int64()
		if err != nil && !errors.Is(err, redis.Nil) {
			h.WriteErr = "read: " + err.Error()
		} else {
			time.Sleep(cfg.Work) // the work itself
			// ...but not again before the write: a pause here is the
			// case fencing is for. The write is not bound to ctx, so a
			// holder that lost the lock still sends it.
			h.WriteSent = monoclock.Now()
			accepted, err := writeScript.Run(context.Background(), resource,
				[]string{resourceKey(name), resourceLogKey(name)}, lock.Fence(), strconv.FormatInt(value+1, 10)).Int64()
			h.WriteDone = monoclock.Now()
			if err != nil {
				h.WriteErr = "write: " + err.Error()
			}
			h.Accepted = accepted == 1
		}
	}

	h.Released = monoclock.Now()
	switch err := lock.Release(context.Background()); {
	case errors.Is(err, redislock.ErrNotHeld):
		h.ReleaseNotHeld = true
	case err != nil:
		h.ReleaseErr = err.Error()
	}
	if !stopWatching() {
		<-signalled // Release ended the context: the stamp is being taken
	}
	h.Lost, h.LostReason = lostAt, lostReason
	emit(event{Kind: "hold", Hold: h})
}

// runChildFromEnv runs child mode when the environment asks for it, and
// reports whether it did.
func runChildFromEnv() bool {
	raw, ok := os.LookupEnv(childEnv)
	if !ok {
		return false
	}
	if err := childMain(raw, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "locktorture child:", err)
		os.Exit(2)
	}
	return true
}
