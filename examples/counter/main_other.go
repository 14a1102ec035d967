//go:build !unix

// Command counter shows a lost update under a fenced lock, and the pattern
// that prevents it. It freezes a pod process with SIGSTOP, so it needs a
// Unix system.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "counter: this example freezes a pod process with SIGSTOP, so it needs a Unix system")
	os.Exit(1)
}
