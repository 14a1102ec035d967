#!/usr/bin/env bash
# The figures of issues 29 (one engine for every kind) and 31 (several
# batches in flight) in one run, into $OUT/engine.txt (bench/results by
# default), with the machine's load before and after. BENCHMARKS.md quotes
# this file; run it on a quiet machine:
#
#   bash bench/engine.sh                # about 2 minutes
#   OUT=/tmp/r bash bench/engine.sh
set -euo pipefail
cd "$(dirname "$0")"
OUT=${OUT:-results}
mkdir -p "$OUT"
export REDISLOCK_REQUIRE_REDIS=1
export REDISLOCK_BENCH_LOG=/dev/null
f="$OUT/engine.txt"
started=$(date +%s)
{
  echo "date:          $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "commit:        $(git rev-parse --short HEAD)"
  echo "uptime before: $(uptime)"
  echo "go:            $(go version)"
  echo "redis:         $(redis-server --version)"
} > "$f"
run() { echo "+ $*" | tee -a "$f"; "$@" 2>&1 | tee -a "$f"; }
# Interleaved rounds (one op is one round): ours, go-redis and rueidis by
# hand at 1, 16 and 64 goroutines of one Client; the family against the
# exclusive lock at 1 and 16; the uncontended cycle against raw go-redis.
run go test -run '^$' -bench '^(BenchmarkConcurrent|BenchmarkFamily|BenchmarkInterleaved)$' -benchtime 40x -count 1 -timeout 60m .
# What each kind's uncontended cycle costs the server and this process
# (CPU per cycle, INFO cpu and getrusage), at 1 and 16 goroutines.
run go test -run '^$' -bench '^BenchmarkFamilyServerWork$' -benchtime 20000x -count 1 -timeout 60m .
# Allocations of the exclusive cycle, in the core module.
run go -C .. test -run '^$' -bench '^BenchmarkAcquireRelease$' -benchmem -count 1 .
# Hand-over p50 / p99: a lock, a semaphore and a shared hold, waiters in
# other processes (one op is one acquisition).
run go test -run '^$' -bench '^(BenchmarkContended|BenchmarkContendedProcesses)$/^lib=(ours|ours-semaphore)$' -benchtime 2000x -count 1 -timeout 60m .
run go test -run '^$' -bench '^BenchmarkSharedHandoff$' -benchtime 2000x -count 1 -timeout 60m .
# The CPU-starved storm (500 goroutines on one name, idle and loaded).
run go test -run '^$' -bench '^BenchmarkStorm$' -benchtime 1x -count 1 -timeout 60m .
{
  echo "uptime after:  $(uptime)"
  echo "took:          $(( $(date +%s) - started )) s"
} >> "$f"
