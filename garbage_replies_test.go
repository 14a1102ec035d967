package redislock_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redislock/redislock"
)

// closeConn is a fake reply that makes the fake server hang up instead of
// answering.
const closeConn = "<close>"

// fakeRedis is a tiny RESP2 server on 127.0.0.1 that answers the library's
// scripts with whatever a test chooses: the way to see what the library
// does with replies a real Redis would never send.
type fakeRedis struct {
	ln      net.Listener
	scripts map[string]string // SHA1 and source -> script name ("acquire", ...)

	mu      sync.Mutex
	replies map[string]string // script name -> raw RESP reply, or closeConn
	argv    map[string][]string
	conns   map[net.Conn]struct{}
	wg      sync.WaitGroup
}

// startFakeRedis listens on a free loopback port and stops at cleanup. By
// default it answers like a Redis where every lock is free and ours.
func startFakeRedis(t testing.TB) *fakeRedis {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	f := &fakeRedis{
		ln:      ln,
		scripts: map[string]string{},
		replies: map[string]string{
			"acquire": ":0\r\n",
			"extend":  ":1\r\n",
			"release": ":1\r\n",
			"pttl":    ":30000\r\n",
			"inspect": "*11\r\n:0\r\n:-2\r\n$0\r\n\r\n$0\r\n\r\n:0\r\n$0\r\n\r\n:0\r\n$0\r\n\r\n$0\r\n\r\n*0\r\n*0\r\n",
			"break":   "*11\r\n:0\r\n:-2\r\n$0\r\n\r\n$0\r\n\r\n:0\r\n$0\r\n\r\n:0\r\n$0\r\n\r\n$0\r\n\r\n*0\r\n:0\r\n",
			// A multi lock of two names (see TestAMultiLockTurnsEveryGarbageReplyIntoAnError).
			"multi_acquire": "*3\r\n:1\r\n:0\r\n:0\r\n",
			"multi_extend":  "*1\r\n:1\r\n",
			"multi_release": "*1\r\n:1\r\n",
			"multi_pttl":    "*1\r\n:30000\r\n",
		},
		argv:  map[string][]string{},
		conns: map[net.Conn]struct{}{},
	}
	for name := range f.replies {
		// As the library sends it: some start with the functions of other
		// files (scripts.go).
		sha, src := redislock.Script(name)
		f.scripts[sha] = name
		f.scripts[src] = name
	}
	f.wg.Add(1)
	go f.serve()
	t.Cleanup(f.stop)
	return f
}

func (f *fakeRedis) addr() string { return f.ln.Addr().String() }

// answer sets the raw reply to the named script.
func (f *fakeRedis) answer(script, raw string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.replies[script] = raw
}

// lastArgv returns the ARGV of the last call of the named script.
func (f *fakeRedis) lastArgv(script string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.argv[script]
}

func (f *fakeRedis) stop() {
	_ = f.ln.Close()
	f.mu.Lock()
	for c := range f.conns {
		_ = c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}

func (f *fakeRedis) serve() {
	defer f.wg.Done()
	for {
		conn, err := f.ln.Accept()
		if err != nil {
			return
		}
		f.mu.Lock()
		f.conns[conn] = struct{}{}
		f.mu.Unlock()
		f.wg.Add(1)
		go f.handle(conn)
	}
}

func (f *fakeRedis) handle(conn net.Conn) {
	defer f.wg.Done()
	defer func() {
		_ = conn.Close()
		f.mu.Lock()
		delete(f.conns, conn)
		f.mu.Unlock()
	}()
	r := bufio.NewReader(conn)
	for {
		cmd, err := readCommand(r)
		if err != nil {
			return
		}
		reply := f.reply(cmd)
		if reply == closeConn {
			return
		}
		if _, err := io.WriteString(conn, reply); err != nil {
			return
		}
	}
}

// reply chooses the answer to one command.
func (f *fakeRedis) reply(cmd []string) string {
	switch strings.ToUpper(cmd[0]) {
	case "HELLO":
		// Like a Redis older than 6: go-redis falls back to RESP2.
		return "-ERR unknown command 'HELLO'\r\n"
	case "EVALSHA", "EVAL":
		if len(cmd) < 3 {
			return "-ERR wrong number of arguments\r\n"
		}
		name, ok := f.scripts[cmd[1]]
		if !ok {
			return "-NOSCRIPT No matching script.\r\n"
		}
		numKeys, err := strconv.Atoi(cmd[2])
		if err != nil || 3+numKeys > len(cmd) {
			return "-ERR bad numkeys\r\n"
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		f.argv[name] = cmd[3+numKeys:]
		return f.replies[name]
	case "SET":
		// A plain lock's first attempt. Unless a test says otherwise the
		// key is taken, so that the acquire script runs and answers.
		f.mu.Lock()
		defer f.mu.Unlock()
		f.argv["set"] = cmd[1:]
		if reply, ok := f.replies["set"]; ok {
			return reply
		}
		return "$-1\r\n"
	}
	return "+OK\r\n"
}

// readCommand reads one RESP array of bulk strings, the form every client
// sends.
func readCommand(r *bufio.Reader) ([]string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if !strings.HasPrefix(line, "*") {
		return nil, fmt.Errorf("not an array: %q", line)
	}
	n, err := strconv.Atoi(strings.TrimSpace(line[1:]))
	if err != nil || n < 1 {
		return nil, fmt.Errorf("bad array header %q", line)
	}
	cmd := make([]string, n)
	for i := range cmd {
		line, err := r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		size, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "$")))
		if err != nil || size < 0 {
			return nil, fmt.Errorf("bad bulk header %q", line)
		}
		buf := make([]byte, size+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		cmd[i] = string(buf[:size])
	}
	return cmd, nil
}

// fakeClient is a go-redis client on the fake server that does not retry,
// so each call sees exactly one garbage reply.
func fakeClient(t testing.TB, f *fakeRedis) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{
		Addr: f.addr(), MaxRetries: -1,
		DialTimeout: 2 * time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second,
	})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// garbage is a reply no script of the library can produce.
type garbage struct{ name, raw string }

// commonGarbage are replies that are wrong for every script.
var commonGarbage = []garbage{
	{"an error reply", "-ERR something broke\r\n"},
	{"a WRONGTYPE error", "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n"},
	{"a NOPERM error", "-NOPERM this user has no permissions to run the 'evalsha' command\r\n"},
	{"a nil bulk string", "$-1\r\n"},
	{"a nil array", "*-1\r\n"},
	{"a non-numeric bulk string", "$5\r\nhello\r\n"},
	{"an empty bulk string", "$0\r\n\r\n"},
	{"a status reply", "+OK\r\n"},
	{"a closed connection", closeConn},
}

// setGarbage is every garbage answer to a SET NX: all but its two real
// answers, set (+OK) and not set (a nil).
func setGarbage() []garbage {
	var wrong []garbage
	for _, g := range append(append([]garbage{
		{"an integer", ":1\r\n"},
		{"another status", "+QUEUED\r\n"},
	}, arrayGarbage...), commonGarbage...) {
		if g.raw != "+OK\r\n" && g.raw != "$-1\r\n" && g.raw != "*-1\r\n" {
			wrong = append(wrong, g)
		}
	}
	return wrong
}

// arrayGarbage are arrays, wrong for every script.
var arrayGarbage = []garbage{
	{"an empty array", "*0\r\n"},
	{"an array of one", "*1\r\n:1\r\n"},
	{"an array of three", "*3\r\n:1\r\n:0\r\n:0\r\n"},
	{"an array with a nil", "*2\r\n:1\r\n$-1\r\n"},
	{"an array with a word", "*2\r\n:1\r\n$3\r\nabc\r\n"},
	{"an array with an error", "*2\r\n:1\r\n-ERR inner\r\n"},
	{"a nested array", "*2\r\n*1\r\n:1\r\n:0\r\n"},
	{"a number too big for int64", "*2\r\n:1\r\n:99999999999999999999\r\n"},
}

func TestAcquireTurnsEveryGarbageReplyIntoAnError(t *testing.T) {
	f := startFakeRedis(t)
	rdb := fakeClient(t, f)
	ctx := context.Background()

	cases := append(append([]garbage{}, commonGarbage...), arrayGarbage...)
	cases = append(cases,
		garbage{"the array this script used to answer", "*2\r\n:1\r\n:0\r\n"},
		garbage{"a number too big for int64", ":99999999999999999999\r\n"},
	)
	for _, g := range cases {
		t.Run(g.name, func(t *testing.T) {
			f.answer("acquire", g.raw)
			for _, fencing := range []bool{false, true} {
				opts := []redislock.Option{quiet, redislock.WithWatchdog(false)}
				if fencing {
					opts = append(opts, redislock.WithFencing())
				}
				l, err := redislock.New(rdb, opts...).Acquire(ctx, "job")
				require.Error(t, err, "fencing=%v", fencing)
				require.Nil(t, l, "no lock from garbage")
				require.NotErrorIs(t, err, redislock.ErrNotAcquired, "garbage is not 'held by someone else'")
				require.NotErrorIs(t, err, redislock.ErrInvalidArgument)
				require.Contains(t, err.Error(), `acquire "job"`, "the error names the operation and the lock")

				ran := false
				err = redislock.New(rdb, opts...).RunWithLock(ctx, "job", func(context.Context) error { ran = true; return nil })
				require.Error(t, err)
				require.False(t, ran, "fn never runs on garbage (fail closed)")
			}
		})
	}

	t.Run("a plain lock's SET NX answered with garbage", func(t *testing.T) {
		f.answer("acquire", ":0\r\n") // the script would grant it
		f.answer("release", ":1\r\n")
		defer func() {
			f.mu.Lock()
			delete(f.replies, "set")
			f.mu.Unlock()
		}()
		// A Client sends SET NX only once a script of ours ran on the
		// server: this first cycle runs the scripts.
		c := redislock.New(rdb, quiet, redislock.WithWatchdog(false))
		l, err := c.Acquire(ctx, "job")
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))
		for _, g := range setGarbage() {
			f.answer("set", g.raw)
			l, err := c.Acquire(ctx, "job")
			require.Error(t, err, g.name)
			require.Nil(t, l, g.name)
			require.NotErrorIs(t, err, redislock.ErrNotAcquired, g.name)
			require.Contains(t, err.Error(), `acquire "job"`, g.name)
		}
		f.answer("set", "+OK\r\n") // the control: a real "set"
		l, err = c.Acquire(ctx, "job")
		require.NoError(t, err)
		require.Equal(t, []string{"lock:{job}", l.Token(), "nx", "px", "30000"}, f.lastArgv("set"),
			"SET key token NX PX ttl")
	})

	t.Run("the fake server answers a well-formed reply with a lock", func(t *testing.T) {
		// The control: the same server and client do give a lock when the
		// reply is right, so the errors above come from the garbage.
		f.answer("acquire", ":0\r\n")
		l, err := redislock.New(rdb, quiet, redislock.WithWatchdog(false)).Acquire(ctx, "job")
		require.NoError(t, err)
		require.Equal(t, l.Token(), f.lastArgv("acquire")[0], "the token went to the server as ARGV[1]")
		require.NoError(t, l.Release(ctx))
	})

	t.Run("a fence that does not match the request is not a lock", func(t *testing.T) {
		f.answer("acquire", ":0\r\n") // no fence, though one was asked for
		l, err := redislock.New(rdb, quiet, redislock.WithWatchdog(false), redislock.WithFencing()).Acquire(ctx, "job")
		require.Error(t, err)
		require.NotErrorIs(t, err, redislock.ErrNotAcquired)
		require.Nil(t, l)
		f.answer("acquire", ":7\r\n") // a fence nobody asked for
		l, err = redislock.New(rdb, quiet, redislock.WithWatchdog(false)).Acquire(ctx, "job")
		require.Error(t, err)
		require.NotErrorIs(t, err, redislock.ErrNotAcquired)
		require.Nil(t, l)
		f.answer("acquire", ":7\r\n") // the control: asked for, a fence is a lock
		l, err = redislock.New(rdb, quiet, redislock.WithWatchdog(false), redislock.WithFencing()).Acquire(ctx, "job")
		require.NoError(t, err)
		require.Equal(t, int64(7), l.Fence())
		require.NoError(t, l.Release(ctx))
	})

	t.Run("a held reply with a nonsense holder TTL is not a lock", func(t *testing.T) {
		for _, raw := range []string{":-9223372036854775808\r\n", ":-9223372036854775807\r\n"} {
			f.answer("acquire", raw)
			// Its strategy (three waits of 1 ms) ends it; the ctx only bounds
			// a hang (50 ms could end before the first answer, under load).
			waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
			l, err := redislock.New(rdb, quiet).Acquire(waitCtx, "job",
				redislock.WithRetry(redislock.LimitRetry(redislock.LinearBackoff(time.Millisecond), 3)))
			cancel()
			require.ErrorIs(t, err, redislock.ErrNotAcquired, "reply %q", raw)
			require.Nil(t, l)
		}
	})
}

// heldOnFake returns a lock held on the fake server (well-formed replies),
// with the watchdog off so that only the test's calls reach the server.
func TestInspectAndBreakTurnEveryGarbageReplyIntoAnError(t *testing.T) {
	f := startFakeRedis(t)
	rdb := fakeClient(t, f)
	ctx := context.Background()
	c := redislock.New(rdb, quiet)

	word := func(s string) string { return fmt.Sprintf("$%d\r\n%s\r\n", len(s), s) }
	// state is a reply of lua/inspect.lua: lua/state.lua's (held, pttl,
	// metadata, fence, waiters, holder, count, kind, limit, then holders),
	// then an empty queue (raw RESP).
	none := "*0\r\n"
	state := func(held, pttl, metadata, fence, waiters, holder, count, kind, limit, holders string) string {
		return "*11\r\n" + held + pttl + metadata + fence + waiters + holder + count + kind + limit + holders + none
	}
	// queued is a free lock's reply with the queue queue.
	queued := func(queue string) string {
		return strings.TrimSuffix(state(":0\r\n", ":-2\r\n", word(""), word(""), ":2\r\n", word(""), ":0\r\n", word(""), word(""), none), none) + queue
	}
	// holder is one holder in the holders list: ID, metadata, lease left.
	holder := func(id, metadata, left string) string { return word(id) + word(metadata) + left }
	const id = "0123456789abcdef"
	lockHolder := "*3\r\n" + holder(id, "", ":1500\r\n")

	t.Run("the fake server's well-formed replies are read", func(t *testing.T) {
		info, err := c.Inspect(ctx, "job")
		require.NoError(t, err)
		require.False(t, info.Held)
		f.answer("inspect", state(":1\r\n", ":1500\r\n", word("host=a"), word("42"), ":3\r\n", word("abcd"), ":0\r\n", word("lock"), word(""), "*3\r\n"+holder(id, "host=a", ":1500\r\n")))
		info, err = c.Inspect(ctx, "job")
		require.NoError(t, err)
		require.Equal(t, redislock.Info{Name: "job", Key: "lock:{job}", Held: true, TTL: 1500 * time.Millisecond, Metadata: "host=a", Fence: 42, Waiters: 3,
			Kind: "lock", Count: 1, Holders: []redislock.HolderInfo{{ID: id, Metadata: "host=a", TTL: 1500 * time.Millisecond}}}, info)
		f.answer("inspect", state(":1\r\n", ":1500\r\n", word(""), word("42"), ":3\r\n", word("abcd"), ":2\r\n", word("shared"), word(""),
			"*6\r\n"+holder(id, "host=a", ":1200\r\n")+holder("fedcba9876543210", "", ":1500\r\n")))
		info, err = c.Inspect(ctx, "job")
		require.NoError(t, err)
		require.Equal(t, redislock.Info{Name: "job", Key: "lock:{job}", Held: true, TTL: 1500 * time.Millisecond, Fence: 42, Waiters: 3, Shared: 2,
			Kind: "shared", Count: 2, Holders: []redislock.HolderInfo{{ID: id, Metadata: "host=a", TTL: 1200 * time.Millisecond}, {ID: "fedcba9876543210", TTL: 1500 * time.Millisecond}}}, info)
		f.answer("inspect", state(":1\r\n", ":1500\r\n", word(""), word(""), ":0\r\n", word(""), ":101\r\n", word("semaphore"), word("200"),
			"*3\r\n"+holder(id, "host=b", ":900\r\n")))
		info, err = c.Inspect(ctx, "job")
		require.NoError(t, err)
		require.Equal(t, redislock.Info{Name: "job", Key: "lock:{job}", Held: true, TTL: 1500 * time.Millisecond,
			Kind: "semaphore", Count: 101, Limit: 200, Holders: []redislock.HolderInfo{{ID: id, Metadata: "host=b", TTL: 900 * time.Millisecond}}}, info)
		f.answer("inspect", queued("*4\r\n"+word("w=a")+":1500000\r\n"+word("")+":20\r\n"))
		info, err = c.Inspect(ctx, "job")
		require.NoError(t, err)
		require.Equal(t, redislock.Info{Name: "job", Key: "lock:{job}", Waiters: 2,
			Queue: []redislock.WaiterInfo{{Metadata: "w=a", Waited: 1500 * time.Millisecond}, {Waited: 20 * time.Microsecond}}}, info)
		_, err = c.Break(ctx, "job")
		require.NoError(t, err)
	})

	held := func(count, kind, limit, holders string) string {
		return state(":1\r\n", ":1500\r\n", word(""), word(""), ":0\r\n", word(""), count, word(kind), word(limit), holders)
	}
	cases := append(append([]garbage{}, commonGarbage...), arrayGarbage...)
	cases = append(cases,
		garbage{"held as 2", state(":2\r\n", ":1500\r\n", word(""), word(""), ":0\r\n", word(""), ":0\r\n", word("lock"), word(""), lockHolder)},
		garbage{"held as a word", state(word("1"), ":1500\r\n", word(""), word(""), ":0\r\n", word(""), ":0\r\n", word("lock"), word(""), lockHolder)},
		garbage{"a free lock with a TTL", state(":0\r\n", ":1500\r\n", word(""), word(""), ":0\r\n", word(""), ":0\r\n", word(""), word(""), none)},
		garbage{"a free lock with metadata", state(":0\r\n", ":-2\r\n", word("host=a"), word(""), ":0\r\n", word(""), ":0\r\n", word(""), word(""), none)},
		garbage{"a free lock with shared holders", state(":0\r\n", ":-2\r\n", word(""), word(""), ":0\r\n", word(""), ":3\r\n", word(""), word(""), none)},
		garbage{"a free lock of a kind", state(":0\r\n", ":-2\r\n", word(""), word(""), ":0\r\n", word(""), ":0\r\n", word("lock"), word(""), none)},
		garbage{"a free lock with holders", state(":0\r\n", ":-2\r\n", word(""), word(""), ":0\r\n", word(""), ":0\r\n", word(""), word(""), lockHolder)},
		garbage{"a held lock with PTTL -2", state(":1\r\n", ":-2\r\n", word(""), word(""), ":0\r\n", word("ab"), ":0\r\n", word("lock"), word(""), lockHolder)},
		garbage{"negative waiters", state(":1\r\n", ":1500\r\n", word(""), word(""), ":-1\r\n", word("ab"), ":0\r\n", word("lock"), word(""), lockHolder)},
		garbage{"negative shared holders", held(":-1\r\n", "shared", "", none)},
		garbage{"shared holders as a word", held(word("2"), "shared", "", none)},
		garbage{"a fence as a number", state(":1\r\n", ":1500\r\n", word(""), ":7\r\n", ":0\r\n", word("ab"), ":0\r\n", word("lock"), word(""), lockHolder)},
		garbage{"an unknown kind", held(":0\r\n", "mutex", "", none)},
		garbage{"a held lock without a kind", held(":0\r\n", "", "", none)},
		garbage{"an exclusive lock with two holders", held(":0\r\n", "lock", "", "*6\r\n"+holder(id, "", ":5\r\n")+holder(id, "", ":5\r\n"))},
		garbage{"an exclusive lock without its holder", held(":0\r\n", "lock", "", none)},
		garbage{"an exclusive lock with a limit", held(":0\r\n", "lock", "3", lockHolder)},
		garbage{"a semaphore without holders", held(":0\r\n", "semaphore", "3", none)},
		garbage{"a semaphore limit that is no number", held(":1\r\n", "semaphore", "three", "*3\r\n"+holder(id, "", ":5\r\n"))},
		garbage{"more holders listed than counted", held(":1\r\n", "shared", "", "*6\r\n"+holder(id, "", ":5\r\n")+holder(id, "", ":5\r\n"))},
		garbage{"a holder without its lease", held(":1\r\n", "shared", "", "*2\r\n"+word(id)+word(""))},
		garbage{"a holder's negative lease", held(":1\r\n", "shared", "", "*3\r\n"+holder(id, "", ":-5\r\n"))},
		garbage{"a holder's lease as a word", held(":1\r\n", "shared", "", "*3\r\n"+holder(id, "", word("5")))},
		garbage{"a holder's ID that is not 16 digits", held(":1\r\n", "shared", "", "*3\r\n"+holder("abc", "", ":5\r\n"))},
		garbage{"a holder's ID as a number", held(":1\r\n", "shared", "", "*3\r\n:5\r\n"+word("")+":5\r\n")},
		garbage{"holders as a word", held(":1\r\n", "shared", "", word("x"))},
		garbage{"an array of seven (before the kinds)", "*7\r\n:1\r\n:1500\r\n" + word("") + word("") + ":0\r\n" + word("ab") + ":0\r\n"},
		garbage{"a waiter without its wait", queued("*1\r\n" + word("w=a"))},
		garbage{"a waiter's negative wait", queued("*2\r\n" + word("w=a") + ":-1\r\n")},
		garbage{"a waiter's wait as a word", queued("*2\r\n" + word("w=a") + word("5"))},
		garbage{"a waiter's metadata as a number", queued("*2\r\n:1\r\n:5\r\n")},
		garbage{"more than 100 waiters", queued("*202\r\n" + strings.Repeat(word("")+":5\r\n", 101))},
		garbage{"the queue as a word", queued(word("x"))},
		garbage{"an array of twelve", "*12\r\n:1\r\n:1500\r\n" + word("") + word("") + ":0\r\n" + word("ab") + ":0\r\n" + word("lock") + word("") + none + ":0\r\n:0\r\n"},
	)
	for _, g := range cases {
		t.Run(g.name, func(t *testing.T) {
			f.answer("inspect", g.raw)
			info, err := c.Inspect(ctx, "job")
			require.Error(t, err)
			require.False(t, info.Held, "no holder from garbage")
			require.Contains(t, err.Error(), `inspect "job"`)
			f.answer("break", g.raw)
			_, err = c.Break(ctx, "job")
			require.Error(t, err)
			require.Contains(t, err.Error(), `break "job"`)
		})
	}
	t.Run("a break reply whose hand-over flag is not 0 or 1", func(t *testing.T) {
		f.answer("break", "*11\r\n:1\r\n:1500\r\n"+word("")+word("")+":0\r\n"+word("ab")+":0\r\n"+word("lock")+word("")+lockHolder+":5\r\n")
		_, err := c.Break(ctx, "job")
		require.ErrorContains(t, err, "unexpected reply")
	})
}

func heldOnFake(t *testing.T, f *fakeRedis, rdb *redis.Client) *redislock.Lock {
	t.Helper()
	f.answer("acquire", ":0\r\n")
	f.answer("extend", ":1\r\n")
	f.answer("release", ":1\r\n")
	f.answer("pttl", ":30000\r\n")
	l, err := redislock.New(rdb, quiet, redislock.WithWatchdog(false)).Acquire(context.Background(), "job")
	require.NoError(t, err)
	return l
}

func TestExtendReleaseAndTTLTurnEveryGarbageReplyIntoAnError(t *testing.T) {
	f := startFakeRedis(t)
	rdb := fakeClient(t, f)
	ctx := context.Background()
	cases := append(append([]garbage{}, commonGarbage...), arrayGarbage...)

	for _, g := range cases {
		t.Run(g.name, func(t *testing.T) {
			t.Run("Extend", func(t *testing.T) {
				l := heldOnFake(t, f, rdb)
				f.answer("extend", g.raw)
				require.Error(t, l.Extend(ctx, time.Minute))
				f.answer("extend", ":1\r\n")
				require.NoError(t, l.Extend(ctx, time.Minute), "a garbage reply leaves the lock as it was")
				require.NoError(t, l.Release(ctx))
			})
			t.Run("Release", func(t *testing.T) {
				l := heldOnFake(t, f, rdb)
				f.answer("release", g.raw)
				err := l.Release(ctx)
				require.Error(t, err)
				require.ErrorIs(t, context.Cause(l.Context()), redislock.ErrReleased, "the hold ended all the same")
				f.answer("release", ":1\r\n")
				require.NoError(t, l.Release(ctx), "Release may be called again after an error")
			})
			t.Run("TTL", func(t *testing.T) {
				l := heldOnFake(t, f, rdb)
				f.answer("pttl", g.raw)
				ttl, err := l.TTL(ctx)
				require.Error(t, err)
				require.Zero(t, ttl)
				require.NoError(t, l.Release(ctx))
			})
		})
	}

	t.Run("an unknown integer from extend or release means the lock is not ours", func(t *testing.T) {
		for _, raw := range []string{":2\r\n", ":-5\r\n", ":9223372036854775807\r\n"} {
			l := heldOnFake(t, f, rdb)
			f.answer("extend", raw)
			require.ErrorIs(t, l.Extend(ctx, time.Minute), redislock.ErrNotHeld, "extend reply %q", raw)
			requireLost(t, l.Context(), redislock.Taken)
			require.NoError(t, l.Release(ctx), "the key may still be ours: release still tries")

			l = heldOnFake(t, f, rdb)
			f.answer("release", raw)
			require.ErrorIs(t, l.Release(ctx), redislock.ErrNotHeld, "release reply %q", raw)
		}
	})

	t.Run("a negative TTL other than the documented ones is an error", func(t *testing.T) {
		for _, raw := range []string{":-1\r\n", ":-4\r\n", ":-9223372036854775808\r\n", ":9223372036854775807\r\n"} {
			l := heldOnFake(t, f, rdb)
			f.answer("pttl", raw)
			ttl, err := l.TTL(ctx)
			require.Error(t, err, "pttl reply %q", raw)
			require.Zero(t, ttl)
			require.NoError(t, l.Release(ctx))
		}
	})
}

func TestWrongTypeKeysAreErrorsNeverLocks(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		c := redislock.New(b.rdb, quiet, redislock.WithWatchdog(false))
		setters := map[string]func(key string) error{
			"hash":   func(key string) error { return b.rdb.HSet(ctx, key, "f", "v").Err() },
			"list":   func(key string) error { return b.rdb.RPush(ctx, key, "v").Err() },
			"set":    func(key string) error { return b.rdb.SAdd(ctx, key, "v").Err() },
			"sorted": func(key string) error { return b.rdb.ZAdd(ctx, key, redis.Z{Score: 1, Member: "v"}).Err() },
		}
		for kind, set := range setters {
			t.Run("Acquire on a key holding a "+kind, func(t *testing.T) {
				name := "acq-" + kind
				require.NoError(t, set("lock:{"+name+"}"))
				for _, opts := range [][]redislock.Option{nil, {redislock.WithFencing()}} {
					l, err := c.Acquire(ctx, name, opts...)
					require.Error(t, err)
					require.Nil(t, l)
					require.NotErrorIs(t, err, redislock.ErrNotAcquired)
					require.ErrorContains(t, err, "WRONGTYPE")
					require.False(t, errors.Is(err, redislock.ErrInvalidArgument))
				}
				require.Equal(t, kind, typeName(b.rdb.Type(ctx, "lock:{"+name+"}").Val()), "the foreign value is untouched")
			})
			t.Run("fence counter holding a "+kind, func(t *testing.T) {
				name := "fence-" + kind
				require.NoError(t, set("lock:{"+name+"}:fence"))
				l, err := c.Acquire(ctx, name, redislock.WithFencing())
				require.Error(t, err)
				require.Nil(t, l)
				require.ErrorContains(t, err, "WRONGTYPE")
				require.Zero(t, b.rdb.Exists(ctx, "lock:{"+name+"}").Val(), "the failed acquire left no lock")
			})
			t.Run("a held lock whose key became a "+kind, func(t *testing.T) {
				name := "held-" + kind
				replace := func(l *redislock.Lock) {
					t.Helper()
					require.NoError(t, b.rdb.Del(ctx, l.Key()).Err())
					require.NoError(t, set(l.Key()))
				}

				l, err := c.Acquire(ctx, name)
				require.NoError(t, err)
				replace(l)
				ttl, err := l.TTL(ctx)
				require.ErrorIs(t, err, redislock.ErrNotHeld, "TTL")
				require.Zero(t, ttl)
				require.ErrorIs(t, l.Extend(ctx, time.Minute), redislock.ErrNotHeld, "Extend")
				requireLost(t, l.Context(), redislock.Taken)
				require.ErrorIs(t, l.Release(ctx), redislock.ErrNotHeld, "Release")
				require.Equal(t, kind, typeName(b.rdb.Type(ctx, l.Key()).Val()), "the foreign value is untouched")
				require.NoError(t, b.rdb.Del(ctx, l.Key()).Err())

				l, err = c.Acquire(ctx, name)
				require.NoError(t, err)
				replace(l)
				require.ErrorIs(t, l.Release(ctx), redislock.ErrNotHeld, "Release without Extend first")
				require.Equal(t, kind, typeName(b.rdb.Type(ctx, l.Key()).Val()), "release did not delete the foreign value")
			})
		}
	})
}

// typeName maps Redis TYPE replies to the names used in the test above.
func typeName(redisType string) string {
	if redisType == "zset" {
		return "sorted"
	}
	return redisType
}

func TestAFenceCounterBelowZeroIsAnErrorNeverALock(t *testing.T) {
	// A counter someone set negative would give fences that read as
	// "held" and numbers handed out before: the script refuses, and
	// leaves nothing held.
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		c := redislock.New(b.rdb, quiet, redislock.WithWatchdog(false), redislock.WithFencing())
		for _, counter := range []string{"-5", "-1"} {
			require.NoError(t, b.rdb.Set(ctx, "lock:{job}:fence", counter, 0).Err())
			l, err := c.Acquire(ctx, "job")
			require.Error(t, err, "counter %s", counter)
			require.Nil(t, l)
			require.NotErrorIs(t, err, redislock.ErrNotAcquired)
			require.ErrorContains(t, err, "not a positive number")
			require.Zero(t, b.rdb.Exists(ctx, "lock:{job}").Val(), "the failed acquire left no lock")
		}
		// From zero on, fences are positive again.
		require.NoError(t, b.rdb.Set(ctx, "lock:{job}:fence", "0", 0).Err())
		l, err := c.Acquire(ctx, "job")
		require.NoError(t, err)
		require.Positive(t, l.Fence())
		require.NoError(t, l.Release(ctx))
	})
}

func TestAMultiLockTurnsEveryGarbageReplyIntoAnError(t *testing.T) {
	f := startFakeRedis(t)
	rdb := fakeClient(t, f)
	ctx := context.Background()
	names := []string{"a", "b"}
	// Each script's real answers for a lock of two names: taken ({1, fences}),
	// done (1), a name gone or another's ({0, i}, {-1, i}), a lease
	// (ms), and pttl's losses ({-2, i}, {-3, i}).
	good := map[string]string{"multi_acquire": "*3\r\n:1\r\n:0\r\n:0\r\n",
		"multi_extend": ":1\r\n", "multi_release": ":1\r\n", "multi_pttl": ":30000\r\n"}
	valid := map[string][]string{
		"multi_acquire": {good["multi_acquire"]},
		"multi_extend":  {":1\r\n", "*2\r\n:0\r\n:1\r\n"},
		"multi_release": {":1\r\n", "*2\r\n:0\r\n:1\r\n"},
		"multi_pttl":    {":1\r\n"},
	}
	held := func(t *testing.T) *redislock.Lock {
		t.Helper()
		for script, raw := range good {
			f.answer(script, raw)
		}
		l, err := redislock.New(rdb, quiet, redislock.WithWatchdog(false)).AcquireMulti(ctx, names)
		require.NoError(t, err)
		return l
	}
	cases := append(append([]garbage{}, commonGarbage...), arrayGarbage...)
	cases = append(cases,
		garbage{"a name gone, as pttl never says it", "*2\r\n:0\r\n:1\r\n"},
		garbage{"acquired, without the fences", "*1\r\n:1\r\n"},
		garbage{"a name beyond the lock's", "*3\r\n:0\r\n:3\r\n:100\r\n"},
		garbage{"a verdict on no name", "*2\r\n:-1\r\n:0\r\n"},
		garbage{"a lease with a name", "*2\r\n:5\r\n:1\r\n"},
		// A refusal's shape with a word where the code goes: no refusal.
		garbage{"a refusal with a word for its code", "*3\r\n$1\r\n0\r\n:1\r\n:100\r\n"})
	for _, g := range cases {
		t.Run(g.name, func(t *testing.T) {
			for _, script := range []string{"multi_acquire", "multi_extend", "multi_release", "multi_pttl"} {
				if slices.Contains(valid[script], g.raw) {
					continue
				}
				if script == "multi_acquire" {
					f.answer(script, g.raw)
					l, err := redislock.New(rdb, quiet, redislock.WithWatchdog(false)).AcquireMulti(ctx, names)
					require.Error(t, err)
					require.Nil(t, l, "no lock from garbage")
					require.NotErrorIs(t, err, redislock.ErrNotAcquired, "garbage is not 'held by someone else'")
					continue
				}
				l := held(t)
				f.answer(script, g.raw)
				var err error
				switch script {
				case "multi_extend":
					err = l.Extend(ctx, time.Minute)
				case "multi_release":
					err = l.Release(ctx)
				default:
					_, err = l.TTL(ctx)
				}
				require.Error(t, err, script)
				f.answer(script, good[script])
				_ = l.Release(ctx) // (may have ended already)
			}
		})
	}

	t.Run("a multi lock's SET NX answered with garbage", func(t *testing.T) {
		defer func() {
			f.mu.Lock()
			delete(f.replies, "set")
			f.mu.Unlock()
		}()
		// A Client sends SET NX only once a script of ours ran: held runs them.
		c := redislock.New(rdb, quiet, redislock.WithWatchdog(false))
		l, err := c.AcquireMulti(ctx, names)
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))
		for _, g := range setGarbage() {
			f.answer("set", g.raw)
			l, err := c.AcquireMulti(ctx, names)
			require.Error(t, err, g.name)
			require.Nil(t, l, g.name)
			require.NotErrorIs(t, err, redislock.ErrNotAcquired, g.name)
		}
		f.answer("set", "+OK\r\n") // the control: a real "set"
		l, err = c.AcquireMulti(ctx, names)
		require.NoError(t, err)
		require.Equal(t, []string{"lock:{b}", l.Token(), "nx", "px", "30000"}, f.lastArgv("set"), "SET key token NX PX ttl")
		require.NoError(t, l.Release(ctx))
	})
}
