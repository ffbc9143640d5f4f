package session

import (
	"github.com/tollgate/tollgate/internal/apiconv"
	"github.com/tollgate/tollgate/internal/refuse"
	"github.com/tollgate/tollgate/internal/term"
	"github.com/tollgate/tollgate/limiter"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// The Session stream's report and rate share requests. They never wait,
// so the reader answers them inline, like release and renew. The session
// owns the shares acquired or refreshed on it: the engine's changes to
// them are pushed to it (ShareUpdated).

// checkPoolAccess refuses a request on pool that the server's policy does
// not allow the stream's caller (guardRequest checks the kinds it knows;
// these are checked here).
func (s *session) checkPoolAccess(pool string) error {
	if !s.calls.Auth().HasPolicy() {
		return nil
	}
	return s.calls.Auth().CheckPool(s.calls.Auth().Identify(s.ctx), pool)
}

// report counts a batch of outcomes, each in the term of its pool's
// shard; it is answered NOT_LEADER, before any is counted, when this
// server does not lead one of those shards.
func (s *session) report(id uint64, r *tollgatev1.ReportRequest) {
	if _, err := apiconv.ReportsFromProto(r); err != nil {
		s.answerErr(id, err, refuse.About{})
		return
	}
	terms := make(map[string]*term.Term, len(r.GetReports()))
	for _, rep := range r.GetReports() {
		t, err := s.host.Term(rep.GetPool())
		if err != nil {
			s.answerStatus(id, err)
			return
		}
		terms[rep.GetPool()] = t
	}
	if err := s.calls.Report(s.ctx, r, func(pool string) *term.Term { return terms[pool] }); err != nil {
		s.answerRefusal(id, err) // a policy refusal, or any other error
		return
	}
	s.send(&tollgatev1.SessionResponse{RequestId: id, Kind: &tollgatev1.SessionResponse_Report{Report: &tollgatev1.ReportResponse{}}})
}

// acquireShare grants a share owned by this session.
func (s *session) acquireShare(q call, r *tollgatev1.AcquireShareRequest) {
	if err := s.checkPoolAccess(r.GetPool()); err != nil {
		s.answerRefusal(q.id, err)
		return
	}
	sh, err := q.calls.AcquireShare(r, s, s.clientID) // the reader owns clientID
	if err != nil {
		s.answerErrIn(q, err, refuse.About{Pool: r.GetPool()})
		return
	}
	s.sendIn(q, &tollgatev1.SessionResponse{RequestId: q.id, Kind: &tollgatev1.SessionResponse_AcquireShare{AcquireShare: &tollgatev1.AcquireShareResponse{Share: apiconv.ShareToProto(s.calls.IDs, sh)}}})
}

// refreshShare refreshes a share and makes this session its owner.
func (s *session) refreshShare(q call, r *tollgatev1.RefreshShareRequest) {
	if err := s.checkPoolAccess(r.GetPool()); err != nil {
		s.answerRefusal(q.id, err)
		return
	}
	sh, err := q.calls.RefreshShare(r, s)
	if err != nil {
		s.answerErrIn(q, err, refuse.About{Pool: r.GetPool()})
		return
	}
	s.sendIn(q, &tollgatev1.SessionResponse{RequestId: q.id, Kind: &tollgatev1.SessionResponse_RefreshShare{RefreshShare: &tollgatev1.RefreshShareResponse{Share: apiconv.ShareToProto(s.calls.IDs, sh)}}})
}

// releaseShare gives a share back.
func (s *session) releaseShare(q call, r *tollgatev1.ReleaseShareRequest) {
	if err := s.checkPoolAccess(r.GetPool()); err != nil {
		s.answerRefusal(q.id, err)
		return
	}
	if err := q.calls.ReleaseShare(r); err != nil {
		s.answerErrIn(q, err, refuse.About{Pool: r.GetPool()})
		return
	}
	s.send(&tollgatev1.SessionResponse{RequestId: q.id, Kind: &tollgatev1.SessionResponse_ReleaseShare{ReleaseShare: &tollgatev1.ReleaseShareResponse{}}})
}

// ShareUpdated pushes the engine's change to a rate share (its
// OnShareUpdate) to the session that owns the share, if it is still live.
// It never blocks.
func ShareUpdated(u limiter.ShareUpdate) {
	if sess, ok := u.Owner.(*session); ok {
		sess.queueEvent(&tollgatev1.SessionResponse{Kind: &tollgatev1.SessionResponse_ShareEvent{ShareEvent: apiconv.ShareEventToProto(sess.calls.IDs, u)}})
	}
}
