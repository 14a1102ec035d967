package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/redislock/redislock/internal/redistest"
)

// scriptCase is one script run by BenchmarkServerWork: each op sends setup
// (plain commands, none of them a script) and then EVALSHA of the script.
type scriptCase struct {
	name   string
	script string
	keys   []string
	args   func(i int) []any
	setup  func(pipe redis.Pipeliner, i int)
	inner  int // commands the script runs per call, checked
}

// luaFile reads one of the core module's scripts, as the library sends it:
// release.lua after the function of handover.lua (see scripts.go).
func luaFile(b *testing.B, name string) string {
	raw, err := os.ReadFile(filepath.Join("..", "lua", name))
	if err != nil {
		b.Fatal(err)
	}
	// As the library sends them (scripts.go): after prelude.lua (the clock
	// and the fence step), and handover.lua for a release.
	if name == "release.lua" {
		raw = append([]byte(luaFile(b, "handover.lua")), raw...)
	}
	if name == "prelude.lua" || name == "handover.lua" {
		return string(raw)
	}
	return luaFile(b, "prelude.lua") + string(raw)
}

// BenchmarkServerWork measures what redis-server spends on the scripts of
// one hand-over between Clients (issue 18 part 3), on a server with
// nothing else to do: server-µs/call is the time INFO commandstats gives
// the EVALSHA per call (the commands the script runs included), cmds/call
// the commands the script ran. The cases are a waiter's attempt that
// finds the lock held and queues, the release that hands the lock to it,
// the new holder's extension, and scripts of n TIME calls: what each
// command a script runs costs beyond its own microseconds.
func BenchmarkServerWork(b *testing.B) {
	srv := redistest.Start(b)
	ctx := context.Background()
	rdb := srv.Client(b)
	const tag = "BENCHTAG"
	waiter := func(i int) string { return tag + "." + strconv.Itoa(i) }
	// A waiter's attempt reads the lock, the clock, joins the line (ZADD
	// NX), sets its place's expiry, the two keys' TTLs, and the holder's
	// PTTL: 7 commands. One not in line yet also reads its mark (8: a
	// waiter that left is not let back in, see acquire.lua); coming back
	// every half second while in line, it does not.
	keys := []string{"w:lock", "w:queue", "w:expiries", "w:left"} // no fence: KEYS[1], then the queue's and the mark
	cases := []scriptCase{{
		name: "attempt-queues", script: luaFile(b, "acquire.lua"), inner: 8, keys: keys,
		args: func(i int) []any { return []any{waiter(i), 30000, "0", 1500} },
		setup: func(pipe redis.Pipeliner, i int) {
			if i == 0 {
				pipe.Set(ctx, "w:lock", "holder", 0)
				return
			}
			// The previous waiter leaves: a short queue, as behind a
			// lock that a few processes share.
			pipe.ZRem(ctx, "w:queue", waiter(i-1))
			pipe.ZRem(ctx, "w:expiries", waiter(i-1))
		},
	}, {
		name: "attempt-refreshes", script: luaFile(b, "acquire.lua"), inner: 7, keys: keys,
		args: func(int) []any { return []any{waiter(0), 30000, "0", 1500} },
		setup: func(pipe redis.Pipeliner, i int) {
			if i == 0 { // in line already
				pipe.Set(ctx, "w:lock", "holder", 0)
				pipe.ZAdd(ctx, "w:queue", redis.Z{Score: 1, Member: waiter(0)})
			}
		},
	}, {
		name: "release-hands-over", script: luaFile(b, "release.lua"), inner: 8,
		keys: []string{"w:lock", "w:queue", "w:expiries", "w:shared"},
		args: func(i int) []any { return []any{"holder" + strconv.Itoa(i), "PUBLISH 1000"} },
		setup: func(pipe redis.Pipeliner, i int) {
			pipe.Set(ctx, "w:lock", "holder"+strconv.Itoa(i), 0)
			pipe.ZAdd(ctx, "w:queue", redis.Z{Score: float64(i), Member: waiter(i)})
			pipe.ZAdd(ctx, "w:expiries", redis.Z{Score: 1e13, Member: waiter(i)})
		},
	}, {
		name: "extension", script: luaFile(b, "extend.lua"), inner: 2,
		keys: []string{"w:lock"},
		args: func(int) []any { return []any{"holder", 30000} },
		setup: func(pipe redis.Pipeliner, i int) {
			if i == 0 {
				pipe.Set(ctx, "w:lock", "holder", 0)
			}
		},
	}}
	// What every script that starts with prelude.lua pays for it on each
	// call, beside time-calls=0: its functions (closures) are made anew.
	cases = append(cases, scriptCase{
		name: "prelude-only", script: luaFile(b, "prelude.lua") + "\nreturn 1",
		args: func(int) []any { return nil }, setup: func(redis.Pipeliner, int) {},
	})
	for _, n := range []int{0, 1, 8, 32} {
		cases = append(cases, scriptCase{
			name:   fmt.Sprintf("time-calls=%d", n),
			script: fmt.Sprintf("for i = 1, %d do redis.call('TIME') end return 1", n),
			inner:  n, args: func(int) []any { return nil }, setup: func(redis.Pipeliner, int) {},
		})
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			if err := rdb.FlushAll(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			sha, err := rdb.ScriptLoad(ctx, c.script).Result()
			if err != nil {
				b.Fatal(err)
			}
			before, err := readServerWork(ctx, rdb)
			if err != nil {
				b.Fatal(err)
			}
			setupCalls := int64(0)
			for i := range b.N {
				pipe := rdb.Pipeline()
				c.setup(pipe, i)
				setupCalls += int64(pipe.Len())
				pipe.EvalSha(ctx, sha, c.keys, c.args(i)...)
				if _, err := pipe.Exec(ctx); err != nil {
					b.Fatal(err)
				}
			}
			after, err := readServerWork(ctx, rdb)
			if err != nil {
				b.Fatal(err)
			}
			w := after.since(before)
			calls := w.calls["evalsha"]
			if calls != int64(b.N) {
				b.Fatalf("%d EVALSHA calls counted for %d ops: %v", calls, b.N, w.calls)
			}
			// total leaves out INFO (how the stats are read); HELLO is a
			// connection go-redis opened meanwhile.
			inner := w.calls.total() - calls - setupCalls - w.calls["hello"]
			if inner != int64(c.inner)*calls {
				b.Fatalf("the script ran %d commands in %d calls, want %d each: %v", inner, calls, c.inner, w.calls)
			}
			b.ReportMetric(float64(w.micros["evalsha"])/float64(calls), "server-µs/call")
			b.ReportMetric(float64(inner)/float64(calls), "cmds/call")
		})
	}
}
