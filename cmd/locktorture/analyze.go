package main

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redislock/redislock/internal/monoclock"
)

// hold is one critical section, as a child recorded it. Times are
// nanoseconds on the machine's shared monotonic clock (see monoNow).
type hold struct {
	Proc  int    `json:"proc"`
	Name  string `json:"name"`
	Fence int64  `json:"fence"`
	// Acquired is when the acquire reply was received; Released when the
	// release was about to be sent (Release stops the watchdog first, so
	// the DEL goes out a little later: the recorded interval is never
	// longer than the real one).
	Acquired int64 `json:"acquired"`
	Released int64 `json:"released"`
	// Lost is when the lock's context was cancelled by a loss (0: it was
	// not lost before the release), LostReason why.
	Lost       int64  `json:"lost,omitempty"`
	LostReason string `json:"lost_reason,omitempty"`
	// WriteSent and WriteDone bracket the fenced write (0: no write, the
	// context was already cancelled before the read). Accepted says
	// whether the resource took it.
	WriteSent  int64  `json:"write_sent,omitempty"`
	WriteDone  int64  `json:"write_done,omitempty"`
	Accepted   bool   `json:"accepted,omitempty"`
	WriteErr   string `json:"write_err,omitempty"`
	ReleaseErr string `json:"release_err,omitempty"`
	// ReleaseNotHeld: the release found the key gone or someone else's.
	ReleaseNotHeld bool `json:"release_not_held,omitempty"`
}

// pause is one SIGSTOP/SIGCONT of a child by the parent.
type pause struct {
	Proc    int   `json:"proc"`
	Stopped int64 `json:"stopped"`
	Resumed int64 `json:"resumed"`
}

// resourceState is what the resource server holds for one name at the end:
// the value, and its log of write attempts in the order it ran them
// (positive fence: accepted; negative: rejected).
type resourceState struct {
	Value int64
	Log   []int64
}

// Summary is the checker's verdict on a run.
type Summary struct {
	Clock        string        `json:"clock"`
	Procs        int           `json:"procs"`
	Goroutines   int           `json:"goroutines"`
	Names        int           `json:"names"`
	TTL          time.Duration `json:"ttl_ns"`
	Duration     time.Duration `json:"duration_ns"`
	Pauses       int           `json:"pauses"`
	Acquisitions int           `json:"acquisitions"`
	NotAcquired  int           `json:"not_acquired"`
	AcquireErrs  int           `json:"acquire_errors"`
	// Overlaps counts holds that began while another hold of the same
	// name had not ended ([acquire reply received, release sent]).
	Overlaps int `json:"overlaps"`
	// UnsignalledOverlaps counts those that began before the earlier
	// holder's loss signal: two holders that both believed they held the
	// lock. Only a paused process can produce them.
	UnsignalledOverlaps int `json:"unsignalled_overlaps"`
	Writes              int `json:"writes"`
	WritesAccepted      int `json:"writes_accepted"`
	// StaleWritesAttempted counts writes sent after a newer fence of the
	// same name had been handed out (its acquire reply received).
	StaleWritesAttempted int `json:"stale_writes_attempted"`
	// StaleWritesRejected counts those the resource rejected.
	StaleWritesRejected int `json:"stale_writes_rejected"`
	// StaleWritesAccepted counts writes the resource accepted although it
	// had already accepted a write with a newer (or equal) fence: the harm
	// fencing exists to prevent. It must be 0.
	StaleWritesAccepted int `json:"stale_writes_accepted"`
	// LateWritesAccepted counts stale attempts the resource accepted
	// because the newer holder had not written yet: the resource's order
	// (old fence, then new) is still the fence order, but a newer holder
	// that read before the late write overwrites it (see LostUpdates).
	LateWritesAccepted int `json:"late_writes_accepted"`
	// LostUpdates is accepted increments minus the final counters: updates
	// a later holder overwrote because it read before they landed.
	LostUpdates int            `json:"lost_updates"`
	Lost        map[string]int `json:"lost_by_reason"`
	ReleaseErrs int            `json:"release_errors"`
	// ReleaseNotHeld counts releases that found the lock no longer ours.
	ReleaseNotHeld int `json:"release_not_held"`
	WriteErrs      int `json:"write_errors"`
	// MaxResumeToLoss is, over every pause that caught a holder, the
	// longest time from SIGCONT to that holder's loss signal (0 when the
	// context was already cancelled as the process resumed).
	MaxResumeToLoss time.Duration `json:"max_resume_to_loss_ns"`
	PausedHolders   int           `json:"paused_holders"`
	Failures        []string      `json:"failures,omitempty"`
}

// analyze checks a run's records against the resource's final state.
func analyze(holds []hold, pauses []pause, resource map[string]resourceState, notAcquired, acquireErrs int) Summary {
	s := Summary{Clock: monoclock.Name, Pauses: len(pauses), Acquisitions: len(holds),
		NotAcquired: notAcquired, AcquireErrs: acquireErrs, Lost: map[string]int{}}

	byName := map[string][]hold{}
	for _, h := range holds {
		byName[h.Name] = append(byName[h.Name], h)
		if h.Lost != 0 {
			s.Lost[h.LostReason]++
		}
		if h.ReleaseErr != "" {
			s.ReleaseErrs++
		}
		if h.ReleaseNotHeld {
			s.ReleaseNotHeld++
		}
		if h.WriteErr != "" {
			s.WriteErrs++
		}
	}
	names := make([]string, 0, len(byName))
	for name := range byName {
		names = append(names, name)
	}
	sort.Strings(names)

	for _, name := range names {
		hs := byName[name]
		s.Overlaps += countOverlaps(hs, func(h hold) int64 { return h.Released })
		s.UnsignalledOverlaps += countOverlaps(hs, func(h hold) int64 {
			if h.Lost != 0 && h.Lost < h.Released {
				return h.Lost
			}
			return h.Released
		})
		overwrote := checkWrites(&s, hs)
		accepted := 0
		for _, h := range hs {
			if h.WriteSent != 0 && h.Accepted {
				accepted++
			}
		}
		state := resource[name]
		// The resource's log and the stamps see the same events two ways:
		// count whichever finds more.
		s.StaleWritesAccepted += max(staleInResourceLog(state.Log), overwrote)
		s.LostUpdates += accepted - int(state.Value)
	}

	for _, h := range holds {
		caught, lastResume := false, int64(0)
		for _, p := range pauses {
			if p.Proc != h.Proc || h.Acquired > p.Stopped || h.Released < p.Stopped {
				continue
			}
			// h was held when its process stopped.
			caught = true
			if h.Lost >= p.Resumed {
				lastResume = max(lastResume, p.Resumed)
			}
		}
		if !caught {
			continue
		}
		s.PausedHolders++
		// The signal counts from the last resume before it: a process
		// can be stopped again before its timers had a chance to run.
		if h.Lost != 0 && lastResume != 0 {
			s.MaxResumeToLoss = max(s.MaxResumeToLoss, time.Duration(h.Lost-lastResume))
		}
	}
	return s
}

// countOverlaps counts holds that began before an earlier-begun hold of the
// same name had ended, with end giving each hold's end.
func countOverlaps(hs []hold, end func(hold) int64) int {
	sorted := slices.Clone(hs)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Acquired < sorted[j].Acquired })
	overlaps := 0
	var latestEnd int64
	for i, h := range sorted {
		if i > 0 && h.Acquired < latestEnd {
			overlaps++
		}
		latestEnd = max(latestEnd, end(h))
	}
	return overlaps
}

// checkWrites classifies the writes of one name by the client-side stamps:
// a write sent after a newer fence's acquire reply is a stale attempt; one
// the resource accepted after a newer write had been confirmed is a stale
// write accepted, returned rather than added (the resource log is checked
// for the same, in its own order, by staleInResourceLog).
func checkWrites(s *Summary, hs []hold) (staleAccepted int) {
	for _, w := range hs {
		if w.WriteSent == 0 || w.WriteErr != "" {
			continue
		}
		s.Writes++
		if w.Accepted {
			s.WritesAccepted++
		}
		stale, overwrote := false, false
		for _, other := range hs {
			if other.Fence <= w.Fence {
				continue
			}
			if other.Acquired < w.WriteSent {
				stale = true
			}
			if other.Accepted && other.WriteDone != 0 && other.WriteDone < w.WriteSent {
				overwrote = true
			}
		}
		if !stale {
			continue
		}
		s.StaleWritesAttempted++
		switch {
		case !w.Accepted:
			s.StaleWritesRejected++
		case overwrote:
			staleAccepted++
		default:
			s.LateWritesAccepted++
		}
	}
	return staleAccepted
}

// staleInResourceLog counts accepted writes whose fence was not above every
// fence the resource had accepted before: it must find none if the
// resource's fence check works.
func staleInResourceLog(log []int64) int {
	stale := 0
	var highest int64
	for _, f := range log {
		if f <= 0 {
			continue // a rejected attempt
		}
		if f <= highest {
			stale++
		}
		highest = max(highest, f)
	}
	return stale
}

// verdict fills s.Failures: what makes the run fail.
func (s *Summary) verdict() {
	s.Failures = nil
	if s.Acquisitions == 0 {
		s.Failures = append(s.Failures, "no acquisition at all")
	}
	if s.StaleWritesAccepted > 0 {
		s.Failures = append(s.Failures, fmt.Sprintf("%d stale writes accepted", s.StaleWritesAccepted))
	}
	if s.Pauses == 0 {
		// Without faults the lock alone must keep holders apart.
		if s.Overlaps > 0 {
			s.Failures = append(s.Failures, fmt.Sprintf("%d overlaps with no fault injected", s.Overlaps))
		}
		if s.StaleWritesAttempted > 0 {
			s.Failures = append(s.Failures, fmt.Sprintf("%d stale writes attempted with no fault injected", s.StaleWritesAttempted))
		}
		if s.LostUpdates != 0 {
			s.Failures = append(s.Failures, fmt.Sprintf("%d lost updates with no fault injected", s.LostUpdates))
		}
	}
}

// printTable writes the summary for people.
func (s Summary) printTable(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k string, v any) { fmt.Fprintf(tw, "%s\t%v\n", k, v) }
	row("processes x goroutines", fmt.Sprintf("%d x %d over %d names", s.Procs, s.Goroutines, s.Names))
	row("ttl / duration", fmt.Sprintf("%v / %v", s.TTL, s.Duration))
	row("clock", s.Clock)
	row("pauses injected (holders caught)", fmt.Sprintf("%d (%d)", s.Pauses, s.PausedHolders))
	row("acquisitions", s.Acquisitions)
	row("not acquired / acquire errors", fmt.Sprintf("%d / %d", s.NotAcquired, s.AcquireErrs))
	row("overlaps (unsignalled)", fmt.Sprintf("%d (%d)", s.Overlaps, s.UnsignalledOverlaps))
	row("writes (accepted)", fmt.Sprintf("%d (%d)", s.Writes, s.WritesAccepted))
	row("stale writes attempted", s.StaleWritesAttempted)
	row("stale writes rejected", s.StaleWritesRejected)
	row("STALE WRITES ACCEPTED", s.StaleWritesAccepted)
	row("late writes accepted", s.LateWritesAccepted)
	row("lost updates", s.LostUpdates)
	var reasons []string
	for reason, n := range s.Lost {
		reasons = append(reasons, fmt.Sprintf("%s: %d", reason, n))
	}
	sort.Strings(reasons)
	row("lost-lock signals", strings.Join(append([]string{}, reasons...), ", "))
	row("max SIGCONT -> loss signal", s.MaxResumeToLoss)
	row("releases that found the lock gone", s.ReleaseNotHeld)
	row("release / write errors", fmt.Sprintf("%d / %d", s.ReleaseErrs, s.WriteErrs))
	if len(s.Failures) == 0 {
		row("verdict", "PASS")
	} else {
		row("verdict", "FAIL: "+strings.Join(s.Failures, "; "))
	}
	_ = tw.Flush()
}
