//go:build unix

package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/redislock/redislock/internal/redistest"
)

// TestREADMETranscript runs the commands of the README's CLI transcript
// (the ```text block after <!-- transcript: redislock -->) in one bash,
// with this test's binary as redislock and REDIS_URL on a fresh server (the
// transcript's own "export REDIS_URL" is skipped), and checks that they
// print the README's lines: with pids, hosts, times, durations and numbers
// masked, and sorted, since a background holder's lines may land a line
// earlier or later than in the README.
func TestREADMETranscript(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	_, after, ok := strings.Cut(string(readme), "<!-- transcript: redislock -->\n```text\n")
	require.True(t, ok, "README.md has no ```text block after <!-- transcript: redislock -->")
	block, _, ok := strings.Cut(after, "```")
	require.True(t, ok)

	srv := redistest.Start(t)
	rdb := srv.Client(t)
	bin := t.TempDir()
	require.NoError(t, os.Symlink(binary, filepath.Join(bin, "redislock")))
	environ := env("PATH="+bin+":"+os.Getenv("PATH"), "REDIS_URL=redis://"+srv.Addr())

	shell := exec.Command("bash", "--norc", "--noprofile")
	shell.Env, shell.Dir = environ, t.TempDir()
	stdin, err := shell.StdinPipe()
	require.NoError(t, err)
	reader, writer := io.Pipe()
	shell.Stdout, shell.Stderr = writer, writer
	require.NoError(t, shell.Start())
	var (
		mu  sync.Mutex
		out []string
	)
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		lines := bufio.NewScanner(reader)
		for lines.Scan() {
			mu.Lock()
			out = append(out, lines.Text())
			mu.Unlock()
		}
	}()
	printed := func(marker string) bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Contains(out, marker)
	}

	var want []string
	for i, line := range strings.Split(strings.TrimSuffix(block, "\n"), "\n") {
		command, isCommand := strings.CutPrefix(line, "$ ")
		switch {
		case !isCommand:
			want = append(want, line)
			continue
		case strings.HasPrefix(command, "export REDIS_URL="):
			continue
		}
		marker := fmt.Sprintf("--- command %d done ---", i)
		_, err := fmt.Fprintf(stdin, "%s\necho '%s'\n", command, marker)
		require.NoError(t, err)
		eventually(t, "the end of "+command, func() bool { return printed(marker) })
		if strings.HasSuffix(command, "&") {
			// A holder in the background: the next command runs once
			// it holds the lock, and once its COMMAND runs (which it
			// starts only then): the key alone can be an attempt whose
			// reply came too late under load, given back and made again,
			// and the next command slipped in between (a loaded run saw
			// "never").
			eventually(t, "the background run to take its lock", func() bool {
				keys, err := rdb.Keys(context.Background(), "lock:{*}").Result()
				return err == nil && len(keys) > 0 && running(strings.Fields(strings.SplitN(command, " -- ", 2)[1]))
			})
		}
	}
	require.NoError(t, stdin.Close())
	require.NoError(t, shell.Wait())
	require.NoError(t, writer.Close())
	<-readDone

	var got []string
	for _, line := range out {
		if !strings.HasPrefix(line, "--- command ") {
			got = append(got, line)
		}
	}
	require.Equal(t, maskTranscript(want), maskTranscript(got), "README's lines (masked, sorted) vs what the commands printed:\n%s", strings.Join(got, "\n"))
}

var (
	transcriptTime     = regexp.MustCompile(`time=\S+`)
	transcriptHost     = regexp.MustCompile(`host=\S+`)
	transcriptDuration = regexp.MustCompile(`\d+(\.\d+)?(ns|µs|ms|s|m|h)\b`)
	transcriptNumber   = regexp.MustCompile(`\d+`)
	transcriptHolder   = regexp.MustCompile(`\b[0-9a-f]{16}\b`) // a holder's ID (a 16-digit fence too)
)

// maskTranscript masks what varies from run to run, and sorts.
func maskTranscript(lines []string) []string {
	out := make([]string, len(lines))
	for i, line := range lines {
		line = transcriptTime.ReplaceAllString(line, "time=T")
		line = transcriptHost.ReplaceAllString(line, "host=H")
		line = transcriptHolder.ReplaceAllString(line, "ID")
		line = transcriptDuration.ReplaceAllString(line, "D")
		out[i] = transcriptNumber.ReplaceAllString(line, "N")
	}
	slices.Sort(out)
	return out
}

// running tells whether a process of this machine runs argv (its
// command line exactly, the trailing "&" left out), from /proc.
func running(argv []string) bool {
	if n := len(argv); n > 0 && argv[n-1] == "&" {
		argv = argv[:n-1]
	}
	want := strings.Join(argv, "\x00") + "\x00"
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		if cmdline, err := os.ReadFile("/proc/" + d.Name() + "/cmdline"); err == nil && string(cmdline) == want {
			return true
		}
	}
	return false
}
