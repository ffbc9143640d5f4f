package server

import (
	"context"
	"crypto/sha256"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// AuthConfig says who may call what. A nil *AuthConfig, or one with no
// admin names and no admin token, lets every caller do everything: that is
// for a server that listens on loopback only.
//
// Identities come from two places: a client certificate that the TLS
// handshake verified against the server's client CA (its subject common
// name and its DNS subject alternative names), and an
// "authorization: Bearer <token>" metadata entry equal to AdminToken.
//
// Health checks and server reflection need no identity.
type AuthConfig struct {
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
func (c *AuthConfig) adminRequired() bool {
	return c != nil && (len(c.AdminNames) > 0 || c.AdminToken != "")
}

// authorizer decides, from a caller's identity, which calls it may make.
type authorizer struct {
	adminNames map[string]bool
	token      *[sha256.Size]byte // nil: no admin token
	required   bool               // admin calls need an admin identity
	policy     *Policy
	// clientCerts: client certificates are verified (see
	// AuthConfig.ClientCerts).
	clientCerts bool
}

func newAuthorizer(c *AuthConfig) *authorizer {
	a := &authorizer{adminNames: map[string]bool{}}
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

// auth returns the server's current authorizer (SetAuth may replace it).
func (s *Server) auth() *authorizer { return s.authz.Load() }

// SetAuth replaces the server's admin names, admin token and policy with
// c's, for the calls that start from now on (calls in progress finish
// under the old ones). It is how a running server takes a renewed token
// or an edited policy file; c.ClientCerts must say what the listeners
// really do, as at start.
func (s *Server) SetAuth(c *AuthConfig) { s.authz.Store(newAuthorizer(c)) }

// identify returns the caller's identity.
func (a *authorizer) identify(ctx context.Context) identity {
	return identityOf(ctx, a.token)
}

// isAdmin reports whether id may call AdminService.
func (a *authorizer) isAdmin(id identity) bool {
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

// checkAdmin refuses a caller that may not call AdminService, saying what
// it needs.
func (a *authorizer) checkAdmin(id identity) error {
	if a.isAdmin(id) {
		return nil
	}
	if id.token && !id.tokenOK {
		return refusef(codes.Unauthenticated, ReasonUnauthenticated,
			"the bearer token of this call is not the server's admin token; AdminService calls need %s", a.adminWays())
	}
	if len(id.names) > 0 {
		return refusef(codes.PermissionDenied, ReasonPermissionDenied,
			"client certificate %s is not an admin: AdminService calls need %s (ask the operator to add one of the certificate's names to --admin-names)", namesList(id.names), a.adminWays())
	}
	return refusef(codes.Unauthenticated, ReasonUnauthenticated,
		"AdminService calls need %s; this call presented no credentials", a.adminWays())
}

// adminWays says how to be an admin on this server.
func (a *authorizer) adminWays() string {
	var ways []string
	if len(a.adminNames) > 0 {
		ways = append(ways, "a client certificate named in the server's --admin-names")
	}
	if a.token != nil {
		ways = append(ways, `the admin token (from --admin-token-file) as "authorization: Bearer <token>" metadata`)
	}
	return strings.Join(ways, ", or ")
}

// httpWays says which credentials the HTTP endpoints accept.
func (a *authorizer) httpWays() string {
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

// checkLimiter refuses a caller that may use no pool at all: with a
// policy, one without a verified certificate that is not an admin.
func (a *authorizer) checkLimiter(id identity) error {
	if a.policy == nil || len(id.names) > 0 || (a.required && a.isAdmin(id)) {
		return nil
	}
	if id.token && !id.tokenOK {
		return refusef(codes.Unauthenticated, ReasonUnauthenticated,
			"the bearer token of this call is not the server's admin token; LimiterService calls on this server need a verified client certificate (or the admin token)")
	}
	return refusef(codes.Unauthenticated, ReasonUnauthenticated,
		"LimiterService calls on this server need a client certificate signed by its client CA (its --policy names which certificates may use which pools); this call presented none")
}

// checkPool refuses a caller that the policy does not allow to use pool.
func (a *authorizer) checkPool(id identity, pool string) error {
	if a.policy == nil {
		return nil
	}
	if err := a.checkLimiter(id); err != nil {
		return err
	}
	if (a.required && a.isAdmin(id)) || a.policy.Allows(id.names, pool) {
		return nil
	}
	return refusef(codes.PermissionDenied, ReasonPermissionDenied,
		"client certificate %s may not use pool %q: no rule of the server's --policy file allows it (ask the operator to add a rule with a pattern matching both)", namesList(id.names), pool)
}

// namesList renders certificate names for messages.
func namesList(names []string) string {
	if len(names) == 1 {
		return quoteTrunc(names[0])
	}
	q := make([]string, 0, min(len(names), 5))
	for _, n := range names[:min(len(names), 5)] {
		q = append(q, quoteTrunc(n))
	}
	s := "with names " + strings.Join(q, ", ")
	if len(names) > 5 {
		s += ", ..."
	}
	return s
}

// Service names, to tell which checks a method needs.
var (
	adminServicePrefix   = "/" + tollgatev1.AdminService_ServiceDesc.ServiceName + "/"
	limiterServicePrefix = "/" + tollgatev1.LimiterService_ServiceDesc.ServiceName + "/"
)

// poolNamer is every LimiterService request that names a pool.
type poolNamer interface{ GetPool() string }

// authUnary refuses unary calls the caller may not make: AdminService
// calls without an admin identity, LimiterService calls on a pool the
// policy does not allow.
func (s *Server) authUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := s.authorize(ctx, info.FullMethod, req); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

// authStream refuses streams the caller may not open. The pools of the
// requests on a Session stream are checked one by one as they arrive (see
// guardSessionRequest).
func (s *Server) authStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if err := s.authorize(ss.Context(), info.FullMethod, nil); err != nil {
		return err
	}
	return handler(srv, ss)
}

// authorize checks one call; req is nil for streams.
func (s *Server) authorize(ctx context.Context, method string, req any) error {
	var err error
	switch {
	case strings.HasPrefix(method, adminServicePrefix):
		id := s.auth().identify(ctx)
		if err = s.auth().checkAdmin(id); err != nil {
			s.log.Warn("refused an admin call", "method", method, "peer", id.addr, "client", id.principal(), "err", err)
		}
	case strings.HasPrefix(method, limiterServicePrefix) && s.auth().policy != nil:
		id := s.auth().identify(ctx)
		if pn, ok := req.(poolNamer); ok {
			err = s.auth().checkPool(id, pn.GetPool())
		} else {
			err = s.auth().checkLimiter(id)
		}
		if err != nil {
			s.log.Debug("refused a limiter call", "method", method, "peer", id.addr, "client", id.principal(), "err", err)
		}
	}
	return err
}
