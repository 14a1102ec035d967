//go:build !unix

// Command settlement runs the daily-settlement scenario from the redislock
// README. It freezes one of its pod processes with SIGSTOP, so it needs a
// Unix system.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "settlement: this demo freezes a pod process with SIGSTOP, so it needs a Unix system")
	os.Exit(1)
}
