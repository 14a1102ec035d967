package monoclock

import (
	"os"
	"os/exec"
	"strconv"
	"testing"
)

// Another process reads the same clock: its reading falls between two of
// ours taken around it.
func TestTheClockIsSharedBetweenProcesses(t *testing.T) {
	if v := os.Getenv("MONOCLOCK_CHILD"); v != "" {
		os.Stdout.WriteString(strconv.FormatInt(Now(), 10))
		return
	}
	before := Now()
	cmd := exec.Command(os.Args[0], "-test.run=^TestTheClockIsSharedBetweenProcesses$")
	cmd.Env = append(os.Environ(), "MONOCLOCK_CHILD=1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	after := Now()
	child, err := strconv.ParseInt(string(out[:firstNonDigit(out)]), 10, 64)
	if err != nil {
		t.Fatalf("child printed %q: %v", out, err)
	}
	if child < before || child > after {
		t.Fatalf("child's reading %d is not between %d and %d", child, before, after)
	}
}

func firstNonDigit(b []byte) int {
	for i, c := range b {
		if c < '0' || c > '9' {
			return i
		}
	}
	return len(b)
}
