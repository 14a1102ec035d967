// Package faultproxy is a TCP proxy for fault-injection tests: it listens on
// 127.0.0.1, forwards every connection to one upstream address, and can be
// switched at any time to delay traffic, swallow it (a black hole: the
// connection stays open and nothing arrives, like a half-open connection or
// a dead route), reset every connection, or refuse new ones.
//
// A Proxy is safe for concurrent use. It must be closed (Close waits for
// every goroutine it started); New registers nothing with the test, so the
// caller owns that.
package faultproxy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// Mode is what the proxy does with traffic.
type Mode int

const (
	// Pass forwards bytes as they come.
	Pass Mode = iota
	// Delay forwards every chunk of bytes Delay after it was read, in
	// order, in both directions (set the delay with SetDelay).
	Delay
	// Blackhole reads bytes in both directions and forwards none: the
	// client's writes succeed and its reads never return.
	Blackhole
	// Refuse accepts new connections and resets them at once; connections
	// that are already open keep passing traffic.
	Refuse
	// Hold keeps every byte it reads, in order, and forwards it once the
	// proxy leaves Hold, also to a server whose client has since closed
	// its side: a partition that heals, when the segments sent during it
	// arrive late. New connections are refused meanwhile, as a dead route
	// would fail them.
	Hold
)

// String names the mode.
func (m Mode) String() string {
	switch m {
	case Pass:
		return "pass"
	case Delay:
		return "delay"
	case Blackhole:
		return "blackhole"
	case Refuse:
		return "refuse"
	case Hold:
		return "hold"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Proxy forwards TCP connections from a local listener to an upstream
// address.
type Proxy struct {
	upstream string
	ln       net.Listener

	mu    sync.Mutex
	mode  Mode
	delay time.Duration
	held  chan struct{} // in Hold: closed when the proxy leaves it
	// holding counts the chunks held (Hold, HoldNext) or delayed and not written yet.
	holding int
	conns   map[*pair]struct{}
	// pattern: HoldNext's, until a client sends it; one is closed by its heal.
	pattern     []byte
	one         chan struct{}
	caught      chan struct{}
	caughtEnded chan struct{} // the held pair's ended

	wg     sync.WaitGroup
	closed chan struct{}
	once   sync.Once
}

// pair is one proxied connection: the client's side and the upstream side;
// held, once HoldNext caught it: what its client sends is held until closed.
type pair struct {
	client, server net.Conn
	held           chan struct{}
	ended          chan struct{} // closed once both sides are done
}

// New starts a proxy on a free 127.0.0.1 port that forwards to upstream, in
// Pass mode.
func New(upstream string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	p := &Proxy{upstream: upstream, ln: ln, conns: map[*pair]struct{}{}, closed: make(chan struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr returns the address clients should dial instead of the upstream.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetMode switches the proxy's behaviour; it applies at once to bytes read
// from then on, on existing and new connections.
func (p *Proxy) SetMode(m Mode) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.setModeLocked(m)
}

// SetDelay sets the delay of Delay mode and switches to it.
func (p *Proxy) SetDelay(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.setModeLocked(Delay)
	p.delay = d
}

func (p *Proxy) setModeLocked(m Mode) {
	switch {
	case m == Hold && p.held == nil:
		p.held = make(chan struct{})
	case m != Hold && p.held != nil:
		close(p.held) // what was held goes out now
		p.held = nil
	}
	p.mode = m
}

func (p *Proxy) state() (Mode, time.Duration, chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode, p.delay, p.held
}

// HoldNext holds one connection: the first whose client sends bytes that
// contain pattern, from those bytes on; what that client sends is kept, in
// order, until heal is called, then forwarded, also to a server whose
// client has since closed its side (a command held in the network that
// arrives late). Other connections, new ones too, pass meanwhile, in the
// proxy's mode. caught is closed once a connection is held. Call heal once,
// after caught: it returns a channel closed once the held connection has
// ended, which, when its client had closed its side, the server does once
// it has read (and so, for Redis, run) what was held.
func (p *Proxy) HoldNext(pattern []byte) (caught <-chan struct{}, heal func() (ended <-chan struct{})) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pattern, p.one, p.caught = bytes.Clone(pattern), make(chan struct{}), make(chan struct{})
	one := p.one
	return p.caught, func() <-chan struct{} {
		close(one)
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.caughtEnded
	}
}

// heldBy returns the channel that holds what c's client sends in data, nil
// when it is not held (see HoldNext).
func (p *Proxy) heldBy(c *pair, data []byte) chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c.held == nil && p.pattern != nil && bytes.Contains(data, p.pattern) {
		c.held, p.pattern, p.caughtEnded = p.one, nil, c.ended
		close(p.caught)
	}
	return c.held
}

// Held returns the number of chunks of bytes held (Hold, HoldNext) or
// delayed (Delay) and not forwarded yet: one that was is in its
// destination's socket.
func (p *Proxy) Held() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.holding
}

// Conns returns the number of open proxied connections.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// ResetAll closes every open connection, on both sides, with a TCP RST
// (SO_LINGER 0), as a crashed middlebox or a peer reboot would. New
// connections are served according to the mode.
func (p *Proxy) ResetAll() {
	p.mu.Lock()
	conns := make([]*pair, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	for _, c := range conns {
		c.reset()
	}
}

func (c *pair) reset() {
	for _, conn := range []net.Conn{c.client, c.server} {
		if tcp, ok := conn.(*net.TCPConn); ok {
			_ = tcp.SetLinger(0)
		}
		_ = conn.Close()
	}
}

// Close stops accepting, resets every connection, and waits for every
// goroutine of the proxy to exit. Calling it again does nothing.
func (p *Proxy) Close() error {
	var err error
	p.once.Do(func() {
		close(p.closed)
		err = p.ln.Close()
		p.ResetAll()
		p.wg.Wait()
	})
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		if mode, _, _ := p.state(); mode == Refuse || mode == Hold {
			(&pair{client: client, server: client}).reset()
			continue
		}
		server, err := net.DialTimeout("tcp", p.upstream, 5*time.Second)
		if err != nil {
			(&pair{client: client, server: client}).reset()
			continue
		}
		c := &pair{client: client, server: server, ended: make(chan struct{})}
		p.mu.Lock()
		select {
		case <-p.closed:
			p.mu.Unlock()
			c.reset()
			return
		default:
		}
		p.conns[c] = struct{}{}
		p.mu.Unlock()
		p.wg.Add(1)
		go p.serve(c)
	}
}

// serve runs both directions of one connection and forgets it once either
// side has closed.
func (p *Proxy) serve(c *pair) {
	defer p.wg.Done()
	var both sync.WaitGroup
	both.Go(func() {
		if p.forward(c.server, c.client, c) {
			// The client closed its side: so does the server's, after
			// what was sent before (held bytes too), which a reset could
			// discard unread; the server's close then ends the pair.
			if tcp, ok := c.server.(*net.TCPConn); ok && tcp.CloseWrite() == nil {
				return
			}
		}
		c.reset()
	})
	both.Go(func() { p.forward(c.client, c.server, nil); c.reset() })
	both.Wait()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	close(c.ended)
}

// write writes ch to dst once its delay ends, unless an earlier write failed
// (then it drops it, so that the reader never blocks on a dead writer); it
// tells whether writing failed.
func (p *Proxy) write(dst, src net.Conn, ch chunk, failed bool) bool {
	if failed {
		return true
	}
	if wait := time.Until(ch.due); wait > 0 {
		timer := time.NewTimer(wait)
		select {
		case <-timer.C:
		case <-p.closed:
			timer.Stop()
			return true
		}
	}
	if _, err := dst.Write(ch.data); err != nil {
		_ = src.Close() // unblocks the reader
		return true
	}
	return false
}

// chunk is bytes read at one instant, to be written once their delay ends.
type chunk struct {
	data []byte
	due  time.Time
	held chan struct{} // Hold: sent once it is closed
}

// forward copies from src to dst according to the mode at the time each
// chunk is read. A writer goroutine keeps the order and lets delayed chunks
// overlap in flight, as on a long link (the delay is latency, not a
// bandwidth limit). from is the pair when src is its client (see HoldNext).
// It tells whether src ended with its peer's close (EOF), once every chunk
// read before was written.
func (p *Proxy) forward(dst, src net.Conn, from *pair) (closed bool) {
	queue := make(chan chunk, 1024)
	var writer sync.WaitGroup
	writer.Go(func() {
		failed := false
		for ch := range queue {
			if ch.held != nil && !failed {
				select {
				case <-ch.held:
				case <-p.closed:
					failed = true
				}
			}
			failed = p.write(dst, src, ch, failed)
			if ch.held != nil || !ch.due.IsZero() {
				p.mu.Lock()
				p.holding-- // written (or dropped): see Held
				p.mu.Unlock()
			}
		}
	})
	defer writer.Wait()
	defer close(queue)
	buf := make([]byte, 32*1024)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			mode, delay, held := p.state()
			if from != nil {
				if one := p.heldBy(from, buf[:n]); one != nil {
					mode, held = Hold, one
				}
			}
			switch mode {
			case Blackhole:
				// swallowed
			case Hold:
				p.mu.Lock()
				p.holding++
				p.mu.Unlock()
				queue <- chunk{data: append([]byte(nil), buf[:n]...), held: held}
			case Delay:
				p.mu.Lock()
				p.holding++
				p.mu.Unlock()
				queue <- chunk{data: append([]byte(nil), buf[:n]...), due: time.Now().Add(delay)}
			default:
				queue <- chunk{data: append([]byte(nil), buf[:n]...)}
			}
		}
		if err != nil {
			return errors.Is(err, io.EOF) // EOF, a reset, or Close: the deferred close ends the writer
		}
	}
}
