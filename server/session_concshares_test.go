package server

import (
	"testing"

	"google.golang.org/grpc/codes"

	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

func resizeReq(id uint64, pool, leaseID string, weight, want *int64) *tollgatev1.SessionRequest {
	return &tollgatev1.SessionRequest{RequestId: id, Kind: &tollgatev1.SessionRequest_ResizeLease{ResizeLease: &tollgatev1.ResizeLeaseRequest{Pool: pool, LeaseId: leaseID, Weight: weight, Want: want}}}
}

// TestSessionConcurrencyShares: over a Session stream, a lease becomes a
// share and grows to what it wants; another session's waiting acquire
// makes the server push a lower target (RESIZED, on the holder's stream);
// a shrink serves the waiter. Bad requests get the unary call's codes.
func TestSessionConcurrencyShares(t *testing.T) {
	e := newEnv(t)
	e.createPool(&tollgatev1.Pool{Name: "db", ConcurrencyLimit: 4})
	e.createPool(&tollgatev1.Pool{Name: "api", ConcurrencyLimit: 4, Rate: 5})
	s := e.session()
	l := s.call(acquireReq(1, &tollgatev1.AcquireRequest{Pool: "db"})).GetAcquire().GetLease()
	r := s.call(resizeReq(2, "db", l.GetId(), nil, i64(4))).GetResizeLease().GetLease()
	if r.GetWeight() != 4 || r.GetShare().GetTarget() != 4 || r.GetShare().GetWant() != 4 || r.GetShare().GetVersion() == 0 {
		t.Fatalf("resize answer = %v", r)
	}

	other := e.session()
	other.send(acquireReq(1, &tollgatev1.AcquireRequest{Pool: "db", Weight: i64(2)}))
	ev := s.next() // the holder is asked to give back 2
	if ev.GetRequestId() != 0 || ev.GetEvent().GetType() != tollgatev1.LeaseEventType_LEASE_EVENT_TYPE_RESIZED ||
		ev.GetEvent().GetLease().GetShare().GetTarget() != 2 || ev.GetEvent().GetLease().GetWeight() != 4 ||
		ev.GetEvent().GetLease().GetShare().GetVersion() <= r.GetShare().GetVersion() {
		t.Fatalf("event = %v", ev)
	}
	r = s.call(resizeReq(3, "db", l.GetId(), i64(2), nil)).GetResizeLease().GetLease()
	if r.GetWeight() != 2 {
		t.Fatalf("shrink answer = %v", r)
	}
	if g := other.next().GetAcquire().GetLease(); g.GetWeight() != 2 {
		t.Fatalf("the waiter was not granted after the shrink: %v", g)
	}
	if st := e.status("db"); st.GetHeld() != 4 {
		t.Fatalf("status = %v", st)
	}
	// A renew answer carries the share.
	if rn := s.call(renewReq(4, "db", l.GetId(), 0)).GetRenew().GetLease(); rn.GetShare().GetTarget() != 2 {
		t.Fatalf("renew answer = %v", rn)
	}

	wantSessionError(t, s.call(resizeReq(5, "db", l.GetId(), i64(0), nil)), codes.InvalidArgument, apierr.ReasonInvalidArgument)
	wantSessionError(t, s.call(resizeReq(6, "db", l.GetId(), nil, i64(-1))), codes.InvalidArgument, apierr.ReasonInvalidArgument)
	wantSessionError(t, s.call(resizeReq(7, "db", l.GetId(), i64(3), nil)), codes.ResourceExhausted, apierr.ReasonNoCapacity)
	wantSessionError(t, s.call(resizeReq(8, "db", "999", i64(1), nil)), codes.NotFound, apierr.ReasonLeaseNotFound)
	wantSessionError(t, s.call(resizeReq(9, "nope", l.GetId(), i64(1), nil)), codes.NotFound, apierr.ReasonPoolNotFound)
	a := s.call(acquireReq(10, &tollgatev1.AcquireRequest{Pool: "api"})).GetAcquire().GetLease()
	wantSessionError(t, s.call(resizeReq(11, "api", a.GetId(), nil, i64(2))), codes.InvalidArgument, apierr.ReasonInvalidArgument)
}
