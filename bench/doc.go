// Package bench compares redislock with its peers (bsm/redislock,
// redsync, rueidislock) and with a hand-written go-redis baseline, on a
// real redis-server that the benchmarks start on 127.0.0.1.
//
// The benchmarks live in bench_test.go; this package holds the harness
// they share: the adapters that drive each library through its documented
// API, the raw go-redis baseline, the INFO commandstats parser, the
// command and round-trip counters, the handoff analysis, the board that
// processes share, and the child side of the multi-process benchmark.
// run.sh runs the full comparison; BENCHMARKS.md reports it.
package bench
