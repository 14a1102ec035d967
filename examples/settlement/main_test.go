package main

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func TestSettlementOnEmbeddedRedis(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out, "", 500*time.Millisecond, "2026-12-02"); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	t.Log("\n" + text)
	for _, want := range []string{
		"skipped: another pod holds settlement:2026-12-02",
		"FROZEN before writing",
		"with fence 2, settling",
		"wrote status=done with fence 2 (1 row updated)",
		"write REJECTED",
		"RunWithLock reports the lock was lost",
		"status=done",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("timeline lacks %q", want)
		}
	}
	if n := strings.Count(text, "skipped: another pod holds"); n != 2 {
		t.Errorf("%d pods skipped round 1, want 2", n)
	}
	if strings.Count(text, "(1 row updated)") != 1 {
		t.Errorf("want exactly one accepted write")
	}
}

func TestSettlementIsRunnable(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go tool")
	}
	if testing.Short() {
		t.Skip("builds the command")
	}
	out, err := exec.Command("go", "run", ".", "-ttl", "300ms").CombinedOutput()
	if err != nil {
		t.Fatalf("go run: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "stale write was rejected") {
		t.Fatalf("unexpected output:\n%s", out)
	}
}
