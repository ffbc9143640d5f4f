package limits

import (
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// ConnLimiter bounds the connections of one listener: at most total open
// at once, and perIP from one IP address. A caller is known by its address
// alone before it authenticates, so several processes of one host share
// that address's connections; so that one of them cannot lock the others
// out, a connection that would pass either bound takes the place of a
// connection that does nothing for anyone:
//
//   - first the oldest connection of the address (or, at the total bound,
//     of the address with the most connections) that has not yet made a
//     call: raw TCP that never finishes its handshake;
//   - then the oldest one with no call in progress but watches (health
//     Watch, reflection), which idle callers keep open to look alive.
//
// Only when every connection of the address is making calls is the new one
// closed at once. A connection with only watches in progress for
// IdleAfter is closed as idle, as one with no call at all is by gRPC's own
// idle close. Connections report their calls with Begin (gRPC interceptors)
// or with the HTTP server's connection states (HTTPConnState).
type ConnLimiter struct {
	q            *Quotas
	total, perIP int
	refusedTotal Kind
	refusedPerIP Kind
	idleAfter    time.Duration
	now          atomic.Pointer[func() time.Time] // the clock; SetClock may change it while connections come
	mu           sync.Mutex
	open         int
	hosts        map[string]*hostConns
	evicted      int64
}

// hostConns are the open connections of one IP address, oldest first.
type hostConns struct {
	conns []*Conn
}

// Conn is a connection a ConnLimiter accepted. Its RemoteAddr is a
// *ConnAddr, so that whatever knows the peer's address (gRPC's peer) can
// find the connection again.
type Conn struct {
	net.Conn
	l    *ConnLimiter
	host string
	addr *ConnAddr
	once sync.Once

	called    atomic.Bool  // a call has begun on it: its handshake is done
	calls     atomic.Int64 // calls in progress other than watches
	watches   atomic.Int64 // watches in progress
	quietFrom atomic.Int64 // when calls last went to 0, in Unix nanoseconds
}

// ConnAddr is the remote address of a Conn: the peer's address, and the
// connection it names.
type ConnAddr struct {
	net.Addr
	c *Conn
}

// RemoteAddr returns the peer's address as a *ConnAddr.
func (c *Conn) RemoteAddr() net.Addr { return c.addr }

// Close closes the connection and gives its place back, once.
func (c *Conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.l.forget(c))
	return err
}

// NewConnLimiter returns a limiter of total connections in all and perIP
// from one address (a bound of 0 or below is none), whose refusals count
// as kinds refusedTotal and refusedPerIP, and which closes a connection
// with only watches in progress after idleAfter (0: never).
func (q *Quotas) NewConnLimiter(total, perIP int, refusedTotal, refusedPerIP Kind, idleAfter time.Duration) *ConnLimiter {
	l := &ConnLimiter{q: q, total: total, perIP: perIP, refusedTotal: refusedTotal, refusedPerIP: refusedPerIP,
		idleAfter: idleAfter, hosts: make(map[string]*hostConns)}
	l.SetClock(time.Now)
	return l
}

// SetClock makes the limiter read the time from now, for tests.
func (l *ConnLimiter) SetClock(now func() time.Time) { l.now.Store(&now) }

func (l *ConnLimiter) clock() time.Time { return (*l.now.Load())() }

// Listen wraps lis: its Accept returns *Conn within the bounds.
func (l *ConnLimiter) Listen(lis net.Listener) net.Listener {
	return &limitListener{Listener: lis, l: l}
}

type limitListener struct {
	net.Listener
	l *ConnLimiter
}

func (ll *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := ll.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if lc := ll.l.admit(c); lc != nil {
			return lc, nil
		}
		c.Close()
	}
}

// admit makes room for c within the bounds, closing a connection that
// does nothing for anyone if need be, or returns nil when there is none.
func (l *ConnLimiter) admit(c net.Conn) *Conn {
	host := c.RemoteAddr().String()
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	now := l.clock()
	var victim *Conn
	l.mu.Lock()
	hc := l.hosts[host]
	switch {
	case l.perIP > 0 && hc != nil && len(hc.conns) >= l.perIP:
		if victim = hc.victim(); victim == nil {
			l.mu.Unlock()
			l.q.refused[l.refusedPerIP].Add(1)
			return nil
		}
	case l.total > 0 && l.open >= l.total:
		if victim = l.heaviest().victim(); victim == nil {
			l.mu.Unlock()
			l.q.refused[l.refusedTotal].Add(1)
			return nil
		}
	}
	if victim != nil {
		l.evicted++
		l.removeLocked(victim)
	}
	if hc == nil {
		hc = &hostConns{}
		l.hosts[host] = hc
	}
	lc := &Conn{Conn: c, l: l, host: host}
	lc.quietFrom.Store(now.UnixNano())
	lc.addr = &ConnAddr{Addr: c.RemoteAddr(), c: lc}
	hc.conns = append(hc.conns, lc)
	l.open++
	l.mu.Unlock()
	if victim != nil {
		victim.Conn.Close()
	}
	return lc
}

// victim returns the connection of h to close for a newcomer: the oldest
// that has made no call, else the oldest with no call in progress but
// watches, else nil.
func (h *hostConns) victim() *Conn {
	if h == nil {
		return nil
	}
	for _, c := range h.conns {
		if !c.called.Load() {
			return c
		}
	}
	for _, c := range h.conns {
		if c.calls.Load() == 0 {
			return c
		}
	}
	return nil
}

// heaviest returns the address with the most connections that has one to
// give up, or nil.
func (l *ConnLimiter) heaviest() *hostConns {
	var best *hostConns
	for _, h := range l.hosts {
		if (best == nil || len(h.conns) > len(best.conns)) && h.victim() != nil {
			best = h
		}
	}
	return best
}

// Sweep closes the connections that have had only watches in progress
// for the limiter's idle time (gRPC's own idle close handles connections
// with nothing in progress); the server calls it periodically.
func (l *ConnLimiter) Sweep() {
	if l.idleAfter <= 0 {
		return
	}
	var idle []*Conn
	l.mu.Lock()
	now := l.clock()
	for _, h := range l.hosts {
		for _, c := range h.conns {
			if c.called.Load() && c.calls.Load() == 0 && c.watches.Load() > 0 && now.Sub(time.Unix(0, c.quietFrom.Load())) >= l.idleAfter {
				idle = append(idle, c)
			}
		}
	}
	for _, c := range idle {
		l.removeLocked(c)
	}
	l.mu.Unlock()
	for _, c := range idle {
		c.Conn.Close()
	}
}

func (l *ConnLimiter) forget(c *Conn) func() {
	return func() {
		l.mu.Lock()
		l.removeLocked(c)
		l.mu.Unlock()
	}
}

// removeLocked takes c out of the counts, once.
func (l *ConnLimiter) removeLocked(c *Conn) {
	h := l.hosts[c.host]
	if h == nil {
		return
	}
	for i, o := range h.conns {
		if o == c {
			h.conns = append(h.conns[:i], h.conns[i+1:]...)
			l.open--
			if len(h.conns) == 0 {
				delete(l.hosts, c.host)
			}
			return
		}
	}
}

// Begin records that a call began on the connection addr names (a peer's
// address from this limiter's Conn); watch says it is a watch (a health
// Watch or a reflection stream), which does not keep a connection busy.
// It returns the function that records the call's end. An address of
// another kind is ignored.
func Begin(addr net.Addr, watch bool) func() {
	ca, ok := addr.(*ConnAddr)
	if !ok {
		return func() {}
	}
	c := ca.c
	if !c.called.Load() {
		c.called.Store(true)
	}
	if watch {
		c.watches.Add(1)
		return func() { c.watches.Add(-1) }
	}
	c.calls.Add(1)
	return func() {
		c.quietFrom.Store(c.l.clock().UnixNano())
		c.calls.Add(-1)
	}
}

// HTTPConnState is an http.Server's ConnState for a listener of l: a
// request in progress is a call; a connection between requests is idle
// and may give its place to a newcomer.
func (l *ConnLimiter) HTTPConnState(c net.Conn, state http.ConnState) {
	lc := connOf(c)
	if lc == nil {
		return
	}
	switch state {
	case http.StateActive:
		lc.called.Store(true)
		lc.calls.Store(1)
	case http.StateIdle:
		lc.quietFrom.Store(l.clock().UnixNano())
		lc.calls.Store(0)
	}
}

// connOf returns the *Conn under c (a TLS connection's too), or nil.
func connOf(c net.Conn) *Conn {
	for {
		switch v := c.(type) {
		case *Conn:
			return v
		case interface{ NetConn() net.Conn }:
			c = v.NetConn()
		default:
			return nil
		}
	}
}

// Evicted returns how many connections gave their place to a newcomer.
func (l *ConnLimiter) Evicted() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.evicted
}

// Idle returns how many open connections have no call in progress.
func (l *ConnLimiter) Idle() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, h := range l.hosts {
		for _, c := range h.conns {
			if c.calls.Load() == 0 {
				n++
			}
		}
	}
	return n
}

// Open returns how many connections are open.
func (l *ConnLimiter) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open
}
