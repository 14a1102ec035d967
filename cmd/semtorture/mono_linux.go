//go:build linux

package main

import (
	"syscall"
	"unsafe"
)

// clockName says which clock stamps the records.
const clockName = "CLOCK_MONOTONIC"

// monoNow returns CLOCK_MONOTONIC in nanoseconds. Unlike the monotonic
// reading inside a time.Time, which Go counts from the start of each
// process, this clock is shared by every process on the machine, so the
// stamps of different children can be compared with one another. (The
// standard library has no clock_gettime wrapper on Linux, and the core
// module may not depend on golang.org/x/sys, hence the raw system call.)
func monoNow() int64 {
	var ts syscall.Timespec
	const clockMonotonic = 1
	if _, _, errno := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockMonotonic, uintptr(unsafe.Pointer(&ts)), 0); errno != 0 {
		panic("semtorture: clock_gettime(CLOCK_MONOTONIC): " + errno.Error())
	}
	return ts.Nano()
}
