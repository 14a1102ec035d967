// Package redistest starts real redis-server processes for tests, on free
// 127.0.0.1 ports, and stops them when the test ends. It is shared by the
// core's tests and by the nested modules' (same import path tree).
//
// When the redis-server binary is missing, Start skips the test, unless the
// environment sets REDISLOCK_REQUIRE_REDIS (as CI does): then it fails.
package redistest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is one redis-server process. Nothing is persisted.
type Server struct {
	bin    string
	port   int
	extra  []string
	cmd    *exec.Cmd
	exited chan error
}

// Binary returns the path of the named binary (redis-server, redis-cli,
// redis-sentinel), or skips the test when it is missing, unless
// REDISLOCK_REQUIRE_REDIS is set: then it fails.
func Binary(t testing.TB, name string) string {
	t.Helper()
	bin, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("REDISLOCK_REQUIRE_REDIS") != "" {
			t.Fatalf("%s not found and REDISLOCK_REQUIRE_REDIS is set: %v", name, err)
		}
		t.Skipf("%s not found (install it, or set REDISLOCK_REQUIRE_REDIS=1 to fail instead of skipping)", name)
	}
	return bin
}

// Start starts a redis-server on a free 127.0.0.1 port with persistence
// off, plus extra arguments (e.g. "--requirepass", "x"), and stops it in
// t.Cleanup.
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	// Its own --dir, so that nothing (a replica's dump.rdb, say) lands in
	// the repository; a later --dir in extra wins.
	s := &Server{bin: Binary(t, "redis-server"), extra: append([]string{"--dir", t.TempDir()}, extra...)}
	var err error
	for range 5 { // a free port can be taken by someone else before we bind it
		s.port = FreePort(t)
		if err = s.start(); err == nil {
			t.Cleanup(s.Kill)
			return s
		}
	}
	t.Fatalf("starting redis-server: %v", err)
	return nil
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("finding a free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// Addr returns the server's host:port.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Port returns the server's port.
func (s *Server) Port() int { return s.port }

// PID returns the server's process id (0 when not running).
func (s *Server) PID() int {
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

func (s *Server) start() error {
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
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case err := <-exited:
			return fmt.Errorf("redis-server exited: %v", err)
		default:
		}
		if err := ping(s.Addr()); err == nil {
			s.cmd, s.exited = cmd, exited
			return nil
		} else if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-exited
			return fmt.Errorf("redis-server did not answer PING within 10s: %v", err)
		}
		time.Sleep(5 * time.Millisecond) // polling interval while it boots
	}
}

// ping opens a raw connection and expects the server to answer PING; an
// error reply (a password is required, say) still proves it is up.
func ping(addr string) error {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	buf := make([]byte, 1)
	if _, err := conn.Read(buf); err != nil {
		return err
	}
	if buf[0] != '+' && buf[0] != '-' {
		return fmt.Errorf("unexpected reply %q", buf)
	}
	return nil
}

// Client returns a go-redis client on the server, closed in t.Cleanup.
func (s *Server) Client(t testing.TB) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// Pause freezes the server (SIGSTOP): connections stay open but nothing
// answers, like a hung host.
func (s *Server) Pause(t testing.TB) {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP redis-server: %v", err)
	}
}

// Resume undoes Pause (SIGCONT).
func (s *Server) Resume(t testing.TB) {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatalf("SIGCONT redis-server: %v", err)
	}
}

// Kill ends the server at once (SIGKILL), losing every key. Killing a
// stopped server is a no-op.
func (s *Server) Kill() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGCONT)
	_ = s.cmd.Process.Kill()
	<-s.exited
	s.cmd = nil
}

// Restart kills the server and starts an empty one on the same port.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Kill()
	if err := s.start(); err != nil {
		t.Fatalf("restarting redis-server: %v", err)
	}
}
