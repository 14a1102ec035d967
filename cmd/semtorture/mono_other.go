//go:build !linux

package main

import "time"

// clockName says which clock stamps the records.
const clockName = "wall clock (no shared monotonic clock on this OS: overlaps are approximate)"

// monoNow returns the wall clock in nanoseconds: on systems other than
// Linux the checker has no monotonic clock shared between processes, so a
// wall-clock step during a run can create or hide overlaps. Stale-write
// figures do not depend on it (they come from the resource's own log).
func monoNow() int64 { return time.Now().UnixNano() }
