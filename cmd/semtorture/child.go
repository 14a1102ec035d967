package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/internal/monoclock"
)

// childEnv carries a child's configuration from the parent, which
// re-executes its own binary with it set.
const childEnv = "SEMTORTURE_CHILD"

// runChildFromEnv runs the child when childEnv is set, and says so.
func runChildFromEnv() bool {
	raw, ok := os.LookupEnv(childEnv)
	if !ok {
		return false
	}
	var cfg config
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "semtorture child:", err)
		os.Exit(2)
	}
	child(cfg)
	return true
}

func child(cfg config) {
	rdb := redis.NewClient(&redis.Options{Addr: cfg.Redis})
	defer rdb.Close()
	c := redislock.New(rdb, redislock.WithFencing(), redislock.WithTTL(cfg.TTL),
		redislock.WithRetry(redislock.ExponentialBackoff(time.Millisecond, 20*time.Millisecond)),
		redislock.WithLogger(slog.New(slog.DiscardHandler)))
	unfenced := redislock.New(rdb, redislock.WithTTL(cfg.TTL), redislock.WithLogger(slog.New(slog.DiscardHandler)))
	var mu sync.Mutex
	out := json.NewEncoder(os.Stdout)
	var wg sync.WaitGroup
	for range cfg.Goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			holdOnce := holdOnce
			if cfg.Mode == "multi" {
				holdOnce = func(c, _ *redislock.Client, cfg config) (hold, bool) { return holdMulti(c, cfg) }
			}
			for monoclock.Now() < cfg.End {
				var h hold
				var ok bool
				if cfg.Mode == "shared" {
					h, ok = sharedHoldOnce(c, unfenced, cfg)
				} else {
					h, ok = holdOnce(c, unfenced, cfg)
				}
				if !ok {
					continue
				}
				mu.Lock()
				_ = out.Encode(h)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	_ = c.Close(context.Background())
	_ = unfenced.Close(context.Background())
}

// holdOnce takes a slot, writes while Valid says it is ours, and releases.
// A share of its attempts (aloneShare) neither wait nor fence, through
// unfenced: a free name is then taken by a lone holder's SET NX (see
// lua/semaphore_acquire.lua).
func holdOnce(c, unfenced *redislock.Client, cfg config) (hold, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if rand.Float64() < aloneShare {
		c = unfenced
	}
	l, err := c.AcquireSemaphore(ctx, cfg.Name, cfg.Limit)
	if err != nil {
		return hold{}, false
	}
	h := hold{Proc: os.Getpid(), Fence: l.Fence(), From: monoclock.Now()}
	for range cfg.Writes {
		time.Sleep(cfg.Work) // the work; a SIGSTOP may land anywhere here
		before := monoclock.Now()
		if !l.Valid() {
			h.Stale++ // the slot may be someone else's: the write is refused
			break
		}
		h.To = before
		h.Writes++
	}
	h.Lost = l.Context().Err() != nil && context.Cause(l.Context()) != redislock.ErrReleased
	_ = l.Release(context.Background())
	return h, true
}
