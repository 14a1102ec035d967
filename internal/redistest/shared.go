package redistest

import (
	"context"
	"os"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
)

// One Cluster and one SentinelSet per test binary: starting a cluster takes
// 6-8 s and a Sentinel set 2 s, more than most tests that use them. They
// start on first use and live until StopShared, which the package's
// TestMain calls once the tests are done. Tests take them one at a time
// (the turn is given back in the test's Cleanup), and each finds them
// healthy and empty: FLUSHALL on every primary when its turn begins, so no
// test sees another's keys, and a test that moved a slot or failed the
// primary over hands the next one a working set.

var shared struct {
	mu       sync.Mutex // guards what follows
	cluster  *Cluster
	sentinel *SentinelSet
	envs     []*sharedEnv

	clusterTurn, sentinelTurn sync.Mutex
}

// SharedCluster returns the test binary's Cluster, started on first use,
// for t alone until t ends, with every key of the previous user gone.
func SharedCluster(t testing.TB) *Cluster {
	t.Helper()
	return takeShared(t, &shared.clusterTurn, &shared.cluster, func(t testing.TB) *Cluster { return StartCluster(t) }, func(c *Cluster) []string {
		c.WaitHealthy(t)
		var addrs []string
		for _, p := range c.Primaries(t) {
			addrs = append(addrs, p.Addr)
		}
		return addrs
	})
}

// SharedSentinel returns the test binary's SentinelSet, started on first
// use, for t alone until t ends, healthy and with its primary emptied. A
// test that kills a server must have it rejoin (see Rejoin) before it ends.
func SharedSentinel(t testing.TB) *SentinelSet {
	t.Helper()
	return takeShared(t, &shared.sentinelTurn, &shared.sentinel, StartSentinel, func(s *SentinelSet) []string {
		s.WaitHealthy(t)
		return []string{s.Primary(t).Addr()}
	})
}

// takeShared gives t its turn of the shared servers in *it (started by
// start on first use), healthy, with the primaries (of ready) flushed.
func takeShared[T any](t testing.TB, turn *sync.Mutex, it **T, start func(testing.TB) *T, ready func(*T) []string) *T {
	t.Helper()
	turn.Lock()
	t.Cleanup(turn.Unlock)
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if *it == nil {
		startShared(t, func(env testing.TB) { *it = start(env) })
	}
	for _, addr := range ready(*it) {
		flush(t, addr)
	}
	return *it
}

// StopShared stops the shared servers and removes their files. TestMain
// calls it after the tests, before checking for leaked goroutines.
func StopShared() {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	for _, env := range shared.envs {
		env.stop()
	}
	shared.envs, shared.cluster, shared.sentinel = nil, nil, nil
}

// startShared runs start with an environment that outlives t; if start
// does not return (it failed or skipped t), what it started is stopped.
func startShared(t testing.TB, start func(env testing.TB)) {
	env := &sharedEnv{TB: t}
	done := false
	defer func() {
		if !done {
			env.stop()
		}
	}()
	start(env)
	done = true
	shared.envs = append(shared.envs, env)
}

// sharedEnv is the testing.TB the shared servers start with: a failure to
// start is the requesting test's, but what they leave behind (processes,
// directories) is stopped by StopShared, not when that test ends.
type sharedEnv struct {
	testing.TB
	cleanups []func()
	dirs     []string
}

func (e *sharedEnv) Cleanup(f func()) { e.cleanups = append(e.cleanups, f) }

func (e *sharedEnv) TempDir() string {
	e.TB.Helper()
	dir, err := os.MkdirTemp("", "redistest-shared-")
	if err != nil {
		e.TB.Fatalf("making a directory for a shared server: %v", err)
	}
	e.dirs = append(e.dirs, dir)
	return dir
}

func (e *sharedEnv) stop() {
	for i := len(e.cleanups) - 1; i >= 0; i-- {
		e.cleanups[i]()
	}
	for _, dir := range e.dirs {
		_ = os.RemoveAll(dir)
	}
	e.cleanups, e.dirs = nil, nil
}

func flush(t testing.TB, addr string) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	if err := rdb.FlushAll(context.Background()).Err(); err != nil {
		t.Fatalf("FLUSHALL on %s: %v", addr, err)
	}
}
