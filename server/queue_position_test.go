package server

import (
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/testwait"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
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
	testwait.For(t, "the acquire to wait", func() bool {
		var err error
		resp, err = e.lim.GetQueuePosition(e.ctx(), &tollgatev1.GetQueuePositionRequest{Pool: "db", ClientId: "waiter"})
		return err == nil && len(resp.GetAcquires()) == 1
	})
	if q := resp.GetAcquires()[0]; q.GetPosition() != 1 || q.GetPriority() != 3 || q.GetWeight() != 1 || resp.GetWaiting() != 1 {
		t.Fatalf("GetQueuePosition = %v", resp)
	}
	_, err := e.lim.GetQueuePosition(e.ctx(), &tollgatev1.GetQueuePositionRequest{Pool: "db"})
	wantStatus(t, err, codes.InvalidArgument, apierr.ReasonInvalidArgument)
	_, err = e.lim.GetQueuePosition(e.ctx(), &tollgatev1.GetQueuePositionRequest{Pool: "nope", ClientId: "waiter"})
	wantStatus(t, err, codes.NotFound, apierr.ReasonPoolNotFound)
}

// GetQueuePosition answers a client about its own acquires (client_id one
// of its certificate's names) and an admin about anyone's; another
// client gets PERMISSION_DENIED saying so (any caller could ask about any
// client_id).
func TestGetQueuePositionOnlyOwnOrAdmin(t *testing.T) {
	pki := newPKI(t, true)
	o := startOps(t, Config{Auth: &auth.Config{AdminNames: []string{"ops-admin"}, ClientCerts: true}}, pki.server)
	admin := o.env(pki.creds(t, "ops-admin"))
	worker := o.env(pki.creds(t, "worker-1"))
	other := o.env(pki.creds(t, "worker-2"))
	admin.createPool(&tollgatev1.Pool{Name: "db", ConcurrencyLimit: 1})
	worker.acquire(&tollgatev1.AcquireRequest{Pool: "db", ClientId: "worker-1"})
	ask := func(e *env) error {
		_, err := e.lim.GetQueuePosition(e.ctx(), &tollgatev1.GetQueuePositionRequest{Pool: "db", ClientId: "worker-1"})
		return err
	}
	if err := ask(worker); err != nil {
		t.Fatalf("the client itself: %v", err)
	}
	if err := ask(admin); err != nil {
		t.Fatalf("an admin: %v", err)
	}
	wantRefusal(t, ask(other), codes.PermissionDenied, "PERMISSION_DENIED", `"worker-2"`, `"worker-1"`, "its own acquires")
}
