//go:build linux

// Package monoclock reads a clock that every process on the machine
// shares, so that the stamps of different processes (the checkers'
// children, the fault tests' holders) can be compared with one another.
package monoclock

import (
	"syscall"
	"unsafe"
)

// Name says which clock Now reads.
const Name = "CLOCK_MONOTONIC"

// Now returns CLOCK_MONOTONIC in nanoseconds. Unlike the monotonic
// reading inside a time.Time, which Go counts from the start of each
// process, this clock is shared by every process on the machine. (The
// standard library has no clock_gettime wrapper on Linux, and the core
// module may not depend on golang.org/x/sys, hence the raw system call.)
func Now() int64 {
	var ts syscall.Timespec
	const clockMonotonic = 1
	if _, _, errno := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockMonotonic, uintptr(unsafe.Pointer(&ts)), 0); errno != 0 {
		panic("clock_gettime(CLOCK_MONOTONIC): " + errno.Error())
	}
	return ts.Nano()
}
