package auth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"net"
	"strings"

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
		return "client:" + declaredID
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

// identityOf reads the caller's identity from a call's context. token is
// the admin token's SHA-256 (nil when none is configured).
func identityOf(ctx context.Context, token *[sha256.Size]byte) Identity {
	var id Identity
	if p, ok := peer.FromContext(ctx); ok {
		switch a := p.Addr.(type) {
		case *net.TCPAddr:
			id.Addr = a.IP.String()
			id.conn = a.String()
		case nil:
		default:
			id.Addr = a.String()
			if host, _, err := net.SplitHostPort(id.Addr); err == nil {
				id.Addr = host
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
	id.connKey = "addr:" + id.Addr
	if id.conn != "" {
		id.connKey = "conn:" + id.conn
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
