package main

// -mode shared: goroutines take, at random, exclusive holds (Acquire) and
// shared holds (AcquireShared) of one lock. A violation is a moment when
// two exclusive holders, or an exclusive holder and any shared holder,
// were certainly inside at once. The fences are checked as a fenced
// resource would: an exclusive hold certainly after another hold must
// carry a higher fence than it, and a shared hold certainly after an
// exclusive one a higher fence too (shared holders of one epoch share a
// fence); anything else is a fence inversion.

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"sort"
	"time"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/internal/monoclock"
)

// exclusiveShare is the share of exclusive holds among attempts;
// aloneShare the share of shared attempts that do not wait nor fence,
// which take a free name with one SET NX (a lone reader's hold, see
// lua/shared_acquire.lua), through unfenced.
const exclusiveShare, aloneShare = 0.3, 0.3

// sharedHoldOnce takes an exclusive or a shared hold, writes while Valid
// says it is ours, and releases.
func sharedHoldOnce(c, unfenced *redislock.Client, cfg config) (hold, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	shared := rand.Float64() >= exclusiveShare
	acquire := c.Acquire
	switch {
	case shared && rand.Float64() < aloneShare:
		acquire = unfenced.AcquireShared
	case shared:
		acquire = c.AcquireShared
	}
	l, err := acquire(ctx, cfg.Name)
	if err != nil {
		return hold{}, false
	}
	h := hold{Proc: os.Getpid(), Fence: l.Fence(), From: monoclock.Now(), Shared: shared}
	for range cfg.Writes {
		time.Sleep(cfg.Work) // the work; a SIGSTOP may land anywhere here
		before := monoclock.Now()
		if !l.Valid() {
			h.Stale++ // the hold may have ended: the write is refused
			break
		}
		h.To = before
		h.Writes++
	}
	h.Lost = l.Context().Err() != nil && context.Cause(l.Context()) != redislock.ErrReleased
	_ = l.Release(context.Background())
	return h, true
}

// analyzeShared sweeps the holds' certain stretches in clock order,
// counting exclusive and shared holders inside, and checks the fences.
func analyzeShared(holds []hold) summary {
	type edge struct {
		at        int64
		delta     int
		exclusive bool
	}
	var s summary
	var edges []edge
	exclusiveFences := map[int64]bool{}
	var confirmed []hold
	for _, h := range holds {
		s.Holds++
		s.Writes += h.Writes
		s.Stale += h.Stale
		if h.Lost {
			s.Lost++
		}
		if h.Shared {
			s.Shared++
		} else {
			if exclusiveFences[h.Fence] {
				s.RepeatedFences++
			}
			exclusiveFences[h.Fence] = true
		}
		if h.To > h.From {
			edges = append(edges, edge{h.From, 1, !h.Shared}, edge{h.To, -1, !h.Shared})
			confirmed = append(confirmed, h)
		}
	}
	sort.Slice(edges, func(i, j int) bool {
		return edges[i].at < edges[j].at || edges[i].at == edges[j].at && edges[i].delta < edges[j].delta
	})
	exclusive, shared := 0, 0
	for _, e := range edges {
		if e.exclusive {
			exclusive += e.delta
		} else {
			shared += e.delta
		}
		s.MaxInside = max(s.MaxInside, shared)
		if e.delta > 0 && (exclusive > 1 || exclusive == 1 && shared > 0) {
			s.Violations++
		}
	}
	s.FenceInversions = fenceInversions(confirmed)
	return s
}

// fenceInversions counts the pairs of certain stretches, one ending before
// the other starts with at least one of them exclusive, whose fences do
// not rise strictly: what a fenced resource would have to reject and a
// correct lock never hands out. Also fences shared by exclusive and
// shared holds. Quadratic in the holds, fine for a checker's thousands.
func fenceInversions(holds []hold) int {
	sort.Slice(holds, func(i, j int) bool { return holds[i].To < holds[j].To })
	n := 0
	for i, earlier := range holds {
		for _, later := range holds[i+1:] {
			// (an unfenced hold, fence 0, is checked for overlaps only)
			if later.From <= earlier.To || earlier.Shared && later.Shared || earlier.Fence == 0 || later.Fence == 0 {
				continue
			}
			if later.Fence <= earlier.Fence {
				n++
			}
		}
	}
	return n
}

func (s summary) printShared(w io.Writer, cfg config, verdict string) {
	fmt.Fprintf(w, "semtorture -mode shared: %d procs x %d goroutines, %.0f%% exclusive, %v, TTL %v, %d pauses of %v (%s)\n",
		cfg.Procs, cfg.Goroutines, exclusiveShare*100, cfg.Duration, cfg.TTL, s.Pauses, cfg.PauseFor, monoclock.Name)
	fmt.Fprintf(w, "holds %d (%d shared), writes %d, most shared inside at once %d, violations %d, repeated exclusive fences %d, fence inversions %d, stale writes rejected %d, holds lost %d: %s\n",
		s.Holds, s.Shared, s.Writes, s.MaxInside, s.Violations, s.RepeatedFences, s.FenceInversions, s.Stale, s.Lost, verdict)
}
