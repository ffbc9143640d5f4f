package hatest_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tollgate/tollgate/client"
	"github.com/tollgate/tollgate/internal/hatest"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// TestHAFrozenLeaderKeepsLeases freezes the leader (SIGSTOP) for longer
// than a lease's TTL, under leases of TTL 6s whose renewals are spread
// over the renew period: a new leader serves well before their local
// deadlines, so docs/client.md promises that they all survive. The client
// must find that the frozen leader does not answer and move its Session
// stream to the new leader in time; before it did, the renewals waited on
// the frozen server and the leases were lost.
func TestHAFrozenLeaderKeepsLeases(t *testing.T) {
	const ttl, n = 6 * time.Second, 6
	bin, _ := binaries(t)
	c := hatest.StartCluster(t, bin, embedded(t), 3)
	leader, epoch := c.WaitLeader(20 * time.Second)
	t.Logf("leader %s, epoch %d", leader.Addr, epoch)
	cl, err := client.Dialer{ClientID: "frozen-leader-test"}.Dial(c.Addrs()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	l := &load{t: t, c: cl, adm: tollgatev1.NewAdminServiceClient(cl.Conn())}
	pool := &tollgatev1.Pool{Name: "frozen", ConcurrencyLimit: 2 * n, DefaultLeaseTtl: durationpb.New(ttl), MaxLeaseTtl: durationpb.New(ttl)}
	l.admin("creating the pool", func(ctx context.Context) error {
		_, err := l.adm.CreatePool(ctx, &tollgatev1.CreatePoolRequest{Pool: pool}, grpc.WaitForReady(true))
		return err
	})
	// One lease every TTL/3/n: when the leader freezes, one of them is
	// about to renew, another has just renewed.
	var leases []*client.Lease
	for i := range n {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		ls, err := cl.Acquire(ctx, "frozen", client.WithTTL(ttl))
		cancel()
		if err != nil {
			t.Fatalf("lease %d: %v", i, err)
		}
		leases = append(leases, ls)
		time.Sleep(ttl / 3 / n)
	}
	at := time.Now()
	leader.Freeze()
	newLeader(t, c, at, leader)
	// Past every lease's local deadline counted from before the freeze.
	time.Sleep(time.Until(at.Add(ttl + time.Second)))
	leader.Thaw()
	for i, ls := range leases {
		select {
		case <-ls.Done():
			t.Errorf("lease %d (token %d) lost while the leader was frozen, although a new leader served within %v: %v",
				i, ls.FencingToken(), hatest.SessionTTL+time.Second, ls.Err())
		default:
			if e := ls.Expiry(); !e.After(at.Add(ttl)) {
				t.Errorf("lease %d (token %d) not renewed since the freeze: expiry %v", i, ls.FencingToken(), e.Sub(at))
			}
		}
	}
	for _, ls := range leases {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := ls.Release(ctx); err != nil {
			t.Errorf("release of %d: %v", ls.FencingToken(), err)
		}
		cancel()
	}
}
