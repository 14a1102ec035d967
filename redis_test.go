package redislock_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// redisServer is a real redis-server on a free 127.0.0.1 port, started for
// one test and stopped by its cleanup. Nothing is persisted.
type redisServer struct {
	bin    string
	port   int
	extra  []string
	cmd    *exec.Cmd
	exited chan error
}

// requireRedisServer returns the path of redis-server, or skips the test
// when it is missing, unless REDISLOCK_REQUIRE_REDIS is set (as in CI): then
// it fails.
func requireRedisServer(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("REDISLOCK_REQUIRE_REDIS") != "" {
			t.Fatalf("redis-server not found and REDISLOCK_REQUIRE_REDIS is set: %v", err)
		}
		t.Skip("redis-server not found (install it, or set REDISLOCK_REQUIRE_REDIS=1 to fail instead of skipping)")
	}
	return bin
}

func startRedis(t testing.TB, extra ...string) *redisServer {
	t.Helper()
	s := &redisServer{bin: requireRedisServer(t), extra: extra}
	var err error
	for range 5 { // a free port can be taken by someone else before we bind it
		s.port = freePort(t)
		if err = s.start(); err == nil {
			t.Cleanup(s.stop)
			return s
		}
	}
	t.Fatalf("starting redis-server: %v", err)
	return nil
}

func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func (s *redisServer) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

func (s *redisServer) start() error {
	args := append([]string{
		"--bind", "127.0.0.1", "--port", strconv.Itoa(s.port),
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning",
	}, s.extra...)
	cmd := exec.Command(s.bin, args...)
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	defer rdb.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case err := <-exited:
			return fmt.Errorf("redis-server exited: %v", err)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := rdb.Ping(ctx).Err()
		cancel()
		if err == nil {
			s.cmd = cmd
			// Keep the reaper: stop() waits for it.
			s.exited = exited
			return nil
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-exited
			return fmt.Errorf("redis-server did not answer PING within 10s: %v", err)
		}
		time.Sleep(5 * time.Millisecond) // polling interval while it boots
	}
}

// Pause freezes the server (SIGSTOP): connections stay open but nothing
// answers, like a hung host.
func (s *redisServer) Pause(t testing.TB) {
	t.Helper()
	require.NoError(t, s.cmd.Process.Signal(syscall.SIGSTOP))
}

// Resume undoes Pause.
func (s *redisServer) Resume(t testing.TB) {
	t.Helper()
	require.NoError(t, s.cmd.Process.Signal(syscall.SIGCONT))
}

// Kill ends the server at once (SIGKILL), losing every key.
func (s *redisServer) Kill() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGCONT)
	_ = s.cmd.Process.Kill()
	<-s.exited
	s.cmd = nil
}

// Restart kills the server and starts an empty one on the same port.
func (s *redisServer) Restart(t testing.TB) {
	t.Helper()
	s.Kill()
	require.NoError(t, s.start())
}

func (s *redisServer) stop() { s.Kill() }

// backend is one Redis the behavioural tests run against: miniredis, or a
// real redis-server.
type backend struct {
	rdb    *redis.Client
	mini   *miniredis.Miniredis // nil on a real server
	server *redisServer         // nil on miniredis

	infoCalls int64 // INFO commands sent by commandsProcessed
}

// forEachBackend runs test against miniredis and against a real
// redis-server, each fresh.
func forEachBackend(t *testing.T, test func(t *testing.T, b *backend)) {
	t.Helper()
	t.Run("miniredis", func(t *testing.T) {
		mini := miniredis.RunT(t)
		test(t, &backend{rdb: newRedisClient(t, mini.Addr()), mini: mini})
	})
	t.Run("redis-server", func(t *testing.T) {
		server := startRedis(t)
		test(t, &backend{rdb: newRedisClient(t, server.Addr()), server: server})
	})
}

func newRedisClient(t testing.TB, addr string) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// expireNow makes key expire as if its TTL had run out.
func (b *backend) expireNow(t testing.TB, key string) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, b.rdb.PExpire(ctx, key, time.Millisecond).Err())
	if b.mini != nil {
		b.mini.FastForward(time.Millisecond)
	}
	eventually(t, 5*time.Second, func() bool { return b.rdb.Exists(ctx, key).Val() == 0 }, "key %s did not expire", key)
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t testing.TB, within time.Duration, cond func() bool, format string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf(format, args...)
		}
		time.Sleep(2 * time.Millisecond) // polling interval, not a synchronisation
	}
}

// waitDone waits for ctx to end, failing the test after within.
func waitDone(t testing.TB, ctx context.Context, within time.Duration) time.Time {
	t.Helper()
	select {
	case <-ctx.Done():
		return time.Now()
	case <-time.After(within):
		t.Fatalf("context not cancelled within %v", within)
	}
	return time.Time{}
}
