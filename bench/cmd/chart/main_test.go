package main

import (
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const sample = `goos: linux
BenchmarkContended/lib=ours-2   	2000	 300000 ns/op	 3000 acq/s	 400.0 p50-handoff-µs	 1500 p99-handoff-µs
BenchmarkContended/lib=ours-2   	2000	 300000 ns/op	 3000 acq/s	 200.0 p50-handoff-µs	 1700 p99-handoff-µs
BenchmarkContended/lib=ours-2   	2000	 300000 ns/op	 3000 acq/s	 300.0 p50-handoff-µs	 1600 p99-handoff-µs
BenchmarkContended/lib=redsync-2	2000	 300000 ns/op	 30 acq/s	 14000 p50-handoff-µs	 91000 p99-handoff-µs
BenchmarkUncontended/lib=ours-2 	10000	 150000 ns/op	 900 B/op	 20 allocs/op
PASS
`

func TestParse(t *testing.T) {
	t.Run("takes the median of each handoff metric per benchmark", func(t *testing.T) {
		bars, err := parse(strings.NewReader(sample))
		require.NoError(t, err)
		require.Equal(t, []bar{
			{"Contended/lib=ours", 300, 1600},
			{"Contended/lib=redsync", 14000, 91000},
		}, bars)
	})
	t.Run("skips a result line broken by a log line", func(t *testing.T) {
		bars, err := parse(strings.NewReader("BenchmarkX-2 \t2026/12/02 15:24:18 ERROR something\n" + sample))
		require.NoError(t, err)
		require.Len(t, bars, 2)
	})
	t.Run("rejects an unreadable value", func(t *testing.T) {
		_, err := parse(strings.NewReader("BenchmarkX-2 1 abc p50-handoff-µs 2 p99-handoff-µs\n"))
		require.Error(t, err)
	})
}

func TestRender(t *testing.T) {
	t.Run("draws well-formed SVG with a label and two bars per benchmark", func(t *testing.T) {
		bars, err := parse(strings.NewReader(sample))
		require.NoError(t, err)
		svg, err := render(bars)
		require.NoError(t, err)
		require.NoError(t, wellFormed(svg))
		require.Contains(t, svg, "Contended/lib=ours")
		require.Contains(t, svg, "Contended/lib=redsync")
		require.Equal(t, 2*len(bars), strings.Count(svg, `height="12"`))
		require.Contains(t, svg, "91.00 ms")
		require.Contains(t, svg, "300 µs")
	})
	t.Run("refuses to draw nothing", func(t *testing.T) {
		_, err := render(nil)
		require.Error(t, err)
	})
}

func TestRun(t *testing.T) {
	t.Run("writes the SVG file from a results file", func(t *testing.T) {
		dir := t.TempDir()
		in := filepath.Join(dir, "bench.txt")
		out := filepath.Join(dir, "handoff.svg")
		require.NoError(t, os.WriteFile(in, []byte(sample), 0o644))
		require.NoError(t, run(in, out))
		svg, err := os.ReadFile(out)
		require.NoError(t, err)
		require.NoError(t, wellFormed(string(svg)))
	})
}

// wellFormed decodes every token of doc as XML.
func wellFormed(doc string) error {
	decoder := xml.NewDecoder(strings.NewReader(doc))
	for {
		_, err := decoder.Token()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}
