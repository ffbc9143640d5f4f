package session

import (
	"github.com/tollgate/tollgate/internal/refuse"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// guardRequest checks one request of the stream before it is handled: the
// caller's request rate (releases and cancels are exempt) and the policy
// for the pool it names. It returns the refusal to answer the request
// with, or nil.
func (s *session) guardRequest(req *tollgatev1.SessionRequest) error {
	kind, pool := kindOf(req)
	s.calls.Metrics.CountSessionRequest(int(kind))
	givesBack := kind == skRelease || kind == skCancel
	if kind == skCancel || ((givesBack || !s.calls.Quotas.RateLimited()) && !s.calls.Auth().HasPolicy()) {
		return nil
	}
	id := s.calls.Auth().Identify(s.ctx)
	if !givesBack {
		if err := s.calls.Quotas.AllowRate(id.ClientKey("")); err != nil {
			return err
		}
	}
	switch kind {
	case skAcquire, skRelease, skRenew, skTake:
		return s.calls.Auth().CheckPool(id, pool)
	}
	return nil
}

// answerRefusal answers request id of the session with a refusal from
// guardRequest.
func (s *session) answerRefusal(id uint64, err error) {
	if r, ok := err.(*refuse.Refusal); ok {
		s.send(&tollgatev1.SessionResponse{RequestId: id, Kind: &tollgatev1.SessionResponse_Error{Error: &tollgatev1.SessionError{
			Code:    int32(r.Code()),
			Message: r.Error(),
			Reason:  string(r.Reason()),
		}}})
		return
	}
	s.answerErr(id, err, refuse.About{})
}

// kindIDs index the per-kind counters of Session requests.
type kindID int

const (
	skHello kindID = iota
	skAcquire
	skRelease
	skRenew
	skTake
	skCancel
	skOther
	numKinds
)

// KindNames are the values of the "kind" label of
// tollgate_grpc_session_requests_total.
var KindNames = [numKinds]string{"hello", "acquire", "release", "renew", "take", "cancel", "other"}

// kindOf returns a request's kind and the pool it names, if any.
func kindOf(req *tollgatev1.SessionRequest) (kindID, string) {
	switch k := req.GetKind().(type) {
	case *tollgatev1.SessionRequest_Hello:
		return skHello, ""
	case *tollgatev1.SessionRequest_Acquire:
		return skAcquire, k.Acquire.GetPool()
	case *tollgatev1.SessionRequest_Release:
		return skRelease, k.Release.GetPool()
	case *tollgatev1.SessionRequest_Renew:
		return skRenew, k.Renew.GetPool()
	case *tollgatev1.SessionRequest_Take:
		return skTake, k.Take.GetPool()
	case *tollgatev1.SessionRequest_Cancel:
		return skCancel, ""
	}
	return skOther, ""
}

// poolOf returns the pool a request about one pool names (acquire,
// release, renew, take, rate and concurrency shares), and false for a
// request of another kind.
func poolOf(req *tollgatev1.SessionRequest) (string, bool) {
	switch k := req.GetKind().(type) {
	case *tollgatev1.SessionRequest_Acquire:
		return k.Acquire.GetPool(), true
	case *tollgatev1.SessionRequest_Release:
		return k.Release.GetPool(), true
	case *tollgatev1.SessionRequest_Renew:
		return k.Renew.GetPool(), true
	case *tollgatev1.SessionRequest_Take:
		return k.Take.GetPool(), true
	case *tollgatev1.SessionRequest_AcquireShare:
		return k.AcquireShare.GetPool(), true
	case *tollgatev1.SessionRequest_RefreshShare:
		return k.RefreshShare.GetPool(), true
	case *tollgatev1.SessionRequest_ReleaseShare:
		return k.ReleaseShare.GetPool(), true
	case *tollgatev1.SessionRequest_ResizeLease:
		return k.ResizeLease.GetPool(), true
	}
	return "", false
}
