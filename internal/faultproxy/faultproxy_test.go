package faultproxy_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/redislock/redislock/internal/faultproxy"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// echoServer echoes every line back until the test ends.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, conn)
			mu.Unlock()
			wg.Go(func() { _, _ = io.Copy(conn, conn) })
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

func newProxy(t *testing.T) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.New(echoServer(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func dial(t *testing.T, p *faultproxy.Proxy) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return conn, bufio.NewReader(conn)
}

// roundTrip sends a line and reads it back, within timeout.
func roundTrip(conn net.Conn, r *bufio.Reader, line string, timeout time.Duration) (string, error) {
	_ = conn.SetDeadline(time.Now().Add(timeout))
	defer func() { _ = conn.SetDeadline(time.Time{}) }()
	if _, err := conn.Write([]byte(line + "\n")); err != nil {
		return "", err
	}
	got, err := r.ReadString('\n')
	if len(got) > 0 {
		got = got[:len(got)-1]
	}
	return got, err
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func TestProxyModes(t *testing.T) {
	t.Run("pass forwards both ways", func(t *testing.T) {
		p := newProxy(t)
		conn, r := dial(t, p)
		got, err := roundTrip(conn, r, "hello", 5*time.Second)
		require.NoError(t, err)
		require.Equal(t, "hello", got)
	})

	t.Run("delay holds every chunk back by at least the delay", func(t *testing.T) {
		p := newProxy(t)
		conn, r := dial(t, p)
		p.SetDelay(100 * time.Millisecond)
		start := time.Now()
		got, err := roundTrip(conn, r, "slow", 5*time.Second)
		require.NoError(t, err)
		require.Equal(t, "slow", got)
		require.GreaterOrEqual(t, time.Since(start), 200*time.Millisecond, "delayed on the way there and back")
	})

	t.Run("blackhole keeps the connection open and delivers nothing", func(t *testing.T) {
		p := newProxy(t)
		conn, r := dial(t, p)
		_, err := roundTrip(conn, r, "before", 5*time.Second)
		require.NoError(t, err)
		p.SetMode(faultproxy.Blackhole)
		_, err = roundTrip(conn, r, "lost", 200*time.Millisecond)
		require.True(t, isTimeout(err), "a read timeout, not a closed connection: %v", err)
		require.Equal(t, 1, p.Conns())
		p.SetMode(faultproxy.Pass)
		got, err := roundTrip(conn, r, "after", 5*time.Second)
		require.NoError(t, err)
		require.Equal(t, "after", got, "the swallowed line never arrives")
	})

	t.Run("reset closes open connections and new ones still work", func(t *testing.T) {
		p := newProxy(t)
		conn, r := dial(t, p)
		_, err := roundTrip(conn, r, "before", 5*time.Second)
		require.NoError(t, err)
		p.ResetAll()
		_, err = roundTrip(conn, r, "after", 5*time.Second)
		require.Error(t, err)
		require.False(t, isTimeout(err), "reset, not a timeout: %v", err)
		conn2, r2 := dial(t, p)
		got, err := roundTrip(conn2, r2, "again", 5*time.Second)
		require.NoError(t, err)
		require.Equal(t, "again", got)
	})

	t.Run("refuse resets new connections and keeps old ones", func(t *testing.T) {
		p := newProxy(t)
		old, oldReader := dial(t, p)
		_, err := roundTrip(old, oldReader, "warm", 5*time.Second)
		require.NoError(t, err)
		p.SetMode(faultproxy.Refuse)
		// The reset can reach the dialer before or after its connect
		// completes: either the dial or the first round trip fails.
		conn, err := net.Dial("tcp", p.Addr())
		if err == nil {
			t.Cleanup(func() { _ = conn.Close() })
			_, err = roundTrip(conn, bufio.NewReader(conn), "refused", 5*time.Second)
		}
		require.Error(t, err)
		require.False(t, isTimeout(err), "reset, not a timeout: %v", err)
		got, err := roundTrip(old, oldReader, "still", 5*time.Second)
		require.NoError(t, err)
		require.Equal(t, "still", got)
	})

	t.Run("hold keeps what is sent, refuses new connections, and delivers it when healed, also after the client closed", func(t *testing.T) {
		p := newProxy(t)
		conn, r := dial(t, p)
		_, err := roundTrip(conn, r, "warm", 5*time.Second)
		require.NoError(t, err)
		p.SetMode(faultproxy.Hold)
		_, err = roundTrip(conn, r, "held", 200*time.Millisecond)
		require.True(t, isTimeout(err), "nothing comes back while held: %v", err)
		fresh, err := net.Dial("tcp", p.Addr())
		if err == nil {
			_, err = roundTrip(fresh, bufio.NewReader(fresh), "refused", 5*time.Second)
			_ = fresh.Close()
		}
		require.Error(t, err, "a new connection is refused while held")
		p.SetMode(faultproxy.Pass)
		got, err := roundTrip(conn, r, "after", 5*time.Second)
		require.NoError(t, err)
		require.Equal(t, "held", got, "the held line arrives first, once healed")

		// A client that gives up and closes: what it sent still arrives.
		seen := make(chan string, 1)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		t.Cleanup(func() { _ = ln.Close() })
		go func() {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			line, _ := bufio.NewReader(c).ReadString('\n')
			seen <- line
		}()
		q, err := faultproxy.New(ln.Addr().String())
		require.NoError(t, err)
		t.Cleanup(func() { _ = q.Close() })
		late, err := net.Dial("tcp", q.Addr())
		require.NoError(t, err)
		require.Eventually(t, func() bool { return q.Conns() == 1 }, 5*time.Second, time.Millisecond)
		q.SetMode(faultproxy.Hold)
		_, err = late.Write([]byte("late\n"))
		require.NoError(t, err)
		require.Eventually(t, func() bool { return q.Held() > 0 }, 5*time.Second, time.Millisecond)
		require.NoError(t, late.Close())
		select {
		case line := <-seen:
			t.Fatalf("%q arrived while held", line)
		case <-time.After(50 * time.Millisecond):
		}
		q.SetMode(faultproxy.Pass)
		select {
		case line := <-seen:
			require.Equal(t, "late\n", line)
		case <-time.After(5 * time.Second):
			t.Fatal("the held line never arrived")
		}
	})

	t.Run("hold next keeps what one connection sends from the pattern on, while the others pass, and delivers it when healed", func(t *testing.T) {
		p := newProxy(t)
		conn, r := dial(t, p)
		other, otherReader := dial(t, p)
		_, err := roundTrip(conn, r, "warm", 5*time.Second)
		require.NoError(t, err)
		caught, heal := p.HoldNext([]byte("key"))
		got, err := roundTrip(conn, r, "before", 5*time.Second)
		require.NoError(t, err)
		require.Equal(t, "before", got, "held from the pattern on only")
		_, err = roundTrip(conn, r, "the key", 200*time.Millisecond)
		require.True(t, isTimeout(err), "nothing comes back while held: %v", err)
		select {
		case <-caught:
		default:
			t.Fatal("not caught")
		}
		_, err = conn.Write([]byte("after\n"))
		require.NoError(t, err)
		require.Eventually(t, func() bool { return p.Held() == 2 }, 5*time.Second, time.Millisecond)
		got, err = roundTrip(other, otherReader, "the key again", 5*time.Second)
		require.NoError(t, err, "another connection passes, even with the pattern")
		require.Equal(t, "the key again", got)
		fresh, freshReader := dial(t, p)
		got, err = roundTrip(fresh, freshReader, "fresh", 5*time.Second)
		require.NoError(t, err, "a new connection passes")
		require.Equal(t, "fresh", got)
		heal()
		require.Eventually(t, func() bool { return p.Held() == 0 }, 5*time.Second, time.Millisecond)
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		for _, want := range []string{"the key", "after"} {
			line, err := r.ReadString('\n')
			require.NoError(t, err)
			require.Equal(t, want+"\n", line, "in order, once healed")
		}
	})

	t.Run("close is idempotent and waits for its goroutines", func(t *testing.T) {
		p, err := faultproxy.New(echoServer(t))
		require.NoError(t, err)
		conn, r := dial(t, p)
		_, err = roundTrip(conn, r, "x", 5*time.Second)
		require.NoError(t, err)
		require.NoError(t, p.Close())
		require.NoError(t, p.Close())
		require.Zero(t, p.Conns())
	})
}

func TestModeNames(t *testing.T) {
	for mode, name := range map[faultproxy.Mode]string{
		faultproxy.Pass: "pass", faultproxy.Delay: "delay", faultproxy.Blackhole: "blackhole",
		faultproxy.Refuse: "refuse", faultproxy.Hold: "hold", faultproxy.Mode(42): "Mode(42)",
	} {
		require.Equal(t, name, mode.String())
	}
}
