package podproc

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// Timeline prints lines stamped with the seconds since a start that every
// pod shares, and keeps them for tests; safe for concurrent use.
type Timeline struct {
	mu    sync.Mutex
	out   io.Writer
	start time.Time
	lines []string
}

// NewTimeline returns a Timeline that writes to out and counts from start.
func NewTimeline(out io.Writer, start time.Time) *Timeline {
	return &Timeline{out: out, start: start}
}

// Start is the instant the timeline counts from.
func (t *Timeline) Start() time.Time { return t.start }

// Say prints one line for who.
func (t *Timeline) Say(who, format string, args ...any) {
	t.Print(fmt.Sprintf("%6.2fs  %-7s %s\n", time.Since(t.start).Seconds(), who, fmt.Sprintf(format, args...)))
}

// Print writes line as it is.
func (t *Timeline) Print(line string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lines = append(t.lines, strings.TrimSuffix(line, "\n"))
	fmt.Fprint(t.out, line)
}

// Lines returns the lines printed so far, in order.
func (t *Timeline) Lines() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]string(nil), t.lines...)
}
