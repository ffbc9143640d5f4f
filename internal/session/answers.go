package session

import (
	"github.com/tollgate/tollgate/internal/apiconv"
	"github.com/tollgate/tollgate/internal/leaseid"
	"github.com/tollgate/tollgate/limiter"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// The answers of the hot path (acquire, release) are each one allocation:
// the response, its oneof wrapper, its body and its lease side by side.

type acquireAnswer struct {
	resp  tollgatev1.SessionResponse
	kind  tollgatev1.SessionResponse_Acquire
	body  tollgatev1.AcquireResponse
	lease apiconv.LeaseMsg
}

// acquired returns the answer to acquire id that granted l.
func acquired(id uint64, ids *leaseid.IDs, l limiter.Lease) *tollgatev1.SessionResponse {
	a := &acquireAnswer{}
	a.body.Lease = a.lease.Fill(ids, l)
	a.kind.Acquire = &a.body
	a.resp.RequestId, a.resp.Kind = id, &a.kind
	return &a.resp
}

type releaseAnswer struct {
	resp tollgatev1.SessionResponse
	kind tollgatev1.SessionResponse_Release
	body tollgatev1.ReleaseResponse
}

// released returns the answer to release id.
func released(id uint64) *tollgatev1.SessionResponse {
	a := &releaseAnswer{}
	a.kind.Release = &a.body
	a.resp.RequestId, a.resp.Kind = id, &a.kind
	return &a.resp
}
