// Command chart draws the handoff latency of each library, from the output
// of the contended benchmarks, as an SVG bar chart: the median over runs
// of the p50 and p99 handoff, one group per benchmark and library, on a
// logarithmic axis.
//
//	go run ./cmd/chart -in results/bench.txt -out results/handoff.svg
//
// It uses the standard library only.
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"html"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
)

func main() {
	in := flag.String("in", "", "go test -bench output to read (default: standard input)")
	out := flag.String("out", "handoff.svg", "SVG file to write")
	flag.Parse()
	if err := run(*in, *out); err != nil {
		fmt.Fprintln(os.Stderr, "chart:", err)
		os.Exit(1)
	}
}

func run(in, out string) error {
	var r io.Reader = os.Stdin
	if in != "" {
		f, err := os.Open(in)
		if err != nil {
			return err
		}
		defer f.Close()
		r = f
	}
	series, err := parse(r)
	if err != nil {
		return err
	}
	svg, err := render(series)
	if err != nil {
		return err
	}
	return os.WriteFile(out, []byte(svg), 0o644)
}

// bar is one benchmark's handoff latencies, medians over its runs.
type bar struct {
	name     string // e.g. "Contended/lib=ours"
	p50, p99 float64
}

// The metrics drawn, as the benchmarks report them.
const (
	unitP50 = "p50-handoff-µs"
	unitP99 = "p99-handoff-µs"
)

// parse reads benchmark result lines and returns, per benchmark that
// reported both handoff metrics, the medians of each, in order of first
// appearance.
func parse(r io.Reader) ([]bar, error) {
	type samples struct{ p50, p99 []float64 }
	byName := map[string]*samples{}
	var order []string
	scanner := bufio.NewScanner(r)
	scanner.Buffer(make([]byte, 1<<16), 1<<20)
	for scanner.Scan() {
		fields := strings.Fields(scanner.Text())
		if len(fields) < 4 || !strings.HasPrefix(fields[0], "Benchmark") {
			continue
		}
		if _, err := strconv.Atoi(fields[1]); err != nil {
			continue // a result line broken by a log line, as benchstat skips it
		}
		name := strings.TrimPrefix(fields[0], "Benchmark")
		if i := strings.LastIndex(name, "-"); i > 0 {
			if _, err := strconv.Atoi(name[i+1:]); err == nil {
				name = name[:i] // the GOMAXPROCS suffix
			}
		}
		var p50, p99 []float64
		for i := 2; i+1 < len(fields); i += 2 {
			v, err := strconv.ParseFloat(fields[i], 64)
			if err != nil {
				return nil, fmt.Errorf("%s: value %q: %w", fields[0], fields[i], err)
			}
			switch fields[i+1] {
			case unitP50:
				p50 = append(p50, v)
			case unitP99:
				p99 = append(p99, v)
			}
		}
		if len(p50) == 0 || len(p99) == 0 {
			continue
		}
		s, ok := byName[name]
		if !ok {
			s = &samples{}
			byName[name] = s
			order = append(order, name)
		}
		s.p50 = append(s.p50, p50...)
		s.p99 = append(s.p99, p99...)
	}
	if err := scanner.Err(); err != nil {
		return nil, err
	}
	bars := make([]bar, 0, len(order))
	for _, name := range order {
		s := byName[name]
		bars = append(bars, bar{name, median(s.p50), median(s.p99)})
	}
	return bars, nil
}

func median(values []float64) float64 {
	sorted := slices.Clone(values)
	slices.Sort(sorted)
	n := len(sorted)
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}

// Layout, in SVG user units.
const (
	labelWidth = 300
	plotWidth  = 520
	rowHeight  = 34
	top        = 60
	bottom     = 50
)

// render draws the bars: for each benchmark, p50 above p99, on a log axis
// in milliseconds from 0.01 ms to the next power of ten above the largest.
func render(bars []bar) (string, error) {
	if len(bars) == 0 {
		return "", errors.New("no benchmark reported both " + unitP50 + " and " + unitP99)
	}
	lo, hi := 0.01, 0.1
	for _, b := range bars {
		for _, v := range []float64{b.p50 / 1000, b.p99 / 1000} {
			for hi < v {
				hi *= 10
			}
		}
	}
	x := func(ms float64) float64 {
		ms = max(ms, lo)
		return labelWidth + plotWidth*math.Log10(ms/lo)/math.Log10(hi/lo)
	}
	width := labelWidth + plotWidth + 40
	height := top + rowHeight*len(bars) + bottom
	var sb strings.Builder
	fmt.Fprintf(&sb, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&sb, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	fmt.Fprintf(&sb, `<text x="%d" y="22" font-size="15" font-weight="bold">Handoff latency: release by one holder to acquire by the next (median of runs)</text>`+"\n", 10)
	fmt.Fprintf(&sb, `<rect x="%d" y="32" width="12" height="10" fill="#4878d0"/><text x="%d" y="41">p50</text>`, labelWidth, labelWidth+16)
	fmt.Fprintf(&sb, `<rect x="%d" y="32" width="12" height="10" fill="#ee854a"/><text x="%d" y="41">p99</text>`+"\n", labelWidth+60, labelWidth+76)
	for tick := lo; tick <= hi*1.0001; tick *= 10 {
		tx := x(tick)
		fmt.Fprintf(&sb, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ccc"/>`, tx, top-5, tx, top+rowHeight*len(bars))
		fmt.Fprintf(&sb, `<text x="%.1f" y="%d" text-anchor="middle">%s ms</text>`+"\n", tx, top+rowHeight*len(bars)+18, strconv.FormatFloat(tick, 'g', -1, 64))
	}
	for i, b := range bars {
		y := top + rowHeight*i
		fmt.Fprintf(&sb, `<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", labelWidth-8, y+20, html.EscapeString(b.name))
		for j, v := range []struct {
			us    float64
			color string
		}{{b.p50, "#4878d0"}, {b.p99, "#ee854a"}} {
			by := y + 4 + j*13
			fmt.Fprintf(&sb, `<rect x="%d" y="%d" width="%.1f" height="12" fill="%s"/>`, labelWidth, by, x(v.us/1000)-labelWidth, v.color)
			fmt.Fprintf(&sb, `<text x="%.1f" y="%d" font-size="10">%s</text>`+"\n", x(v.us/1000)+4, by+10, formatMicros(v.us))
		}
	}
	fmt.Fprintf(&sb, `<text x="%d" y="%d" font-size="10" fill="#555">log scale; from the p50-handoff-µs and p99-handoff-µs metrics of go test -bench</text>`+"\n", labelWidth, height-10)
	sb.WriteString("</svg>\n")
	return sb.String(), nil
}

func formatMicros(us float64) string {
	if us >= 1000 {
		return strconv.FormatFloat(us/1000, 'f', 2, 64) + " ms"
	}
	return strconv.FormatFloat(us, 'f', 0, 64) + " µs"
}
