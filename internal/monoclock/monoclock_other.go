//go:build !linux

// Package monoclock reads a clock that every process on the machine
// shares, so that the stamps of different processes can be compared.
package monoclock

import "time"

// Name says which clock Now reads.
const Name = "wall clock (no shared monotonic clock on this OS: overlaps are approximate)"

// Now returns the wall clock in nanoseconds: on systems other than Linux
// there is no monotonic clock shared between processes, so a wall-clock
// step during a run can create or hide overlaps.
func Now() int64 { return time.Now().UnixNano() }
