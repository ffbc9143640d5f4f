package session

import (
	"github.com/tollgate/tollgate/internal/apiconv"
	"github.com/tollgate/tollgate/internal/refuse"
	"github.com/tollgate/tollgate/limiter"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// The Session stream's resize_lease requests (concurrency shares: a
// lease whose weight follows its holder's local demand). They never wait,
// so the reader answers them inline, like renew; the session becomes the
// lease's owner, so the engine's later changes to the share are pushed to
// it (LeaseResized).

// resizeLease resizes a lease held through this session.
func (s *session) resizeLease(q call, r *tollgatev1.ResizeLeaseRequest) {
	if err := s.checkPoolAccess(r.GetPool()); err != nil {
		s.answerRefusal(q.id, err)
		return
	}
	lease, err := q.calls.ResizeLease(r, s)
	if err != nil {
		s.answerErrIn(q, err, refuse.About{Pool: r.GetPool(), LeaseID: r.GetLeaseId()})
		return
	}
	s.sendIn(q, &tollgatev1.SessionResponse{RequestId: q.id, Kind: &tollgatev1.SessionResponse_ResizeLease{ResizeLease: &tollgatev1.ResizeLeaseResponse{Lease: apiconv.LeaseToProto(s.calls.IDs, lease)}}})
}

// LeaseResized is the engine's OnLeaseResized callback: it pushes the
// change to the session that owns the share, if it is still live. It
// never blocks.
func LeaseResized(r limiter.LeaseResized) {
	if sess, ok := r.Owner.(*session); ok {
		sess.queueEvent(&tollgatev1.SessionResponse{Kind: &tollgatev1.SessionResponse_Event{Event: &tollgatev1.LeaseEvent{
			Type: tollgatev1.LeaseEventType_LEASE_EVENT_TYPE_RESIZED, Lease: apiconv.LeaseToProto(sess.calls.IDs, r.Lease),
			Reason: "the server changed the concurrency share: use lease.weight permits, and give back down to lease.share.target as tasks end",
		}}})
	}
}
