package client_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/client"
	"github.com/tollgate/tollgate/limiter"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// An operator's RevokeLease ends the holder's lease at once: Done is
// closed and Err matches ErrLeaseLost and ErrLeaseRevoked, with the
// operator's reason in its message.
func TestDoneOnAdminRevokeLease(t *testing.T) {
	ts := newTestServer(t)
	ts.pool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: 1})
	c := ts.dial()

	l, err := c.Acquire(ctx(t), "db", client.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	adm := tollgatev1.NewAdminServiceClient(c.Conn())
	if _, err := adm.RevokeLease(ctx(t), &tollgatev1.RevokeLeaseRequest{Pool: "db", LeaseId: l.ID(), Reason: "disk full on shard 3"}); err != nil {
		t.Fatal(err)
	}
	err = waitDone(t, l)
	mustIs(t, err, client.ErrLeaseLost)
	mustIs(t, err, apierr.ErrLeaseRevoked)
	mustIs(t, l.Err(), apierr.ErrLeaseRevoked)
	if !strings.Contains(err.Error(), "disk full on shard 3") {
		t.Fatalf("loss %q does not carry the reason", err)
	}
	if err := l.Release(ctx(t)); !errors.Is(err, client.ErrLeaseLost) {
		t.Fatalf("Release after revoke = %v", err)
	}
}
