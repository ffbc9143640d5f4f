package hatest

import (
	"errors"
	"io"
	"net"
	"sync"
	"testing"
)

// Proxy forwards TCP connections from a loopback port to a target (a
// server's link to etcd). Blackhole stops it forwarding anything, in
// either direction, without closing a connection, as a network partition
// would: bytes and closes wait, and new connections are accepted but not
// dialed through, until Heal, which forwards what waited without losing a
// byte.
type Proxy struct {
	lis    net.Listener
	target string
	done   chan struct{} // closed by Close

	mu     sync.Mutex
	open   chan struct{} // closed while forwarding; open (unclosed) while blackholed
	conns  map[net.Conn]struct{}
	cut    bool // Cut: connections are closed as they come, until Heal
	closed bool
	wg     sync.WaitGroup
}

// StartProxy starts a proxy to target on a loopback port; it is closed
// when t ends.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("hatest: proxy: %v", err)
	}
	p := &Proxy{lis: lis, target: target, done: make(chan struct{}), open: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	close(p.open)
	p.wg.Go(p.accept)
	t.Cleanup(p.Close)
	return p
}

// Addr is the proxy's address (host:port).
func (p *Proxy) Addr() string { return p.lis.Addr().String() }

// URL is the proxy's address as an http:// URL, for --etcd.
func (p *Proxy) URL() string { return "http://" + p.Addr() }

// Blackhole stops forwarding until Heal.
func (p *Proxy) Blackhole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.open:
		p.open = make(chan struct{})
	default: // already blackholed
	}
}

// Cut closes every connection through the proxy, and each new one as it
// comes, until Heal: a link that fails at once (connection reset), unlike
// Blackhole's silent one.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

// Heal forwards again, starting with what waited.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
	select {
	case <-p.open:
	default:
		close(p.open)
	}
}

// Close closes the proxy and every connection through it.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	close(p.done)
	p.lis.Close()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// pass waits until the proxy forwards; false when it was closed.
func (p *Proxy) pass() bool {
	p.mu.Lock()
	open := p.open
	p.mu.Unlock()
	select {
	case <-open:
		return true
	case <-p.done:
		return false
	}
}

// track adds c to the connections Close closes; false when closed (or
// cut: then c is closed).
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.cut {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) accept() {
	for {
		c, err := p.lis.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			select {
			case <-p.done:
				return
			default:
				continue // cut
			}
		}
		p.wg.Go(func() { p.serve(c) })
	}
}

func (p *Proxy) serve(c net.Conn) {
	defer c.Close()
	if !p.pass() {
		return
	}
	up, err := net.Dial("tcp", p.target)
	if err != nil || !p.track(up) {
		return
	}
	defer up.Close()
	var wg sync.WaitGroup
	wg.Go(func() { p.copy(up, c) })
	wg.Go(func() { p.copy(c, up) })
	wg.Wait()
}

// copy forwards src to dst, holding each read (and the close) while
// blackholed.
func (p *Proxy) copy(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.pass() {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				src.Close()
				return
			}
		}
		if err != nil {
			if !p.pass() {
				return
			}
			if errors.Is(err, io.EOF) {
				if tc, ok := dst.(*net.TCPConn); ok {
					_ = tc.CloseWrite()
					return
				}
			}
			dst.Close()
			return
		}
	}
}
