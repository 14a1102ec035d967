package bench

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/internal/redistest"
)

// interleavedCycles is how many uncontended cycles each library runs per
// round of BenchmarkInterleaved.
const interleavedCycles = 100

// BenchmarkInterleaved compares uncontended cycles on a noisy machine:
// one op is one round in which raw, ours, the fenced pair, bsm and our
// commands sent by hand (ourcmds, see openOurCommandsCycle) each run
// interleavedCycles cycles on one redis-server, so that load that comes
// and goes hits them all alike. It reports each library's median (over
// rounds) of the mean cycle time in a round, and ours against raw:
//
//	go test -run '^$' -bench '^BenchmarkInterleaved$' -benchtime 40x .
func BenchmarkInterleaved(b *testing.B) {
	srv := redistest.Start(b)
	libs := []cycler{
		{"raw", openRawCycle},
		{"ours", openOursCycle()},
		{"raw-fenced", openRawFencedCycle},
		{"ours-fenced", openOursCycle(redislock.WithFencing())},
		{"bsm", openBSMCycle},
		{"ourcmds", openOurCommandsCycle},
	}
	medians := interleave(b, srv.Addr(), libs)
	b.ReportMetric(medians[1]/medians[0], "ours/raw")
	b.ReportMetric(medians[3]/medians[0], "ours-fenced/raw")
	b.ReportMetric(medians[3]/medians[2], "ours-fenced/raw-fenced")
	// Our commands sent by hand: the server's share of our overhead
	// (ourcmds/raw) and the client's (ours/ourcmds).
	b.ReportMetric(medians[5]/medians[0], "ourcmds/raw")
	b.ReportMetric(medians[1]/medians[5], "ours/ourcmds")
}

// interleave runs libs in rounds on the redis-server at addr, as
// BenchmarkInterleaved describes, reports each one's median cycle time
// and returns the medians in the order of libs.
func interleave(b *testing.B, addr string, libs []cycler) []float64 {
	ctx := context.Background()
	cycles := make([]func(context.Context, string) error, len(libs))
	for i, c := range libs {
		cycle, closeLib, err := c.open(addr)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { closeLib() })
		if err := cycle(ctx, "interleaved:warmup"); err != nil {
			b.Fatal(err)
		}
		cycles[i] = cycle
	}
	perRound := make([][]float64, len(libs))
	b.ResetTimer()
	for round := range b.N {
		for i, c := range libs {
			start := time.Now()
			for j := range interleavedCycles {
				if err := cycles[i](ctx, "interleaved:"+c.name+":"+strconv.Itoa(round*interleavedCycles+j)); err != nil {
					b.Fatal(err)
				}
			}
			perRound[i] = append(perRound[i], float64(time.Since(start).Microseconds())/interleavedCycles)
		}
	}
	b.StopTimer()
	medians := make([]float64, len(libs))
	for i, c := range libs {
		slices.Sort(perRound[i])
		medians[i] = perRound[i][len(perRound[i])/2]
		b.ReportMetric(medians[i], c.name+"-µs")
	}
	return medians
}

// BenchmarkFencingFloor asks how close to the plain raw cycle any fenced
// cycle can come, in interleaved rounds as BenchmarkInterleaved: raw (SET
// NX PX, then the compare-and-delete script), the raw fenced cycle (SET
// and INCR in one script), the same two commands in MULTI/EXEC (atomic
// without Lua), the same two commands merely pipelined (set-incr: not a
// lock, since nothing keeps another client's commands from running
// between the two, but the least work a server can be asked for a lock
// and a fence in one round trip), and ours with fencing; each reported
// against raw:
//
//	go test -run '^$' -bench '^BenchmarkFencingFloor$' -benchtime 40x .
func BenchmarkFencingFloor(b *testing.B) {
	srv := redistest.Start(b)
	libs := []cycler{
		{"raw", openRawCycle},
		{"raw-fenced", openRawFencedCycle},
		{"raw-multi", openRawMultiFencedCycle},
		{"set-incr", openSetIncrCycle},
		{"ours-fenced", openOursCycle(redislock.WithFencing())},
	}
	medians := interleave(b, srv.Addr(), libs)
	for i, c := range libs[1:] {
		b.ReportMetric(medians[i+1]/medians[0], c.name+"/raw")
	}
}
