package auth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"net"
	"runtime"
	"strings"
	"sync/atomic"
	"weak"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/tollgate/tollgate/internal/refuse"
)

// TokenPrincipal is the principal of a caller that presented the admin
// token (in logs, events and limits).
const TokenPrincipal = "admin-token"

// Identity is who a caller proved to be: the names of its verified client
// certificate and whether it presented the admin token.
type Identity struct {
	// names are the verified client certificate's subject common name (if
	// any) followed by its DNS subject alternative names; empty without a
	// certificate verified against the server's client CA.
	names []string
	// token is set when the call carried "authorization: Bearer <token>"
	// metadata; tokenOK when that token is the admin token.
	token, tokenOK bool
	// Addr is the peer's IP address, for logs.
	Addr string
	// conn is the peer's address with its port, which names its
	// connection: the key of limits on callers without names.
	conn string
	// connKey is ClientKey for a caller without names or client id.
	connKey string
	// declared keeps the ClientKey of the client id last declared on a
	// stream (WithIdentity), whose requests mostly declare the same one;
	// nil for a single call.
	declared *declaredKey
}

// declaredKey is the ClientKey of a declared client id, kept so that a
// stream's acquires need not build it each time.
type declaredKey struct {
	last atomic.Pointer[[2]string] // the client id and its key
}

// of returns the key of client id d.
func (k *declaredKey) of(d string) string {
	if k == nil {
		return "client:" + d
	}
	if e := k.last.Load(); e != nil && e[0] == d {
		return e[1]
	}
	e := &[2]string{d, "client:" + d}
	k.last.Store(e)
	return e[1]
}

// Principal names the caller for logs and limits: its first certificate
// name, or TokenPrincipal, or "" when it proved nothing.
func (id Identity) Principal() string {
	switch {
	case len(id.names) > 0:
		return id.names[0]
	case id.tokenOK:
		return TokenPrincipal
	}
	return ""
}

// AdminToken reports whether the caller presented the admin token.
func (id Identity) AdminToken() bool { return id.tokenOK }

// ClientKey is the key of the caller for per-client limits: its principal,
// else declaredID (a client_id it chose), else its connection. Keying
// unnamed callers by connection rather than by IP address lets many
// processes of one host each have the per-client limits, while
// Limits.MaxConnsPerIP bounds how many connections one address may open.
func (id Identity) ClientKey(declaredID string) string {
	if p := id.Principal(); p != "" {
		return "id:" + p
	}
	if declaredID != "" {
		return id.declared.of(declaredID)
	}
	return id.connKey
}

// DescribeKey turns a ClientKey back into words for messages.
func DescribeKey(key string) string {
	kind, v, _ := strings.Cut(key, ":")
	switch kind {
	case "id":
		return "client " + refuse.Quote(v)
	case "client":
		return "client_id " + refuse.Quote(v)
	case "conn":
		return "the connection from " + v
	}
	return "address " + v
}

// identityOf reads the caller's identity from a call's context: what its
// connection proves (worked out once per connection) and its bearer token.
func (a *Authorizer) identityOf(ctx context.Context) Identity {
	var id Identity
	if p, ok := peer.FromContext(ctx); ok {
		c := a.connOf(p)
		id.names, id.Addr, id.conn, id.connKey = c.names, c.addr, c.conn, c.connKey
	} else {
		id.connKey = "addr:"
	}
	if tok, ok := bearerToken(ctx); ok {
		id.token = true
		id.tokenOK = a.token != nil && tokenMatches(tok, a.token)
	}
	return id
}

// connIdentity is what a connection's peer proves: Identity's fields
// that do not change while the connection lasts.
type connIdentity struct {
	names               []string
	addr, conn, connKey string
}

// connOf returns what p proves. grpc-go gives every call of a connection
// the same *peer.Peer, so it is worked out once per connection and kept
// until the peer is collected (a peer that differs per call is only
// worked out each time).
func (a *Authorizer) connOf(p *peer.Peer) *connIdentity {
	k := weak.Make(p)
	if c, ok := a.conns.Load(k); ok {
		return c.(*connIdentity)
	}
	c := peerIdentity(p)
	if _, loaded := a.conns.LoadOrStore(k, c); !loaded {
		runtime.AddCleanup(p, func(k weak.Pointer[peer.Peer]) { a.conns.Delete(k) }, k)
	}
	return c
}

// peerIdentity works out what p proves: its address and its verified
// client certificate's names.
func peerIdentity(p *peer.Peer) *connIdentity {
	var c connIdentity
	switch a := p.Addr.(type) {
	case *net.TCPAddr:
		c.addr = a.IP.String()
		c.conn = a.String()
	case nil:
	default: // a listener's own address type (limits.ConnAddr), or not TCP
		c.addr = a.String()
		if host, _, err := net.SplitHostPort(c.addr); err == nil {
			c.conn = c.addr
			c.addr = host
		}
	}
	if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.VerifiedChains) > 0 && len(ti.State.PeerCertificates) > 0 {
		cert := ti.State.PeerCertificates[0]
		if cert.Subject.CommonName != "" {
			c.names = append(c.names, cert.Subject.CommonName)
		}
		for _, n := range cert.DNSNames {
			if n != cert.Subject.CommonName {
				c.names = append(c.names, n)
			}
		}
	}
	c.connKey = "addr:" + c.addr
	if c.conn != "" {
		c.connKey = "conn:" + c.conn
	}
	return &c
}

// bearerToken returns the token of "authorization: Bearer <token>"
// metadata, if the call has it.
func bearerToken(ctx context.Context) (string, bool) {
	for _, v := range metadata.ValueFromIncomingContext(ctx, "authorization") {
		scheme, tok, found := strings.Cut(strings.TrimSpace(v), " ")
		if found && strings.EqualFold(scheme, "bearer") {
			return strings.TrimSpace(tok), true
		}
	}
	return "", false
}

// tokenMatches compares a presented token with the admin token's hash in
// constant time (hashing first, so that not even the length leaks).
func tokenMatches(tok string, want *[sha256.Size]byte) bool {
	got := sha256.Sum256([]byte(tok))
	return subtle.ConstantTimeCompare(got[:], want[:]) == 1
}
