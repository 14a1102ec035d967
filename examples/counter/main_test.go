//go:build unix

package main

import (
	"bytes"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redislock/redislock/internal/redistest"
)

// TestMain makes the test binary a pod when the runner starts it as one, as
// the example's own binary is.
func TestMain(m *testing.M) {
	if name := os.Getenv(envPod); name != "" {
		os.Exit(podMain(name))
	}
	// Under -race a process sleeps 1 s on exit (for late reports), and the
	// runner waits for each pod to exit: the pods skip that sleep. A race
	// in a pod is still reported, and fails its exit status.
	os.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	os.Exit(m.Run())
}

// The same three pods, the same freeze and the same order of events, once
// with each check: only the fence checked on the write loses an update.
func TestOnlyTheWriteOnlyFenceLosesAnUpdate(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, redis := range []struct{ name, url string }{
		{"on a real redis-server", "real"},
		{"on the embedded Redis the example runs by default", ""},
	} {
		t.Run(redis.name, func(t *testing.T) {
			url := redis.url
			if url == "real" {
				url = "redis://" + redistest.Start(t).Addr()
			}
			var out bytes.Buffer
			outcomes, err := run(&out, exe, url, 500*time.Millisecond, []string{"write", "fence-in"})
			t.Log("\n" + out.String())
			if err != nil {
				t.Fatal(err)
			}
			if len(outcomes) != 2 {
				t.Fatalf("%d outcomes, want 2", len(outcomes))
			}
			writeOnly, fencedIn := outcomes[0], outcomes[1]

			t.Run("with the fence checked on the write only, the late write lands between pod-2's read and write", func(t *testing.T) {
				inOrder(t, writeOnly.lines,
					"pod-2   read value=0",
					"pod-1   wrote value=1 with fence",
					"pod-2   wrote value=1 with fence",
					"pod-3   read value=1",
					"pod-3   wrote value=2 with fence")
				if writeOnly.accepted != 3 || writeOnly.value != 2 || writeOnly.lost() != 1 {
					t.Errorf("%d increments accepted, counter %d: want 3 accepted, counter 2, 1 lost", writeOnly.accepted, writeOnly.value)
				}
			})
			t.Run("fenced in first, the late write is rejected and no update is lost", func(t *testing.T) {
				inOrder(t, fencedIn.lines,
					"pod-2   fenced the row in with fence",
					"pod-2   read value=0",
					"pod-1   write REJECTED by the database",
					"pod-2   wrote value=1 with fence",
					"pod-3   read value=1",
					"pod-3   wrote value=2 with fence")
				if fencedIn.accepted != 2 || fencedIn.value != 2 || fencedIn.lost() != 0 {
					t.Errorf("%d increments accepted, counter %d: want 2 accepted, counter 2, none lost", fencedIn.accepted, fencedIn.value)
				}
			})
			t.Run("the frozen pod learns that its lock was lost", func(t *testing.T) {
				for _, o := range outcomes {
					inOrder(t, o.lines, "pod-1   FROZEN", "pod-2   acquired", "pod-1   woke up", "pod-1   RunWithLock: the lock was lost")
				}
			})
		})
	}
}

// inOrder fails unless each of wants is in a line of lines, each in a
// later line than the one before.
func inOrder(t *testing.T, lines []string, wants ...string) {
	t.Helper()
	from := 0
	for _, want := range wants {
		i := slices.IndexFunc(lines[from:], func(l string) bool { return strings.Contains(l, want) })
		if i < 0 {
			t.Errorf("no line %q after line %d", want, from)
			return
		}
		from += i + 1
	}
}
