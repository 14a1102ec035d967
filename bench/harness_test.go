package bench

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redislock/redislock/internal/redistest"
)

// Tests of the harness itself: each part must measure what it claims.

func TestCommandStats(t *testing.T) {
	const info = "# Commandstats\r\n" +
		"cmdstat_evalsha:calls=12,usec=300,usec_per_call=25.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_client|tracking:calls=2,usec=4,usec_per_call=2.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_info:calls=5,usec=100,usec_per_call=20.00,rejected_calls=0,failed_calls=0\r\n"

	t.Run("reads the calls of every command", func(t *testing.T) {
		stats, err := parseCommandStats(info)
		require.NoError(t, err)
		require.Equal(t, commandStats{"evalsha": 12, "client|tracking": 2, "info": 5}, stats)
	})
	t.Run("rejects a line without a calls field", func(t *testing.T) {
		_, err := parseCommandStats("cmdstat_get:usec=1\r\n")
		require.ErrorContains(t, err, "no calls field")
	})
	t.Run("rejects an unreadable calls field", func(t *testing.T) {
		_, err := parseCommandStats("cmdstat_get:calls=x\r\n")
		require.Error(t, err)
	})
	t.Run("subtracts a snapshot and totals without INFO", func(t *testing.T) {
		before := commandStats{"evalsha": 10, "info": 1}
		after := commandStats{"evalsha": 13, "get": 2, "info": 3}
		diff := after.since(before)
		require.Equal(t, commandStats{"evalsha": 3, "get": 2, "info": 2}, diff)
		require.EqualValues(t, 5, diff.total())
		require.Equal(t, "evalsha=3 get=2 info=2", diff.String())
	})
	t.Run("counts what a real server ran, commands inside scripts included", func(t *testing.T) {
		srv := redistest.Start(t)
		rdb := srv.Client(t)
		ctx := context.Background()
		before, err := readCommandStats(ctx, rdb)
		require.NoError(t, err)
		require.NoError(t, rdb.Set(ctx, "k", "v", 0).Err())
		require.NoError(t, rdb.Eval(ctx, "return redis.call('GET', KEYS[1])", []string{"k"}).Err())
		after, err := readCommandStats(ctx, rdb)
		require.NoError(t, err)
		diff := after.since(before)
		require.EqualValues(t, 1, diff["set"])
		require.EqualValues(t, 1, diff["eval"])
		require.EqualValues(t, 1, diff["get"], "Redis counts the script's GET as a call")
		require.EqualValues(t, 3, diff.total())
	})
}

func TestServerWork(t *testing.T) {
	const info = "# Commandstats\r\n" +
		"cmdstat_evalsha:calls=12,usec=300,usec_per_call=25.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_get:calls=12,usec=24,usec_per_call=2.00,rejected_calls=0,failed_calls=0\r\n" +
		"\r\n# CPU\r\nused_cpu_sys:1.250000\r\nused_cpu_user:0.500000\r\n" +
		"used_cpu_sys_children:9.000000\r\nused_cpu_user_children:9.000000\r\n"

	t.Run("reads calls, microseconds and the process's CPU time", func(t *testing.T) {
		w, err := parseServerWork(info)
		require.NoError(t, err)
		require.Equal(t, commandStats{"evalsha": 12, "get": 12}, w.calls)
		require.Equal(t, commandStats{"evalsha": 300, "get": 24}, w.micros)
		require.Equal(t, 1750*time.Millisecond, w.cpu, "user + system of the server, not of its children")
		require.EqualValues(t, 300, w.scriptMicros())
	})
	t.Run("rejects a reply without the CPU section", func(t *testing.T) {
		_, err := parseServerWork("cmdstat_get:calls=1,usec=2\r\nused_cpu_sys:1.0\r\n")
		require.ErrorContains(t, err, "no used_cpu_user line")
	})
	t.Run("rejects a line without a usec field", func(t *testing.T) {
		_, err := parseServerWork("cmdstat_get:calls=1\r\n")
		require.ErrorContains(t, err, "no usec field")
	})
	t.Run("measures a real server: a script's time includes its commands'", func(t *testing.T) {
		srv := redistest.Start(t)
		rdb := srv.Client(t)
		ctx := context.Background()
		before, err := readServerWork(ctx, rdb)
		require.NoError(t, err)
		const script = "for i = 1, 20000 do redis.call('SET', KEYS[1], i) end return 1"
		require.NoError(t, rdb.Eval(ctx, script, []string{"k"}).Err())
		after, err := readServerWork(ctx, rdb)
		require.NoError(t, err)
		w := after.since(before)
		require.EqualValues(t, 20000, w.calls["set"])
		require.Positive(t, w.micros["set"])
		require.GreaterOrEqual(t, w.scriptMicros(), w.micros["set"], "the script's time counts the SETs it ran")
		require.Positive(t, w.cpu, "20,000 SETs take the server some CPU time")
	})
}

func TestRawBaseline(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	require.NoError(t, loadRawScripts(ctx, rdb))

	t.Run("acquires a free key and releases it", func(t *testing.T) {
		token, err := rawAcquire(ctx, rdb, "raw:a", time.Minute)
		require.NoError(t, err)
		require.Equal(t, token, rdb.Get(ctx, "raw:a").Val())
		require.Greater(t, rdb.PTTL(ctx, "raw:a").Val(), 50*time.Second)
		ok, err := rawReleaseKey(ctx, rdb, "raw:a", token)
		require.NoError(t, err)
		require.True(t, ok)
		require.Zero(t, rdb.Exists(ctx, "raw:a").Val())
	})
	t.Run("refuses a held key and leaves it alone", func(t *testing.T) {
		token, err := rawAcquire(ctx, rdb, "raw:b", time.Minute)
		require.NoError(t, err)
		_, err = rawAcquire(ctx, rdb, "raw:b", time.Minute)
		require.ErrorIs(t, err, errRawHeld)
		ok, err := rawReleaseKey(ctx, rdb, "raw:b", "not-the-token")
		require.NoError(t, err)
		require.False(t, ok)
		require.Equal(t, token, rdb.Get(ctx, "raw:b").Val())
	})
	t.Run("fences increase from one holder to the next", func(t *testing.T) {
		token, first, err := rawFenced(ctx, rdb, "raw:c", "raw:c:fence", time.Minute)
		require.NoError(t, err)
		_, _, err = rawFenced(ctx, rdb, "raw:c", "raw:c:fence", time.Minute)
		require.ErrorIs(t, err, errRawHeld)
		ok, err := rawReleaseKey(ctx, rdb, "raw:c", token)
		require.NoError(t, err)
		require.True(t, ok)
		_, second, err := rawFenced(ctx, rdb, "raw:c", "raw:c:fence", time.Minute)
		require.NoError(t, err)
		require.Equal(t, first+1, second)
	})
	t.Run("the fencing floor's pipelines take a fence, refuse a held key and release", func(t *testing.T) {
		for _, c := range []cycler{{"raw-multi", openRawMultiFencedCycle}, {"set-incr", openSetIncrCycle}} {
			cycle, closeLib, err := c.open(srv.Addr())
			require.NoError(t, err, c.name)
			name := "floor:" + c.name
			require.NoError(t, cycle(ctx, name), c.name)
			require.Zero(t, rdb.Exists(ctx, name).Val(), "%s: the key was not released", c.name)
			require.Equal(t, "1", rdb.Get(ctx, name+":fence").Val(), c.name)
			require.NoError(t, rdb.Set(ctx, name, "someone else", time.Minute).Err())
			require.ErrorIs(t, cycle(ctx, name), errRawHeld, c.name)
			require.Equal(t, "someone else", rdb.Get(ctx, name).Val(), c.name)
			require.NoError(t, closeLib())
		}
	})
	t.Run("every uncontended cycle acquires and releases", func(t *testing.T) {
		for _, c := range append(cyclers(), fencedCyclers()...) {
			cycle, closeLib, err := c.open(srv.Addr())
			require.NoError(t, err, c.name)
			require.NoError(t, cycle(ctx, "cycle:"+c.name), c.name)
			require.NoError(t, cycle(ctx, "cycle:"+c.name), "%s: the key was not released", c.name)
			require.NoError(t, closeLib())
		}
	})
}

func TestCallCounter(t *testing.T) {
	ctx := context.Background()
	t.Run("counts a command as one command and one round trip", func(t *testing.T) {
		var counter callCounter
		process := goRedisHook{&counter}.ProcessHook(func(context.Context, redis.Cmder) error { return nil })
		require.NoError(t, process(ctx, redis.NewStatusCmd(ctx, "ping")))
		commands, roundTrips := counter.snapshot()
		require.EqualValues(t, 1, commands)
		require.EqualValues(t, 1, roundTrips)
	})
	t.Run("counts a pipeline as its commands and one round trip", func(t *testing.T) {
		var counter callCounter
		pipeline := goRedisHook{&counter}.ProcessPipelineHook(func(context.Context, []redis.Cmder) error { return nil })
		cmds := []redis.Cmder{redis.NewStatusCmd(ctx, "set", "a", 1), redis.NewStatusCmd(ctx, "set", "b", 2), redis.NewStringCmd(ctx, "get", "a")}
		require.NoError(t, pipeline(ctx, cmds))
		commands, roundTrips := counter.snapshot()
		require.EqualValues(t, 3, commands)
		require.EqualValues(t, 1, roundTrips)
	})
	t.Run("sees what a real client sends", func(t *testing.T) {
		srv := redistest.Start(t)
		var counter callCounter
		rdb := newGoRedis(srv.Addr(), &counter)
		t.Cleanup(func() { rdb.Close() })
		require.NoError(t, rdb.Set(ctx, "a", 1, 0).Err())
		commands, roundTrips := counter.snapshot()
		require.GreaterOrEqual(t, commands, int64(1), "the SET, plus the connection's handshake")
		require.GreaterOrEqual(t, roundTrips, int64(1))
	})
}

func TestAnalyzeHolds(t *testing.T) {
	t.Run("measures the gap from each release to the next acquisition", func(t *testing.T) {
		stats := analyzeHolds([]hold{
			{Holder: 1, AcquiredAt: 300, ReleasingAt: 400},
			{Holder: 0, AcquiredAt: 100, ReleasingAt: 200},
			{Holder: 2, AcquiredAt: 450, ReleasingAt: 500},
		})
		require.NoError(t, stats.check())
		require.Equal(t, []time.Duration{50, 100}, stats.Handoffs)
		require.Equal(t, time.Duration(400), stats.Span)
		require.Equal(t, 3, stats.Acquisitions)
	})
	t.Run("flags two holders at once", func(t *testing.T) {
		stats := analyzeHolds([]hold{
			{Holder: 0, AcquiredAt: 100, ReleasingAt: 200},
			{Holder: 1, AcquiredAt: 150, ReleasingAt: 300},
		})
		require.Equal(t, 1, stats.Overlaps)
		require.ErrorContains(t, stats.check(), "mutual exclusion broken")
	})
	t.Run("takes percentiles by nearest rank", func(t *testing.T) {
		var sorted []time.Duration
		for i := 1; i <= 100; i++ {
			sorted = append(sorted, time.Duration(i))
		}
		require.Equal(t, time.Duration(50), percentile(sorted, 0.50))
		require.Equal(t, time.Duration(99), percentile(sorted, 0.99))
		require.Equal(t, time.Duration(100), percentile(sorted, 1))
		require.Zero(t, percentile(nil, 0.5))
	})
	t.Run("rates fairness as the fewest acquisitions over the most", func(t *testing.T) {
		stats := analyzeHolds([]hold{
			{Holder: 0, AcquiredAt: 1, ReleasingAt: 2}, {Holder: 0, AcquiredAt: 3, ReleasingAt: 4},
			{Holder: 0, AcquiredAt: 5, ReleasingAt: 6}, {Holder: 0, AcquiredAt: 7, ReleasingAt: 8},
			{Holder: 1, AcquiredAt: 9, ReleasingAt: 10}, {Holder: 1, AcquiredAt: 11, ReleasingAt: 12},
		})
		require.InDelta(t, 0.5, stats.fairness([]int{0, 1}), 1e-9)
		require.Zero(t, stats.fairness([]int{0, 1, 2}), "a holder that never acquired starved")
	})
}

func TestBoard(t *testing.T) {
	t.Run("two mappings of one file see each other's counts", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "board")
		first, err := createBoard(path)
		require.NoError(t, err)
		defer first.close()
		second, err := openBoard(path)
		require.NoError(t, err)
		defer second.close()
		require.False(t, second.started())
		first.start()
		require.True(t, second.started())
		require.EqualValues(t, 1, first.acquired())
		require.EqualValues(t, 2, second.acquired())
		require.EqualValues(t, 2, first.count())
	})
	t.Run("waitPast returns once another acquisition is counted", func(t *testing.T) {
		b, err := createBoard(filepath.Join(t.TempDir(), "board"))
		require.NoError(t, err)
		defer b.close()
		n := b.acquired()
		done := make(chan struct{})
		go func() { b.waitPast(n, func() bool { return false }); close(done) }()
		b.acquired()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("waitPast did not return after the count moved")
		}
	})
}

func TestRunHolders(t *testing.T) {
	srv := redistest.Start(t)
	for _, lib := range []string{"raw", "ours", "bsm", "redsync-1ms", "rueidislock"} {
		t.Run(lib+" hands the lock over without overlap until the target", func(t *testing.T) {
			b, path := newTestBoard(t)
			cfg := contendConfig{Lib: lib, Addr: srv.Addr(), Key: "holders:" + lib, Board: path,
				Target: 30, Goroutines: 3, HoldFor: 100 * time.Microsecond, Baton: true, Timeout: time.Minute}
			result := runHolders(cfg, b.start)
			require.Empty(t, result.Err)
			stats := analyzeHolds(result.Holds)
			require.NoError(t, stats.check())
			require.GreaterOrEqual(t, stats.Acquisitions, 30)
			require.Len(t, stats.Handoffs, stats.Acquisitions-1)
			require.Len(t, stats.PerHolder, 3, "with the baton every holder gets a turn")
			require.Positive(t, result.Commands)
			require.Positive(t, result.RoundTrips)
		})
	}
	t.Run("an unknown library is an error, not a panic", func(t *testing.T) {
		_, path := newTestBoard(t)
		result := runHolders(contendConfig{Lib: "nope", Board: path}, func() {})
		require.Contains(t, result.Err, "no contender")
	})
}

func TestChildProcess(t *testing.T) {
	t.Run("a child runs its holders and reports them as JSON", func(t *testing.T) {
		srv := redistest.Start(t)
		b, path := newTestBoard(t)
		cfg := contendConfig{Lib: "raw", Addr: srv.Addr(), Key: "child", Board: path,
			Target: 10, Goroutines: 2, FirstID: 4, Baton: true, WallClock: true, Timeout: time.Minute}
		raw, err := json.Marshal(cfg)
		require.NoError(t, err)
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"="+string(raw))
		stdout, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		readies, results := make(chan error, 1), make(chan contendResult, 1)
		go readChild(stdout, readies, results)
		require.NoError(t, <-readies)
		b.start()
		result := <-results
		require.NoError(t, cmd.Wait())
		require.Empty(t, result.Err)
		stats := analyzeHolds(result.Holds)
		require.NoError(t, stats.check())
		require.GreaterOrEqual(t, stats.Acquisitions, 10)
		require.Equal(t, 2, len(stats.PerHolder))
		require.Contains(t, stats.PerHolder, 4)
		require.Contains(t, stats.PerHolder, 5)
		require.InDelta(t, time.Now().UnixNano(), result.Holds[0].AcquiredAt, float64(time.Minute), "wall-clock times")
	})
	t.Run("a child that cannot start says why", func(t *testing.T) {
		readies, results := make(chan error, 1), make(chan contendResult, 1)
		readChild(strings.NewReader(`{"err":"boom"}`+"\n"), readies, results)
		require.ErrorContains(t, <-readies, "boom")
		require.Equal(t, "boom", (<-results).Err)
	})
}

func TestRenewers(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	for _, lib := range watchdogLibs() {
		t.Run(lib.name+" keeps a lock past its TTL and releases it", func(t *testing.T) {
			var counter callCounter
			r, err := lib.open(srv.Addr(), 600*time.Millisecond, &counter)
			require.NoError(t, err)
			defer r.close()
			h, err := r.hold(ctx, "renew:"+lib.name)
			require.NoError(t, err)
			start := time.Now()
			// Poll with a deadline: the lock must outlive two TTLs.
			for time.Since(start) < 1500*time.Millisecond {
				require.False(t, h.lost(), "lost after %v", time.Since(start))
				time.Sleep(20 * time.Millisecond)
			}
			if r.extensions() >= 0 {
				require.Positive(t, r.extensions())
			}
			_, roundTrips := counter.snapshot()
			require.Greater(t, roundTrips, int64(1), "extensions went through the counted client")
			require.NoError(t, h.release(ctx))
			again, err := r.hold(ctx, "renew:"+lib.name)
			require.NoError(t, err, "the released name is free again")
			require.NoError(t, again.release(ctx))
		})
	}
}

func newTestBoard(t *testing.T) (*board, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "board")
	b, err := createBoard(path)
	require.NoError(t, err)
	t.Cleanup(func() { b.close() })
	return b, path
}
