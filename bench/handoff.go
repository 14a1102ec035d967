package bench

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// hold is one acquisition seen by the goroutine that made it. Times are
// nanoseconds on one clock shared by every holder: the monotonic clock
// inside one process, the wall clock (time.Now().UnixNano()) across
// processes on the same machine.
type hold struct {
	Holder      int   `json:"h"` // a number unique across processes
	AcquiredAt  int64 `json:"a"` // just after the acquire call returned
	ReleasingAt int64 `json:"r"` // just before the release call was sent
}

// handoffStats summarises a contended run.
type handoffStats struct {
	Acquisitions int
	// Handoffs are the gaps between one holder's release being sent and
	// the next holder's acquire returning, in acquisition order.
	Handoffs []time.Duration
	// Overlaps counts holds that began before the previous one was being
	// released: two holders at once, which must never happen.
	Overlaps int
	// PerHolder counts acquisitions per holder.
	PerHolder map[int]int
	// Span is the time from the first acquisition to the last release.
	Span time.Duration
}

// analyzeHolds orders holds by acquisition time and measures the gaps.
func analyzeHolds(holds []hold) handoffStats {
	sorted := slices.Clone(holds)
	slices.SortFunc(sorted, func(a, b hold) int { return cmpInt64(a.AcquiredAt, b.AcquiredAt) })
	stats := handoffStats{Acquisitions: len(sorted), PerHolder: map[int]int{}}
	for i, h := range sorted {
		stats.PerHolder[h.Holder]++
		if i == 0 {
			continue
		}
		gap := h.AcquiredAt - sorted[i-1].ReleasingAt
		if gap < 0 {
			stats.Overlaps++
			continue
		}
		stats.Handoffs = append(stats.Handoffs, time.Duration(gap))
	}
	if len(sorted) > 0 {
		last := slices.MaxFunc(sorted, func(a, b hold) int { return cmpInt64(a.ReleasingAt, b.ReleasingAt) })
		stats.Span = time.Duration(last.ReleasingAt - sorted[0].AcquiredAt)
	}
	slices.Sort(stats.Handoffs)
	return stats
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// percentile returns the q-th quantile (0 < q ≤ 1) of sorted durations by
// the nearest-rank method, or 0 when there are none.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(q*float64(len(sorted))+0.999999999) - 1
	return sorted[min(max(rank, 0), len(sorted)-1)]
}

// reportHandoffs reports the median and 99th percentile of handoffs
// (sorting them) in µs.
func reportHandoffs(b *testing.B, handoffs []time.Duration) {
	slices.Sort(handoffs)
	b.ReportMetric(float64(percentile(handoffs, 0.50).Nanoseconds())/1e3, "p50-handoff-µs")
	b.ReportMetric(float64(percentile(handoffs, 0.99).Nanoseconds())/1e3, "p99-handoff-µs")
}

// fairness returns the fewest acquisitions of any of holders divided by
// the most: 1 is perfectly even, 0 means someone starved. Holders with no
// acquisition at all count as zero.
func (s handoffStats) fairness(holders []int) float64 {
	least, most := -1, 0
	for _, h := range holders {
		n := s.PerHolder[h]
		if least < 0 || n < least {
			least = n
		}
		most = max(most, n)
	}
	if most == 0 {
		return 0
	}
	return float64(least) / float64(most)
}

// check reports a broken run: two holders at once.
func (s handoffStats) check() error {
	if s.Overlaps > 0 {
		return fmt.Errorf("%d of %d acquisitions overlapped the previous holder: mutual exclusion broken", s.Overlaps, s.Acquisitions)
	}
	return nil
}
