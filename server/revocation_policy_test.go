package server

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// Lowering the limit of a pool whose revocation_policy is REVOKE revokes
// the newest lease at once and tells its holder why.
func TestUpdatePoolRevocationPolicy(t *testing.T) {
	e := newEnv(t)
	p := e.createPool(&tollgatev1.Pool{Name: "db", ConcurrencyLimit: 2, RevocationPolicy: tollgatev1.RevocationPolicy_REVOCATION_POLICY_REVOKE})
	if p.GetRevocationPolicy() != tollgatev1.RevocationPolicy_REVOCATION_POLICY_REVOKE {
		t.Fatalf("created %v", p)
	}
	s := e.session()
	first := s.call(acquireReq(1, &tollgatev1.AcquireRequest{Pool: "db", Ttl: dur(time.Minute)})).GetAcquire().GetLease()
	second := s.call(acquireReq(2, &tollgatev1.AcquireRequest{Pool: "db", Ttl: dur(time.Minute)})).GetAcquire().GetLease()

	if _, err := e.adm.UpdatePool(e.ctx(), &tollgatev1.UpdatePoolRequest{Pool: &tollgatev1.Pool{Name: "db", ConcurrencyLimit: 1},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"concurrency_limit"}}}); err != nil {
		t.Fatal(err)
	}
	ev := s.next().GetEvent()
	if ev.GetType() != tollgatev1.LeaseEventType_LEASE_EVENT_TYPE_REVOKED || ev.GetLease().GetId() != second.GetId() || !strings.Contains(ev.GetReason(), "lowered to 1") {
		t.Fatalf("event = %v", ev)
	}
	if st := e.status("db"); st.GetHeld() != 1 || st.GetRevoked() != 1 {
		t.Fatalf("status = %v", st)
	}
	if r := s.call(renewReq(3, "db", first.GetId(), 0)); r.GetRenew() == nil {
		t.Fatalf("renew of the kept lease = %v", r)
	}

	// Back to WAIT through the mask; an unknown enum value is refused.
	up, err := e.adm.UpdatePool(e.ctx(), &tollgatev1.UpdatePoolRequest{Pool: &tollgatev1.Pool{Name: "db"},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"revocation_policy"}}})
	if err != nil || up.GetPool().GetRevocationPolicy() != tollgatev1.RevocationPolicy_REVOCATION_POLICY_WAIT {
		t.Fatalf("update to wait: %v, %v", up, err)
	}
	_, err = e.adm.UpdatePool(e.ctx(), &tollgatev1.UpdatePoolRequest{Pool: &tollgatev1.Pool{Name: "db", RevocationPolicy: 9},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"revocation_policy"}}})
	wantStatus(t, err, codes.InvalidArgument, apierr.ReasonInvalidArgument)
	_, err = e.adm.CreatePool(e.ctx(), &tollgatev1.CreatePoolRequest{Pool: &tollgatev1.Pool{Name: "x", ConcurrencyLimit: 1, RevocationPolicy: 9}})
	wantStatus(t, err, codes.InvalidArgument, apierr.ReasonInvalidArgument)
}
