package server

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// TestReadoptExactlyWhatWasGranted is issue #20's first item over gRPC,
// on a real data directory: after a restart a holder may not re-adopt its
// lease with more weight than it was granted (its receipt signs the
// weight); a lease the server ended is not re-adopted whichever of its
// receipts is shown; and another client's churn does not make a live
// lease impossible to re-adopt.
func TestReadoptExactlyWhatWasGranted(t *testing.T) {
	setup := func(t *testing.T) (*durableEnv, func(time.Duration) *tollgatev1.Lease, func(*tollgatev1.Lease, int64, string) error) {
		d := newDurableEnv(t)
		d.start(nil)
		_, err := d.adm.CreatePool(d.ctx(), &tollgatev1.CreatePoolRequest{Pool: &tollgatev1.Pool{Name: "db", ConcurrencyLimit: 10, MaxLeaseTtl: dur(5 * time.Minute)}})
		if err != nil {
			t.Fatal(err)
		}
		acquire := func(ttl time.Duration) *tollgatev1.Lease {
			resp, err := d.lim.Acquire(d.ctx(), &tollgatev1.AcquireRequest{Pool: "db", Ttl: dur(ttl), NoWait: true})
			if err != nil {
				t.Fatal(err)
			}
			return resp.GetLease()
		}
		renew := func(l *tollgatev1.Lease, weight int64, receipt string) error {
			_, err := d.lim.Renew(d.ctx(), &tollgatev1.RenewRequest{Pool: "db", LeaseId: l.GetId(), Weight: i64(weight), ExpiryReceipt: receipt})
			return err
		}
		return d, acquire, renew
	}
	t.Run("forged weight", func(t *testing.T) {
		d, acquire, renew := setup(t)
		l := acquire(time.Minute)
		d.restart(time.Second, nil)
		st := wantStatus(t, renew(l, 5, l.GetExpiryReceipt()), codes.NotFound, apierr.ReasonLeaseNotReadopted)
		if !strings.Contains(st.Message(), "weight 5") {
			t.Fatalf("the refusal does not say the weight differs: %v", st.Message())
		}
		if err := renew(l, 1, l.GetExpiryReceipt()); err != nil {
			t.Fatalf("re-adoption with the weight granted: %v", err)
		}
	})
	t.Run("older receipt", func(t *testing.T) {
		d, acquire, renew := setup(t)
		l := acquire(5 * time.Minute)
		acquire(time.Minute) // live at the restart: the pool recovers
		first := l.GetExpiryReceipt()
		r, err := d.lim.Renew(d.ctx(), &tollgatev1.RenewRequest{Pool: "db", LeaseId: l.GetId(), Ttl: dur(time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		d.clock.Advance(2 * time.Second)
		ended := d.status("db").GetExpired() > 0 // it expired if its renew signed an earlier expiry
		if !ended && !r.GetLease().GetExpireTime().AsTime().Equal(l.GetExpireTime().AsTime()) {
			t.Fatalf("the renew with a 1s TTL signed %v; the lease was granted until %v", r.GetLease().GetExpireTime().AsTime(), l.GetExpireTime().AsTime())
		}
		d.restart(time.Second, nil)
		if err := renew(l, 1, first); err == nil && ended {
			t.Fatal("a lease that expired before the restart was re-adopted on its first receipt")
		}
	})
	t.Run("churn", func(t *testing.T) {
		d, acquire, renew := setup(t)
		live := acquire(time.Minute)
		for i := range 16500 { // more than the ended leases the server kept before
			l := acquire(time.Minute)
			if _, err := d.lim.Release(d.ctx(), &tollgatev1.ReleaseRequest{Pool: "db", LeaseId: l.GetId()}); err != nil {
				t.Fatal(err)
			}
			if i%1000 == 999 {
				d.clock.Advance(100 * time.Millisecond) // the background writes
			}
		}
		d.clock.Advance(time.Second)
		d.restart(time.Second, nil)
		if err := renew(live, 1, live.GetExpiryReceipt()); err != nil {
			t.Fatalf("a live lease after another client's churn: %v", err)
		}
	})
}
