//go:build !unix

// Command redislock runs a command while holding a distributed lock on
// Redis. It needs a Unix system (process groups and POSIX signals).
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "redislock: this command needs a Unix system (process groups and POSIX signals)")
	os.Exit(69)
}
