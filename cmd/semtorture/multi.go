package main

// -mode multi checks Client.AcquireMulti: each goroutine takes a random
// subset of -names names (in a random order) as one lock, with fencing,
// and holds it as -mode semaphore holds a slot: -writes writes, each after
// -work and only after Lock.Valid said yes. Each write goes to a shared
// resource on the lock server that keeps, per name, the highest fence it
// accepted and turns away a lower one: a holder frozen (SIGSTOP) between
// Valid and its write comes back with a stale fence, and that write is
// rejected. A violation is two holds certainly inside one name at once
// (each hold's stretch measured as in -mode semaphore), or one name's
// fence handed out twice.

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/internal/monoclock"
)

// fencedWrite is the resource: KEYS its per-name records, ARGV the
// writer's fences, in the same order. Each record accepts a fence at least
// the last one it accepted. Returns how many were turned away.
var fencedWrite = redis.NewScript(`
local rejected = 0
for i = 1, #KEYS do
  local last = tonumber(redis.call('GET', KEYS[i]) or '0')
  if tonumber(ARGV[i]) < last then
    rejected = rejected + 1
  else
    redis.call('SET', KEYS[i], ARGV[i])
  end
end
return rejected`)

var (
	resourceOnce sync.Once
	resource     *redis.Client // the child's connection for the resource's writes
)

// pickNames returns a random non-empty subset of the -names names, in a
// random order: callers with overlapping sets in every order.
func pickNames(cfg config) []string {
	var names []string
	for len(names) == 0 {
		for i := range cfg.Names {
			if rand.IntN(2) == 0 {
				names = append(names, fmt.Sprintf("%s:%d", cfg.Name, i))
			}
		}
	}
	rand.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
	return names
}

// holdMulti takes a random subset of names as one lock, writes while
// Valid says it is ours, and releases.
func holdMulti(c *redislock.Client, cfg config) (hold, bool) {
	resourceOnce.Do(func() { resource = redis.NewClient(&redis.Options{Addr: cfg.Redis}) })
	names := pickNames(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	l, err := c.AcquireMulti(ctx, names)
	if err != nil {
		return hold{}, false
	}
	h := hold{Proc: os.Getpid(), Fence: l.Fence(), Names: names, From: monoclock.Now()}
	keys, fences := make([]string, len(names)), make([]any, len(names))
	for i, name := range names {
		fence, _ := l.FenceOf(name)
		h.Fences = append(h.Fences, fence)
		keys[i], fences[i] = "semtorture:resource:"+name, fence
	}
	for range cfg.Writes {
		time.Sleep(cfg.Work) // the work; a SIGSTOP may land anywhere here
		before := monoclock.Now()
		if !l.Valid() {
			h.Stale++ // the lock may be someone else's: the write is refused
			break
		}
		// A SIGSTOP here, between Valid and the write, makes it stale:
		// the resource's fence check is what turns it away.
		rejected, err := fencedWrite.Run(context.Background(), resource, keys, fences...).Int()
		if err != nil {
			break
		}
		h.To = before
		h.Writes++
		h.Rejected += rejected
	}
	h.Lost = l.Context().Err() != nil && context.Cause(l.Context()) != redislock.ErrReleased
	_ = l.Release(context.Background())
	return h, true
}

// analyzeMulti sweeps, name by name, the stretches of the holds that
// include it: at every start, at most one may be open. A fence handed out
// twice for one name is a violation too.
func analyzeMulti(holds []hold) summary {
	type edge struct {
		at    int64
		delta int
	}
	var s summary
	edges := map[string][]edge{}
	fences := map[string]map[int64]bool{}
	for _, h := range holds {
		s.Holds++
		s.Writes += h.Writes
		s.Stale += h.Stale
		s.Rejected += h.Rejected
		if h.Lost {
			s.Lost++
		}
		for i, name := range h.Names {
			if fences[name] == nil {
				fences[name] = map[int64]bool{}
			}
			if i < len(h.Fences) {
				if fences[name][h.Fences[i]] {
					s.RepeatedFences++
				}
				fences[name][h.Fences[i]] = true
			}
			if h.To > h.From {
				edges[name] = append(edges[name], edge{h.From, 1}, edge{h.To, -1})
			}
		}
	}
	for _, es := range edges {
		// Ends before starts at one instant: touching stretches do not overlap.
		sort.Slice(es, func(i, j int) bool {
			return es[i].at < es[j].at || es[i].at == es[j].at && es[i].delta < es[j].delta
		})
		inside := 0
		for _, e := range es {
			inside += e.delta
			s.MaxInside = max(s.MaxInside, inside)
			if e.delta > 0 && inside > 1 {
				s.Violations++
			}
		}
	}
	return s
}

func (s summary) printMulti(w io.Writer, cfg config) {
	verdict := "OK"
	if !s.ok() {
		verdict = "FAILED"
	}
	fmt.Fprintf(w, "semtorture -mode multi: %d procs x %d goroutines, random subsets of %d names, %v, TTL %v, %d pauses of %v (%s)\n",
		cfg.Procs, cfg.Goroutines, cfg.Names, cfg.Duration, cfg.TTL, s.Pauses, cfg.PauseFor, monoclock.Name)
	fmt.Fprintf(w, "holds %d, writes %d, most inside one name at once %d, violations %d, repeated fences %d, stale writes refused by Valid %d, stale fenced writes rejected by the resource %d, locks lost %d: %s\n",
		s.Holds, s.Writes, s.MaxInside, s.Violations, s.RepeatedFences, s.Stale, s.Rejected, s.Lost, verdict)
}
