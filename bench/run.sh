#!/usr/bin/env bash
# The full comparison behind BENCHMARKS.md. The benchmarks start their own
# redis-server on a free 127.0.0.1 port; this script only runs them, then
# benchstat (the table) and cmd/chart (the handoff chart).
#
#   bash bench/run.sh              # COUNT=5 runs of each, into bench/results/
#   COUNT=1 OUT=/tmp/r bash bench/run.sh
#
# Run it on a quiet machine: the figures are only as good as the load allows.
set -euo pipefail
cd "$(dirname "$0")"
COUNT=${COUNT:-5}
OUT=${OUT:-results}
mkdir -p "$OUT"
export REDISLOCK_REQUIRE_REDIS=1 # no silent skip when redis-server is missing
export REDISLOCK_BENCH_LOG="$PWD/$OUT/libraries.log" # the libraries' own logs
: > "$REDISLOCK_BENCH_LOG"
started=$(date +%s)

{
  echo "date:          $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "uptime before: $(uptime)"
  echo "nproc:         $(nproc)"
  echo "cpu:           $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
  echo "memory:        $(free -g | awk '/^Mem:/ {print $2 " GiB"}')"
  echo "redis:         $(redis-server --version)"
  echo "go:            $(go version)"
} > "$OUT/machine.txt"

run() { echo "+ $*" | tee -a "$OUT/commands.txt"; "$@" | tee -a "$OUT/bench.txt"; }
: > "$OUT/bench.txt"
: > "$OUT/commands.txt"
# Uncontended and parallel: standard benchmarks, default benchtime.
run go test -run '^$' -bench '^(BenchmarkUncontended|BenchmarkUncontendedFencing|BenchmarkParallel)$' \
  -benchmem -count "$COUNT" -timeout 60m .
# Uncontended, interleaved (also from 16 and 64 goroutines of one process:
# BenchmarkConcurrent): the libraries alternate round by round, so that
# load that comes and goes hits them alike (one op is one round).
run go test -run '^$' -bench '^(BenchmarkInterleaved|BenchmarkFencingFloor|BenchmarkConcurrent)$' -benchtime 40x -count "$COUNT" -timeout 60m .
# Contended: one op is one acquisition, 2,000 of them per run.
run go test -run '^$' -bench '^(BenchmarkContended|BenchmarkContendedProcesses|BenchmarkFreeForAll|BenchmarkFreeForAllProcesses)$' \
  -benchtime 2000x -count "$COUNT" -timeout 60m .
# What the server spends on one hand-over's scripts, on an idle server (one
# op is one script call).
run go test -run '^$' -bench '^BenchmarkServerWork$' -benchtime 3000x -count "$COUNT" -timeout 60m .
# Storms: 500 goroutines on one name for 6 s, idle and under CPU load (one op
# is one storm).
run go test -run '^$' -bench '^BenchmarkStorm$' -benchtime 1x -count "$COUNT" -timeout 60m .
# Watchdog: one op is the whole scenario (10,000 locks held for 10 s).
run go test -run '^$' -bench '^BenchmarkWatchdog$' -benchtime 1x -count "$COUNT" -timeout 60m .
# The fenced cycle against a hand-written clock-raised fence (interleaved
# rounds), Inspect, and the lock family's cycles beside their raw baselines.
run go test -run '^$' -bench '^BenchmarkClockFencing$' -benchtime 40x -count "$COUNT" -timeout 60m .
run go test -run '^$' -bench '^(BenchmarkInspect|BenchmarkMultiUncontended|BenchmarkSemaphoreUncontended|BenchmarkSharedUncontended)$' \
  -benchmem -count "$COUNT" -timeout 60m .
run go test -run '^$' -bench '^(BenchmarkMultiContended|BenchmarkSemaphoreContended)$' -benchtime 2000x -count "$COUNT" -timeout 60m .
run go test -run '^$' -bench '^BenchmarkSharedWriterWait$' -benchtime 200x -count "$COUNT" -timeout 60m .
# Leader election's handover, in the core module (one op is one handover).
run go -C .. test -run '^$' -bench '^BenchmarkElectHandover$' -benchtime 2000x -count "$COUNT" -timeout 60m .

go tool benchstat "$OUT/bench.txt" > "$OUT/benchstat.txt"
go run ./cmd/chart -in "$OUT/bench.txt" -out "$OUT/handoff.svg"

echo "uptime after:  $(uptime)" >> "$OUT/machine.txt"
echo "took:          $(( $(date +%s) - started )) s" >> "$OUT/machine.txt"
echo
echo "raw results:   $PWD/$OUT/bench.txt"
echo "table:         $PWD/$OUT/benchstat.txt"
echo "chart:         $PWD/$OUT/handoff.svg"
echo "machine:       $PWD/$OUT/machine.txt"
echo "library logs:  $REDISLOCK_BENCH_LOG"
cat "$OUT/machine.txt"
