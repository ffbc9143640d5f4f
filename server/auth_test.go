package server

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/tollgate/tollgate/internal/auth"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// wantRefusal checks that err is code with reason and that its message
// says what is needed (contains each of hints).
func wantRefusal(t *testing.T, err error, code codes.Code, reason string, hints ...string) {
	t.Helper()
	st := wantStatus(t, err, code, apierr.Reason(reason))
	for _, h := range hints {
		if !strings.Contains(st.Message(), h) {
			t.Errorf("message %q does not mention %q", st.Message(), h)
		}
	}
}

// With mutual TLS, only certificates named in AdminNames may call
// AdminService; other certificates may still use pools.
func TestAuthAdminByClientCertificate(t *testing.T) {
	pki := newPKI(t, true)
	o := startOps(t, Config{Auth: &auth.Config{AdminNames: []string{"ops-admin"}, ClientCerts: true}}, pki.server)
	admin := o.env(pki.creds(t, "ops-admin"))
	worker := o.env(pki.creds(t, "worker-1"))

	admin.createPool(&tollgatev1.Pool{Name: "db", ConcurrencyLimit: 2})
	_, err := worker.adm.CreatePool(worker.ctx(), &tollgatev1.CreatePoolRequest{Pool: &tollgatev1.Pool{Name: "x", ConcurrencyLimit: 1}})
	wantRefusal(t, err, codes.PermissionDenied, "PERMISSION_DENIED", `"worker-1"`, "--admin-names")
	_, err = worker.adm.ListPools(worker.ctx(), &tollgatev1.ListPoolsRequest{})
	wantRefusal(t, err, codes.PermissionDenied, "PERMISSION_DENIED")

	// Without a policy, any verified certificate may use any pool.
	worker.acquire(&tollgatev1.AcquireRequest{Pool: "db"})

	// A connection without a client certificate does not get through the
	// handshake at all.
	anon := o.env(pki.creds(t, ""))
	if _, err := anon.lim.Acquire(anon.ctx(), &tollgatev1.AcquireRequest{Pool: "db"}); err == nil {
		t.Fatal("a call without a client certificate was served")
	}
}

// With an admin token, AdminService needs "authorization: Bearer <token>";
// a missing token is UNAUTHENTICATED, a wrong one too; health and
// LimiterService (without a policy) need nothing.
func TestAuthAdminByToken(t *testing.T) {
	const tok = "0123456789abcdef-admin-token"
	o := startOps(t, Config{Auth: &auth.Config{AdminToken: tok}}, nil)
	anon := o.env()
	wrong := o.env(withToken("not-the-token"))
	admin := o.env(withToken(tok))

	_, err := anon.adm.CreatePool(anon.ctx(), &tollgatev1.CreatePoolRequest{Pool: &tollgatev1.Pool{Name: "db", ConcurrencyLimit: 1}})
	wantRefusal(t, err, codes.Unauthenticated, "UNAUTHENTICATED", "authorization: Bearer", "--admin-token-file", "presented no credentials")
	_, err = wrong.adm.GetPool(wrong.ctx(), &tollgatev1.GetPoolRequest{Name: "db"})
	wantRefusal(t, err, codes.Unauthenticated, "UNAUTHENTICATED", "not the server's admin token")

	admin.createPool(&tollgatev1.Pool{Name: "db", ConcurrencyLimit: 1})
	anon.acquire(&tollgatev1.AcquireRequest{Pool: "db"})
	// GetCluster is how every client finds its pools' leaders: not an
	// admin call.
	if _, err := anon.adm.GetCluster(anon.ctx(), &tollgatev1.GetClusterRequest{}); err != nil {
		t.Fatalf("GetCluster without credentials: %v", err)
	}
	hc, err := healthpb.NewHealthClient(anon.conn).Check(anon.ctx(), &healthpb.HealthCheckRequest{})
	if err != nil || hc.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health without credentials = %v, %v", hc, err)
	}
}

// A policy restricts pools per client certificate, on unary calls and on
// each request of a Session stream; admins may use every pool.
func TestAuthPolicy(t *testing.T) {
	pki := newPKI(t, true)
	pol := &auth.Policy{Rules: []auth.PolicyRule{{Clients: []string{"worker-*"}, Pools: []string{"orders-*"}}}}
	o := startOps(t, Config{Auth: &auth.Config{AdminNames: []string{"ops-admin"}, Policy: pol, ClientCerts: true}}, pki.server)
	admin := o.env(pki.creds(t, "ops-admin"))
	worker := o.env(pki.creds(t, "worker-1"))
	admin.createPool(&tollgatev1.Pool{Name: "orders-db", ConcurrencyLimit: 5})
	admin.createPool(&tollgatev1.Pool{Name: "billing-db", ConcurrencyLimit: 5})

	l := worker.acquire(&tollgatev1.AcquireRequest{Pool: "orders-db"})
	_, err := worker.lim.Acquire(worker.ctx(), &tollgatev1.AcquireRequest{Pool: "billing-db"})
	wantRefusal(t, err, codes.PermissionDenied, "PERMISSION_DENIED", `"worker-1"`, `"billing-db"`, "--policy")
	_, err = worker.lim.Release(worker.ctx(), &tollgatev1.ReleaseRequest{Pool: "billing-db", LeaseId: "1"})
	wantRefusal(t, err, codes.PermissionDenied, "PERMISSION_DENIED")
	if _, err := worker.lim.Release(worker.ctx(), &tollgatev1.ReleaseRequest{Pool: "orders-db", LeaseId: l.GetId()}); err != nil {
		t.Fatal(err)
	}
	admin.acquire(&tollgatev1.AcquireRequest{Pool: "billing-db"})
	if _, err := worker.adm.GetCluster(worker.ctx(), &tollgatev1.GetClusterRequest{}); err != nil {
		t.Fatalf("GetCluster of a client the policy allows pools: %v", err)
	}

	s := worker.session()
	wantSessionError(t, s.call(acquireReq(1, &tollgatev1.AcquireRequest{Pool: "billing-db"})), codes.PermissionDenied, "PERMISSION_DENIED")
	if r := s.call(acquireReq(2, &tollgatev1.AcquireRequest{Pool: "orders-db"})); r.GetAcquire() == nil {
		t.Fatalf("session acquire of an allowed pool = %v", r)
	}
}

// With a policy, a caller without a certificate may use no pool.
func TestAuthPolicyNeedsCertificate(t *testing.T) {
	pol := &auth.Policy{Rules: []auth.PolicyRule{{Clients: []string{"*"}, Pools: []string{"*"}}}}
	o := startOps(t, Config{Auth: &auth.Config{AdminToken: "admin-token-0123456789", Policy: pol}}, nil)
	admin := o.env(withToken("admin-token-0123456789"))
	admin.createPool(&tollgatev1.Pool{Name: "db", ConcurrencyLimit: 1})
	anon := o.env()
	_, err := anon.lim.Acquire(anon.ctx(), &tollgatev1.AcquireRequest{Pool: "db"})
	wantRefusal(t, err, codes.Unauthenticated, "UNAUTHENTICATED", "client certificate")
	err = anon.session().wantEnd()
	wantRefusal(t, err, codes.Unauthenticated, "UNAUTHENTICATED", "client certificate")
	_, err = anon.adm.GetCluster(anon.ctx(), &tollgatev1.GetClusterRequest{})
	wantRefusal(t, err, codes.Unauthenticated, "UNAUTHENTICATED", "client certificate")
	admin.acquire(&tollgatev1.AcquireRequest{Pool: "db"})
}
