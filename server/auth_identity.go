package server

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"net"
	"strings"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// tokenPrincipal is the principal of a caller that presented the admin
// token (in logs, events and limits).
const tokenPrincipal = "admin-token"

// identity is who a caller proved to be: the names of its verified client
// certificate and whether it presented the admin token.
type identity struct {
	// names are the verified client certificate's subject common name (if
	// any) followed by its DNS subject alternative names; empty without a
	// certificate verified against the server's client CA.
	names []string
	// token is set when the call carried "authorization: Bearer <token>"
	// metadata; tokenOK when that token is the admin token.
	token, tokenOK bool
	// addr is the peer's IP address, for logs.
	addr string
	// conn is the peer's address with its port, which names its
	// connection: the key of limits on callers without names.
	conn string
}

// principal names the caller for logs and limits: its first certificate
// name, or tokenPrincipal, or "" when it proved nothing.
func (id identity) principal() string {
	switch {
	case len(id.names) > 0:
		return id.names[0]
	case id.tokenOK:
		return tokenPrincipal
	}
	return ""
}

// clientKey is the key of the caller for per-client limits: its principal,
// else declaredID (a client_id it chose), else its connection. Keying
// unnamed callers by connection rather than by IP address lets many
// processes of one host each have the per-client limits, while
// Limits.MaxConnsPerIP bounds how many connections one address may open.
func (id identity) clientKey(declaredID string) string {
	if p := id.principal(); p != "" {
		return "id:" + p
	}
	if declaredID != "" {
		return "client:" + declaredID
	}
	if id.conn != "" {
		return "conn:" + id.conn
	}
	return "addr:" + id.addr
}

// describeKey turns a clientKey back into words for messages.
func describeKey(key string) string {
	kind, v, _ := strings.Cut(key, ":")
	switch kind {
	case "id":
		return "client " + quoteTrunc(v)
	case "client":
		return "client_id " + quoteTrunc(v)
	case "conn":
		return "the connection from " + v
	}
	return "address " + v
}

func quoteTrunc(s string) string { return `"` + truncate(s, 64) + `"` }

// identityOf reads the caller's identity from a call's context. token is
// the admin token's SHA-256 (nil when none is configured).
func identityOf(ctx context.Context, token *[sha256.Size]byte) identity {
	var id identity
	if p, ok := peer.FromContext(ctx); ok {
		switch a := p.Addr.(type) {
		case *net.TCPAddr:
			id.addr = a.IP.String()
			id.conn = a.String()
		case nil:
		default:
			id.addr = a.String()
			if host, _, err := net.SplitHostPort(id.addr); err == nil {
				id.addr = host
			}
		}
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.VerifiedChains) > 0 && len(ti.State.PeerCertificates) > 0 {
			c := ti.State.PeerCertificates[0]
			if c.Subject.CommonName != "" {
				id.names = append(id.names, c.Subject.CommonName)
			}
			for _, n := range c.DNSNames {
				if n != c.Subject.CommonName {
					id.names = append(id.names, n)
				}
			}
		}
	}
	if tok, ok := bearerToken(ctx); ok {
		id.token = true
		id.tokenOK = token != nil && tokenMatches(tok, token)
	}
	return id
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
