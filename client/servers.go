package client

import (
	"context"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
)

// A frozen or silently cut-off server keeps its TCP connection: nothing
// fails, its health stays SERVING in the client's view, and calls sent to
// it are never answered. The Client finds it by a renew that is not
// answered within renewTimeout (renew answers are immediate), abandons the
// Session stream, and makes the connection to that server start over:
// a new connection to a frozen server never completes its handshake, so
// the next stream goes to a server that answers (the new leader). The
// connection keepalive finds the same on idle connections, more slowly.

// keepaliveParams are the Client's connection keepalive: a ping after 10s
// without traffic (the least grpc-go allows, and twice the server's
// keepalive.EnforcementPolicy.MinTime), and the connection is closed when
// its answer takes longer than 3s.
var keepaliveParams = keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 3 * time.Second, PermitWithoutStream: true}

// renewTimeout is how long a renew of a lease with the given TTL and
// safety margin waits for its answer before the stream it was sent on is
// taken for stuck: a fifth of what the lease has between renewals and its
// local deadline, so that after the renew sent at TTL/3 there is time to
// reach another server and renew there.
func renewTimeout(ttl, margin time.Duration) time.Duration {
	return max((ttl-margin)/5, 50*time.Millisecond)
}

// servers is the address list of a Client of a cluster, given to its
// manual resolver, and what each connection was dialed for.
type servers struct {
	res   *manual.Resolver
	addrs []resolver.Address

	mu    sync.Mutex
	local map[string]string // a connection's local address → the address it was dialed for
}

// maxDialed bounds servers.local: connections are few, and an entry of
// a closed one is only stale.
const maxDialed = 256

// dialer dials addr over TCP and records which address the connection was
// for, so that a stream's peer can be traced back to its address.
func (s *servers) dialer(ctx context.Context, addr string) (net.Conn, error) {
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	if len(s.local) >= maxDialed {
		clear(s.local)
	}
	s.local[conn.LocalAddr().String()] = addr
	s.mu.Unlock()
	return conn, nil
}

// dialOptions are the dial options that servers needs.
func (s *servers) dialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithContextDialer(s.dialer)}
}

// addressOf returns the address of the list a stream is connected to, or
// "" when it cannot tell (a dialer of the caller's was used, and the peer
// is not one of the addresses as given).
func (s *servers) addressOf(ss grpc.ClientStream) string {
	p, ok := peer.FromContext(ss.Context())
	if !ok {
		return ""
	}
	if p.LocalAddr != nil {
		s.mu.Lock()
		a, ok := s.local[p.LocalAddr.String()]
		s.mu.Unlock()
		if ok {
			return a
		}
	}
	for _, a := range s.addrs {
		if p.Addr != nil && a.Addr == p.Addr.String() {
			return a.Addr
		}
	}
	return ""
}

// reconnect makes the connection to addr start over: the address leaves
// the list, which shuts its connection down, and comes back, which dials
// it again. Streams and calls on other servers are not touched.
func (s *servers) reconnect(addr string) {
	rest := make([]resolver.Address, 0, len(s.addrs))
	for _, a := range s.addrs {
		if a.Addr != addr {
			rest = append(rest, a)
		}
	}
	if len(rest) == len(s.addrs) || len(rest) == 0 {
		return
	}
	s.res.UpdateState(resolver.State{Addresses: rest})
	s.res.UpdateState(resolver.State{Addresses: s.addrs})
}
