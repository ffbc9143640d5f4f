package client_test

import (
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/tollgate/tollgate/client"
	"github.com/tollgate/tollgate/internal/hatest"
	"github.com/tollgate/tollgate/limiter"
)

// A client of two servers whose Session stream is on a server that stops
// answering without closing anything (its link blackholed, as a frozen
// process or a silent network) leaves it at the first renew not answered
// in time, well before the lease's local deadline, and goes on with the
// other server: the renew reaches it (which does not know the lease: two
// standalone servers, not a cluster, so it answers NOT_FOUND), and a new
// acquire is granted there. Before, the renew waited for the silent server
// until the local deadline.
func TestLeaveServerThatStopsAnswering(t *testing.T) {
	a, b := newTestServer(t), newTestServer(t)
	a.pool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: 1})
	b.pool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: 1})
	pa, pb := hatest.StartProxy(t, a.addr), hatest.StartProxy(t, b.addr)
	c := dialTarget(t, pa.Addr()+","+pb.Addr())
	l, err := c.Acquire(ctx(t), "db", client.WithTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	used, other := pa, b
	if b.status("db").Granted == 1 {
		used, other = pb, a
	}
	used.Blackhole()
	defer used.Heal()
	err = waitDone(t, l)
	var e *client.Error
	if !errors.As(err, &e) || e.Code != codes.NotFound {
		t.Fatalf("lease ended with %v; want the other server's NOT_FOUND to its renew", err)
	}
	if _, err := c.Acquire(ctx(t), "db", client.WithTTL(3*time.Second)); err != nil {
		t.Fatal(err)
	}
	if other.status("db").Granted != 1 {
		t.Fatal("the other server granted nothing")
	}
}
