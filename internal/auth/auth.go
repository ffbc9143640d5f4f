// Package auth decides who a caller is and what it may do: the identity
// a call proves (a verified client certificate's names, the admin
// token), the admin check, the policy file that says which clients may
// use which pools, and the server's TLS setup with its certificate
// reloading.
//
// It knows nothing of the gRPC services: the server's interceptors ask
// an Authorizer about each call. It may import internal/refuse, apierr
// for its reasons, and gRPC's credential and metadata types; nothing of
// the engine or the server.
package auth

import (
	"context"
	"crypto/sha256"
	"slices"
	"strings"
	"sync"

	"google.golang.org/grpc/codes"

	"github.com/tollgate/tollgate/internal/refuse"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// Config says who may call what. A nil *Config, or one with no admin
// names and no admin token, lets every caller do everything: that is for
// a server that listens on loopback only.
//
// Identities come from two places: a client certificate that the TLS
// handshake verified against the server's client CA (its subject common
// name and its DNS subject alternative names), and an
// "authorization: Bearer <token>" metadata entry equal to AdminToken.
//
// Health checks and server reflection need no identity.
type Config struct {
	// AdminNames are the client certificate names allowed to call
	// AdminService; a certificate is an admin when any of its names is
	// listed.
	AdminNames []string
	// AdminToken, if not empty, is a bearer token that is allowed to call
	// AdminService. It is compared in constant time.
	AdminToken string
	// Policy, if not nil, restricts LimiterService calls per pool; nil
	// lets every caller use every pool.
	Policy *Policy
	// ClientCerts says that the listeners verify client certificates
	// against a client CA (mutual TLS). The HTTP endpoints other than
	// /healthz and /readyz then require a verified certificate or the
	// admin token, as they do when admin credentials are configured.
	ClientCerts bool
}

// adminRequired reports whether AdminService calls need an admin identity.
func (c *Config) adminRequired() bool {
	return c != nil && (len(c.AdminNames) > 0 || c.AdminToken != "")
}

// Authorizer decides, from a caller's identity, which calls it may make.
type Authorizer struct {
	adminNames map[string]bool
	token      *[sha256.Size]byte // nil: no admin token
	required   bool               // admin calls need an admin identity
	policy     *Policy
	// clientCerts: client certificates are verified (see
	// Config.ClientCerts).
	clientCerts bool
	// conns: what each connection's peer proves, worked out once per
	// connection (see connOf).
	conns sync.Map
}

// New returns the Authorizer of c.
func New(c *Config) *Authorizer {
	a := &Authorizer{adminNames: map[string]bool{}}
	if c == nil {
		return a
	}
	for _, n := range c.AdminNames {
		if n = strings.TrimSpace(n); n != "" {
			a.adminNames[n] = true
		}
	}
	if c.AdminToken != "" {
		sum := sha256.Sum256([]byte(c.AdminToken))
		a.token = &sum
	}
	a.required = c.adminRequired()
	a.policy = c.Policy
	a.clientCerts = c.ClientCerts
	return a
}

// Identify returns the caller's identity: the one WithIdentity stored in
// ctx, if any, else the one ctx's call proves.
func (a *Authorizer) Identify(ctx context.Context) Identity {
	if id, ok := ctx.Value(identityKey{}).(*Identity); ok {
		return *id
	}
	return a.identityOf(ctx)
}

// WithIdentity returns ctx carrying the identity its call proves, worked
// out once, for a stream whose many requests all come from that caller
// (its peer and credentials do not change while it lasts).
func (a *Authorizer) WithIdentity(ctx context.Context) context.Context {
	id := a.identityOf(ctx)
	id.declared = new(declaredKey)
	return context.WithValue(ctx, identityKey{}, &id)
}

// identityKey is the context key of WithIdentity's identity.
type identityKey struct{}

// HasPolicy reports whether a policy restricts which pools callers use.
func (a *Authorizer) HasPolicy() bool { return a.policy != nil }

// isAdmin reports whether id may call AdminService.
func (a *Authorizer) isAdmin(id Identity) bool {
	if !a.required || id.tokenOK {
		return true
	}
	for _, n := range id.names {
		if a.adminNames[n] {
			return true
		}
	}
	return false
}

// CheckAdmin refuses a caller that may not call AdminService, saying what
// it needs.
func (a *Authorizer) CheckAdmin(id Identity) error {
	if a.isAdmin(id) {
		return nil
	}
	if id.token && !id.tokenOK {
		return refuse.Newf(codes.Unauthenticated, apierr.ReasonUnauthenticated,
			"the bearer token of this call is not the server's admin token; AdminService calls need %s", a.adminWays())
	}
	if len(id.names) > 0 {
		return refuse.Newf(codes.PermissionDenied, apierr.ReasonPermissionDenied,
			"client certificate %s is not an admin: AdminService calls need %s (ask the operator to add one of the certificate's names to --admin-names)", namesList(id.names), a.adminWays())
	}
	return refuse.Newf(codes.Unauthenticated, apierr.ReasonUnauthenticated,
		"AdminService calls need %s; this call presented no credentials", a.adminWays())
}

// adminWays says how to be an admin on this server.
func (a *Authorizer) adminWays() string {
	var ways []string
	if len(a.adminNames) > 0 {
		ways = append(ways, "a client certificate named in the server's --admin-names")
	}
	if a.token != nil {
		ways = append(ways, `the admin token (from --admin-token-file) as "authorization: Bearer <token>" metadata`)
	}
	return strings.Join(ways, ", or ")
}

// HTTPNeedsCredentials reports whether the HTTP endpoints (but the health
// probes) need a verified client certificate or the admin token.
func (a *Authorizer) HTTPNeedsCredentials() bool { return a.required || a.clientCerts }

// IsAdminToken reports whether tok is the admin token.
func (a *Authorizer) IsAdminToken(tok string) bool {
	return a.token != nil && tokenMatches(tok, a.token)
}

// HTTPWays says which credentials the HTTP endpoints accept.
func (a *Authorizer) HTTPWays() string {
	var ways []string
	if a.clientCerts {
		ways = append(ways, "a client certificate signed by the server's client CA")
	}
	if a.token != nil {
		ways = append(ways, `the admin token as "Authorization: Bearer <token>"`)
	}
	if len(ways) == 0 {
		return "none that this server can check (it has admin names but no client CA); configure --client-ca"
	}
	return strings.Join(ways, ", or ")
}

// CheckLimiter refuses a caller that may use no pool at all: with a
// policy, one without a verified certificate that is not an admin.
func (a *Authorizer) CheckLimiter(id Identity) error {
	if a.policy == nil || len(id.names) > 0 || (a.required && a.isAdmin(id)) {
		return nil
	}
	if id.token && !id.tokenOK {
		return refuse.Newf(codes.Unauthenticated, apierr.ReasonUnauthenticated,
			"the bearer token of this call is not the server's admin token; LimiterService calls on this server need a verified client certificate (or the admin token)")
	}
	return refuse.Newf(codes.Unauthenticated, apierr.ReasonUnauthenticated,
		"LimiterService calls on this server need a client certificate signed by its client CA (its --policy names which certificates may use which pools); this call presented none")
}

// CheckPool refuses a caller that the policy does not allow to use pool.
func (a *Authorizer) CheckPool(id Identity, pool string) error {
	if a.policy == nil {
		return nil
	}
	if err := a.CheckLimiter(id); err != nil {
		return err
	}
	if (a.required && a.isAdmin(id)) || a.policy.Allows(id.names, pool) {
		return nil
	}
	return refuse.Newf(codes.PermissionDenied, apierr.ReasonPermissionDenied,
		"client certificate %s may not use pool %q: no rule of the server's --policy file allows it (ask the operator to add a rule with a pattern matching both)", namesList(id.names), pool)
}

// CheckClientOf refuses a caller that may not read what client id
// clientID waits for (GetQueuePosition): only an admin, or a caller whose
// verified client certificate has clientID among its names. On a server
// without credentials every caller is an admin.
func (a *Authorizer) CheckClientOf(id Identity, clientID string) error {
	if a.isAdmin(id) || slices.Contains(id.names, clientID) {
		return nil
	}
	if len(id.names) > 0 {
		return refuse.Newf(codes.PermissionDenied, apierr.ReasonPermissionDenied,
			"client certificate %s may ask only about its own acquires (client_id one of its names), not client_id %s; an admin may ask about any", namesList(id.names), refuse.Quote(clientID))
	}
	return refuse.Newf(codes.PermissionDenied, apierr.ReasonPermissionDenied,
		"asking where client_id %s waits needs a client certificate with that name, or %s; this call presented neither", refuse.Quote(clientID), a.adminWays())
}

// namesList renders certificate names for messages.
func namesList(names []string) string {
	if len(names) == 1 {
		return refuse.Quote(names[0])
	}
	q := make([]string, 0, min(len(names), 5))
	for _, n := range names[:min(len(names), 5)] {
		q = append(q, refuse.Quote(n))
	}
	s := "with names " + strings.Join(q, ", ")
	if len(names) > 5 {
		s += ", ..."
	}
	return s
}
