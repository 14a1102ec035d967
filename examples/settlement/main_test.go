//go:build unix

package main

import (
	"bytes"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestMain makes the test binary a pod when the runner starts it as one, as
// the demo's own binary is.
func TestMain(m *testing.M) {
	if name := os.Getenv(envPod); name != "" {
		os.Exit(podMain(name))
	}
	os.Exit(m.Run())
}

func TestTheFrozenPodsLateWriteIsRejected(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	res, err := run(&out, exe, "", 500*time.Millisecond, "2026-12-02")
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	t.Log("\n" + out.String())
	text := out.String()
	count := func(s string) int { return strings.Count(text, s) }

	// The fences, in the order the pods acquired: the server's clock in
	// µs, each above the one before.
	var fences []string
	for _, m := range regexp.MustCompile(`(?m)acquired settlement:2026-12-02 with fence (\d+)$`).FindAllStringSubmatch(text, -1) {
		fences = append(fences, m[1])
	}
	if len(fences) != 3 {
		t.Fatalf("%d acquisitions, want 3", len(fences))
	}
	for i := 1; i < len(fences); i++ {
		prev, _ := strconv.ParseInt(fences[i-1], 10, 64)
		next, _ := strconv.ParseInt(fences[i], 10, 64)
		if next <= prev {
			t.Errorf("fence %d after %d: fences went backwards", next, prev)
		}
	}
	t.Run("one pod wins the first round, the other two skip", func(t *testing.T) {
		if n := count("skipped: another pod holds settlement:2026-12-02"); n != 2 {
			t.Errorf("%d pods skipped, want 2", n)
		}
	})
	t.Run("the frozen pod prints nothing from its freeze until it is woken", func(t *testing.T) {
		frozenLine := slices.IndexFunc(res.lines, func(l string) bool { return strings.Contains(l, frozenMark) })
		wokenLine := slices.IndexFunc(res.lines, func(l string) bool { return strings.Contains(l, "SIGCONT to "+res.frozenPod) })
		if frozenLine < 0 || wokenLine < frozenLine {
			t.Fatalf("freeze at line %d, SIGCONT at line %d", frozenLine, wokenLine)
		}
		if !strings.Contains(res.lines[frozenLine], res.frozenPod) {
			t.Fatalf("line %q is not %s's", res.lines[frozenLine], res.frozenPod)
		}
		for _, l := range res.lines[frozenLine+1 : wokenLine] {
			if strings.Contains(l, " "+res.frozenPod+" ") {
				t.Errorf("printed while frozen: %q", l)
			}
		}
		if res.wokenAt-res.frozenAt < 500*time.Millisecond {
			t.Errorf("frozen for %v, less than the TTL", res.wokenAt-res.frozenAt)
		}
	})
	t.Run("another pod fences the row in and settles with the second fence, the third finds it done", func(t *testing.T) {
		for _, want := range []string{
			"wrote status=done with fence " + fences[1] + " (1 row updated)",
			"with fence " + fences[1] + " (fence in: 0 rows updated): nothing to do",
			"status=done by pod-",
		} {
			if count(want) != 1 {
				t.Errorf("want %q once", want)
			}
		}
		if n := count("fenced the row in (1 row updated)"); n != 2 {
			t.Errorf("%d pods fenced the row in, want 2 (the frozen one, then the one that settles)", n)
		}
		if n := count("wrote status=done"); n != 1 {
			t.Errorf("%d settlements accepted, want 1", n)
		}
	})
	t.Run("the frozen pod's write is rejected and it learns its lock was lost", func(t *testing.T) {
		for _, want := range []string{
			res.frozenPod + "   write REJECTED by the database: a newer fence than " + fences[0],
			res.frozenPod + "   RunWithLock: the lock was lost during the job",
			res.frozenPod + "   [log ERROR] redislock: lock lost",
		} {
			if count(want) != 1 {
				t.Errorf("want %q once", want)
			}
		}
	})
}

// TestREADMEShowsWhatTheDemoPrints runs the demo as the README says and
// compares its lines with the README's, with times, addresses, dates and
// pod numbers (which pod wins is a race) and the frozen pod's loss reason
// (also a race, see whyLost) masked. Lines are compared as a
// multiset: the pods are processes, and lines printed in the same
// millisecond by two of them (or by two goroutines of one) can come out in
// either order.
func TestREADMEShowsWhatTheDemoPrints(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the demo")
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	shown, ok := demoOutput(string(readme))
	if !ok {
		t.Fatal("README.md has no ```text block after <!-- output of: go -C examples run ./settlement -->")
	}
	cmd := exec.Command("go", "-C", "..", "run", "./settlement")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	got, err := cmd.Output()
	if err != nil {
		t.Fatalf("go -C examples run ./settlement: %v\n%s", err, stderr.String())
	}
	want, have := maskLines(shown), maskLines(string(got))
	slices.Sort(want)
	slices.Sort(have)
	if !slices.Equal(want, have) {
		t.Errorf("README.md shows (masked, sorted):\n%s\n\nthe demo printed (masked, sorted):\n%s\n\nthe demo printed:\n%s",
			strings.Join(want, "\n"), strings.Join(have, "\n"), got)
	}
}

// demoOutput returns the text block that follows the demo-output marker.
func demoOutput(readme string) (string, bool) {
	_, after, ok := strings.Cut(readme, "<!-- output of: go -C examples run ./settlement -->")
	if !ok {
		return "", false
	}
	_, block, ok := strings.Cut(after, "```text\n")
	if !ok {
		return "", false
	}
	block, _, ok = strings.Cut(block, "```")
	return block, ok
}

var masks = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`^ *\d+\.\d\ds`), "T"},
	{regexp.MustCompile(`\d+\.\d\ds\b`), "Ds"},
	{regexp.MustCompile(`pod-\d`), "pod-N"},
	{regexp.MustCompile(`\b\d{13,}\b`), "FENCE"}, // fences follow the server's clock in µs
	{regexp.MustCompile(`\d{4}-\d\d-\d\d`), "DATE"},
	{regexp.MustCompile(`127\.0\.0\.1:\d+`), "ADDR"},
	// The frozen pod's loss reason is a race on waking (see whyLost).
	{regexp.MustCompile(`reason=.*$`), "reason=REASON"},
	{regexp.MustCompile(`lost during the job: .*$`), "lost during the job: REASON"},
	{regexp.MustCompile(`(pod-N   )\(.*\)$`), "${1}(WHY)"},
}

func maskLines(text string) []string {
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(text), "\n") {
		for _, m := range masks {
			l = m.re.ReplaceAllString(l, m.with)
		}
		lines = append(lines, l)
	}
	return lines
}
