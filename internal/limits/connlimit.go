package limits

import (
	"net"
	"sync"
)

// limitListener accepts connections up to Limits.MaxConns in all and
// Limits.MaxConnsPerIP from one address, and closes the ones past either
// at once, so that a flood of idle connections cannot use up the process's
// file descriptors while the clients already connected go on being served.
type limitListener struct {
	net.Listener
	q              *Quotas
	total, perAddr int

	mu    sync.Mutex
	open  int
	addrs map[string]int
}

// LimitConns wraps lis with the connection limits, or returns it as is
// when both are off.
func (q *Quotas) LimitConns(lis net.Listener) net.Listener {
	if q.limits.MaxConns < 0 && q.limits.MaxConnsPerIP < 0 {
		return lis
	}
	return &limitListener{Listener: lis, q: q, total: q.limits.MaxConns, perAddr: q.limits.MaxConnsPerIP, addrs: make(map[string]int)}
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		host := c.RemoteAddr().String()
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		if l.admit(host) {
			return &limitedConn{Conn: c, release: func() { l.done(host) }}, nil
		}
		c.Close()
	}
}

func (l *limitListener) admit(host string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.total > 0 && l.open >= l.total:
		l.q.refused[KindConns].Add(1)
		return false
	case l.perAddr > 0 && l.addrs[host] >= l.perAddr:
		l.q.refused[KindConnsPerIP].Add(1)
		return false
	}
	l.open++
	l.addrs[host]++
	return true
}

func (l *limitListener) done(host string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open--
	if n := l.addrs[host] - 1; n > 0 {
		l.addrs[host] = n
	} else {
		delete(l.addrs, host)
	}
}

// limitedConn gives its place back when it is closed, once.
type limitedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
