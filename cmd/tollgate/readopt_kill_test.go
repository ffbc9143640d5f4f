package main

import (
	"context"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/tollgate/tollgate/client"
	"github.com/tollgate/tollgate/internal/testwait"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// TestKill9EndedLeaseNotReadopted is issue #10's scenario on the real
// binary: in a pool of limit 1, lease A expires and B takes its place; in
// another, C is released and D takes its place; the server is killed with
// SIGKILL and started again on the same data directory. A's and C's renews
// are refused with the reason they ended, and B and D are re-adopted.
func TestKill9EndedLeaseNotReadopted(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the tollgate binary and runs it for a few seconds")
	}
	srv := newE2EServer(t)
	srv.Start()
	c, err := client.Dialer{ClientID: "c1"}.Dial(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	adm, lim := tollgatev1.NewAdminServiceClient(c.Conn()), tollgatev1.NewLimiterServiceClient(c.Conn())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, name := range []string{"expire", "release"} {
		if _, err := adm.CreatePool(ctx, &tollgatev1.CreatePoolRequest{Pool: &tollgatev1.Pool{Name: name, ConcurrencyLimit: 1, MaxLeaseTtl: durationpb.New(time.Minute)}}, grpc.WaitForReady(true)); err != nil {
			t.Fatal(err)
		}
	}
	acquire := func(pool string, ttl time.Duration) *tollgatev1.Lease {
		t.Helper()
		resp, err := lim.Acquire(ctx, &tollgatev1.AcquireRequest{Pool: pool, Ttl: durationpb.New(ttl), ClientId: "c1", NoWait: true})
		if err != nil {
			t.Fatalf("acquire in %s: %v", pool, err)
		}
		return resp.GetLease()
	}
	renew := func(l *tollgatev1.Lease) (*tollgatev1.RenewResponse, error) {
		w := l.GetWeight()
		return lim.Renew(ctx, &tollgatev1.RenewRequest{Pool: l.GetPool(), LeaseId: l.GetId(), Weight: &w, ClientId: "c1", ExpiryReceipt: l.GetExpiryReceipt()}, grpc.WaitForReady(true))
	}

	a := acquire("expire", time.Second)
	testwait.For(t, "lease A to expire", func() bool {
		resp, err := adm.GetPool(ctx, &tollgatev1.GetPoolRequest{Name: "expire"})
		return err == nil && resp.GetStatus().GetLeases() == 0
	})
	if _, err := renew(a); status.Code(err) != codes.NotFound {
		t.Fatalf("renew of the expired lease before the kill: %v; want NOT_FOUND", err)
	}
	b := acquire("expire", time.Minute)
	cl := acquire("release", time.Minute)
	if _, err := lim.Release(ctx, &tollgatev1.ReleaseRequest{Pool: "release", LeaseId: cl.GetId()}); err != nil {
		t.Fatal(err)
	}
	d := acquire("release", time.Minute)
	// Releases and expiries are written in the background; a pool's
	// writes reach the store in order, so once an update of each pool is
	// answered (written before it is applied), so are they.
	for _, name := range []string{"expire", "release"} {
		if _, err := adm.UpdatePool(ctx, &tollgatev1.UpdatePoolRequest{Pool: &tollgatev1.Pool{Name: name, Description: "written"},
			UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"description"}}}); err != nil {
			t.Fatal(err)
		}
	}
	srv.Kill()
	srv.Start()

	for _, tc := range []struct {
		l      *tollgatev1.Lease
		reason string
	}{{a, "LEASE_EXPIRED"}, {cl, "LEASE_NOT_READOPTED"}} {
		_, err := renew(tc.l)
		var got string
		for _, det := range status.Convert(err).Details() {
			if info, ok := det.(*errdetails.ErrorInfo); ok {
				got = info.GetReason()
			}
		}
		if status.Code(err) != codes.NotFound || got != tc.reason {
			t.Fatalf("renew of ended lease %s/%s after the kill: %v (reason %q); want NOT_FOUND %s", tc.l.GetPool(), tc.l.GetId(), err, got, tc.reason)
		}
	}
	for _, l := range []*tollgatev1.Lease{b, d} {
		resp, err := renew(l)
		if err != nil || resp.GetLease().GetFencingToken() != l.GetFencingToken() {
			t.Fatalf("renew of live lease %s/%s after the kill: %v, %v; want it re-adopted", l.GetPool(), l.GetId(), resp, err)
		}
	}
}
