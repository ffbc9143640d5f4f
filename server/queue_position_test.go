package server

import (
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/tollgate/tollgate/limiter"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// GetQueuePosition over loopback: a client's acquire waiting on a Session
// stream (under the session's client id) is reported with its position;
// bad requests get clear statuses.
func TestGetQueuePosition(t *testing.T) {
	e := newEnv(t)
	e.createPool(&tollgatev1.Pool{Name: "db", ConcurrencyLimit: 1})
	e.acquire(&tollgatev1.AcquireRequest{Pool: "db", ClientId: "holder"})
	s := e.session()
	s.send(acquireReq(1, &tollgatev1.AcquireRequest{Pool: "db", ClientId: "waiter", Priority: 3}))
	var resp *tollgatev1.GetQueuePositionResponse
	waitFor(t, "the acquire to wait", func() bool {
		var err error
		resp, err = e.lim.GetQueuePosition(e.ctx(), &tollgatev1.GetQueuePositionRequest{Pool: "db", ClientId: "waiter"})
		return err == nil && len(resp.GetAcquires()) == 1
	})
	if q := resp.GetAcquires()[0]; q.GetPosition() != 1 || q.GetPriority() != 3 || q.GetWeight() != 1 || resp.GetWaiting() != 1 {
		t.Fatalf("GetQueuePosition = %v", resp)
	}
	_, err := e.lim.GetQueuePosition(e.ctx(), &tollgatev1.GetQueuePositionRequest{Pool: "db"})
	wantStatus(t, err, codes.InvalidArgument, limiter.ReasonInvalidArgument)
	_, err = e.lim.GetQueuePosition(e.ctx(), &tollgatev1.GetQueuePositionRequest{Pool: "nope", ClientId: "waiter"})
	wantStatus(t, err, codes.NotFound, limiter.ReasonPoolNotFound)
}
