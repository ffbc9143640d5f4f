package server

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/events"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// revokedEvent returns the lease_revoked event of leaseID in pool, failing
// the test if there is none.
func revokedEvent(t *testing.T, srv *Server, pool, leaseID string) events.Event {
	t.Helper()
	for _, ev := range srv.RecentEvents() {
		if ev.Type == events.LeaseRevoked && ev.Pool == pool && ev.LeaseID == tokenOf(leaseID) {
			return ev
		}
	}
	t.Fatalf("no lease_revoked event for lease %s of pool %s in %+v", leaseID, pool, srv.RecentEvents())
	return events.Event{}
}

// nextLeaseEvent returns the next message of s, which must be a lease
// event.
func nextLeaseEvent(t *testing.T, s *sessionClient) *tollgatev1.LeaseEvent {
	t.Helper()
	r := s.next()
	if r.GetEvent() == nil {
		t.Fatalf("got %v, want a lease event", r)
	}
	return r.GetEvent()
}

// Every way an operator revokes leases names the operator: in the
// lease_revoked event's actor, in the LeaseEvent the holder gets, and in
// the error of the holder's next renew.
func TestOperatorRevocationsNameTheOperator(t *testing.T) {
	const tok = "admin-token-0123456789"
	o := startOps(t, Config{Auth: &auth.Config{AdminToken: tok}}, nil)
	admin := o.env(withToken(tok))
	holder := o.env() // no credentials: LimiterService is open to it
	admin.createPool(&tollgatev1.Pool{Name: "db", ConcurrencyLimit: 4, RevocationPolicy: tollgatev1.RevocationPolicy_REVOCATION_POLICY_REVOKE})
	s := holder.session()
	acquire := func(id uint64) string {
		t.Helper()
		l := s.call(acquireReq(id, &tollgatev1.AcquireRequest{Pool: "db", Ttl: dur(time.Minute)})).GetAcquire().GetLease()
		if l == nil {
			t.Fatalf("acquire %d was not granted", id)
		}
		return l.GetId()
	}
	check := func(how, leaseID string) {
		t.Helper()
		ev := nextLeaseEvent(t, s)
		if ev.GetLease().GetId() != leaseID || !strings.Contains(ev.GetReason(), "(by "+auth.TokenPrincipal+")") {
			t.Errorf("%s: holder got %v; want lease %s revoked (by %s)", how, ev, leaseID, auth.TokenPrincipal)
		}
		if got := revokedEvent(t, o.srv, "db", leaseID).Actor; got != auth.TokenPrincipal {
			t.Errorf("%s: lease_revoked actor = %q, want %q", how, got, auth.TokenPrincipal)
		}
		r := s.call(renewReq(100, "db", leaseID, 0))
		if !strings.Contains(r.GetError().GetMessage(), "(by "+auth.TokenPrincipal+")") {
			t.Errorf("%s: renew answered %v; want an error naming %s", how, r, auth.TokenPrincipal)
		}
	}

	id := acquire(1)
	if _, err := admin.adm.RevokeLease(admin.ctx(), &tollgatev1.RevokeLeaseRequest{Pool: "db", LeaseId: id, Reason: "stuck job"}); err != nil {
		t.Fatal(err)
	}
	check("RevokeLease", id)

	acquire(2)
	id = acquire(3) // the newest goes first when the limit is lowered
	if _, err := admin.adm.UpdatePool(admin.ctx(), &tollgatev1.UpdatePoolRequest{
		Pool: &tollgatev1.Pool{Name: "db", ConcurrencyLimit: 1}, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"concurrency_limit"}},
	}); err != nil {
		t.Fatal(err)
	}
	check("UpdatePool under a revoke policy", id)

	leases, err := admin.adm.ListLeases(admin.ctx(), &tollgatev1.ListLeasesRequest{Pool: "db"})
	if err != nil || len(leases.GetLeases()) != 1 {
		t.Fatalf("ListLeases = %v, %v; want the one lease left", leases, err)
	}
	id = leases.GetLeases()[0].GetId()
	if _, err := admin.adm.SuspendPool(admin.ctx(), &tollgatev1.SuspendPoolRequest{Name: "db", RevokeHeld: true}); err != nil {
		t.Fatal(err)
	}
	check("SuspendPool with revoke_held", id)

}

// Without credentials, the operator is named by address; a lease that
// expires names nobody.
func TestRevocationActorWithoutCredentials(t *testing.T) {
	e := newEnv(t)
	e.createPool(&tollgatev1.Pool{Name: "db", ConcurrencyLimit: 2})
	revoked := e.acquire(&tollgatev1.AcquireRequest{Pool: "db", Ttl: dur(time.Minute)})
	expiring := e.acquire(&tollgatev1.AcquireRequest{Pool: "db", Ttl: dur(time.Second)})
	if _, err := e.adm.RevokeLease(e.ctx(), &tollgatev1.RevokeLeaseRequest{Pool: "db", LeaseId: revoked.GetId()}); err != nil {
		t.Fatal(err)
	}
	if got := revokedEvent(t, e.srv, "db", revoked.GetId()).Actor; got != "127.0.0.1" {
		t.Errorf("lease_revoked actor = %q, want the operator's address 127.0.0.1", got)
	}
	e.clock.Advance(2 * time.Second) // runs the expiry before it returns
	for _, ev := range e.srv.RecentEvents() {
		if ev.Type == events.LeaseExpired && ev.LeaseID == tokenOf(expiring.GetId()) {
			if ev.Actor != "" {
				t.Errorf("lease_expired actor = %q, want none", ev.Actor)
			}
			return
		}
	}
	t.Fatalf("no lease_expired event for lease %s in %+v", expiring.GetId(), e.srv.RecentEvents())
}
