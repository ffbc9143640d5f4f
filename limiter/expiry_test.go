package limiter

import (
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

func TestExpiryReturnsPermitsAndGrantsWaiters(t *testing.T) {
	te := newTestEngine(t)
	te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 1})
	l := te.mustAcquire(t, AcquireRequest{Pool: "db", TTL: 10 * time.Second, Owner: "s1"})
	w := te.startAcquire(t, AcquireRequest{Pool: "db"})
	te.clk.Advance(10*time.Second - time.Nanosecond)
	if w.finished() {
		t.Fatal("granted before the holder's lease expired")
	}
	te.clk.Advance(time.Nanosecond)
	got, err := w.result(t)
	if err != nil {
		t.Fatal(err)
	}
	if got.FencingToken <= l.FencingToken {
		t.Fatalf("token %d not above expired holder's %d", got.FencingToken, l.FencingToken)
	}
	ended := te.endedLeases()
	if len(ended) != 1 || ended[0].Reason != EndExpired || ended[0].Owner != "s1" || ended[0].Lease.FencingToken != l.FencingToken {
		t.Fatalf("ended = %+v", ended)
	}
	s := te.status(t, "db")
	if s.Expired != 1 || s.Held != 1 {
		t.Fatalf("status = %+v", s)
	}
	// The expired holder learns it at its next renew or release.
	_, err = te.Renew("db", l.FencingToken, 0, nil)
	wantReason(t, err, apierr.ErrLeaseExpired)
	wantReason(t, errOf(te.Release("db", l.FencingToken)), apierr.ErrLeaseExpired)
}

func TestRenewExtendsAndChangesTTL(t *testing.T) {
	te := newTestEngine(t)
	te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 1, MaxLeaseTTL: time.Minute})
	l := te.mustAcquire(t, AcquireRequest{Pool: "db", TTL: 10 * time.Second})
	for i := 0; i < 5; i++ {
		te.clk.Advance(9 * time.Second)
		r, err := te.Renew("db", l.FencingToken, 0, "s2")
		if err != nil {
			t.Fatalf("renew %d: %v", i, err)
		}
		if !r.ExpireTime.Equal(te.clk.Now().Add(10*time.Second)) || r.FencingToken != l.FencingToken {
			t.Fatalf("renewed = %+v", r)
		}
	}
	if s := te.status(t, "db"); s.Expired != 0 || s.Held != 1 {
		t.Fatalf("renewed lease expired: %+v", s)
	}
	_, err := te.Renew("db", l.FencingToken, 2*time.Minute, nil)
	wantReason(t, err, apierr.ErrInvalidArgument)
	// A shorter TTL does not make it expire sooner: a renew never signs an
	// expiry earlier than one it signed before (docs/recovery.md). The
	// TTL is the next renews'.
	before := te.clk.Now().Add(10 * time.Second)
	r, err := te.Renew("db", l.FencingToken, time.Second, nil)
	if err != nil || r.TTL != time.Second || !r.ExpireTime.Equal(before) {
		t.Fatalf("renew shorter = %+v, %v; want TTL 1s and the expiry %v kept", r, err, before)
	}
	te.clk.Advance(time.Second)
	if ended := te.endedLeases(); len(ended) != 0 {
		t.Fatalf("ended before the expiry it was renewed to: %+v", ended)
	}
	te.clk.Advance(9 * time.Second)
	ended := te.endedLeases()
	if len(ended) != 1 || ended[0].Owner != "s2" {
		t.Fatalf("ended = %+v", ended)
	}
}

// A renew that arrives at or after the expiry instant fails even if the
// expiry timer has not run yet: the holder has already lost the lease.
func TestRenewAtExpiryInstantFails(t *testing.T) {
	te := newTestEngine(t)
	te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 1})
	l := te.mustAcquire(t, AcquireRequest{Pool: "db", TTL: time.Second})
	p, _ := te.lookup("db")
	p.mu.Lock()
	p.expiryAlarm.stop() // simulate a late timer
	p.mu.Unlock()
	te.clk.Advance(time.Second)
	_, err := te.Renew("db", l.FencingToken, 0, nil)
	wantReason(t, err, apierr.ErrLeaseExpired)
	if s := te.status(t, "db"); s.Held != 0 || s.Expired != 1 {
		t.Fatalf("status = %+v", s)
	}
	if len(te.endedLeases()) != 1 {
		t.Fatal("expiry found by renew was not reported")
	}
}

func TestUnknownLeaseMessages(t *testing.T) {
	te := newTestEngine(t)
	te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 1})
	_, err := te.Renew("db", 99, 0, nil)
	wantReason(t, err, apierr.ErrLeaseNotFound)
	if want := "never issued lease 99"; !strings.Contains(err.Error(), want) {
		t.Fatalf("%v; want %q", err, want)
	}
}

func TestManyLeasesExpireInOrder(t *testing.T) {
	te := newTestEngine(t)
	te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 1000})
	for i := 1; i <= 100; i++ {
		te.mustAcquire(t, AcquireRequest{Pool: "db", TTL: time.Duration(101-i) * time.Second})
	}
	for i := 1; i <= 100; i++ {
		te.clk.Advance(time.Second)
		if s := te.status(t, "db"); s.Held != int64(100-i) {
			t.Fatalf("after %ds held = %d", i, s.Held)
		}
	}
	ended := te.endedLeases()
	for i := 1; i < len(ended); i++ {
		if ended[i].Lease.ExpireTime.Before(ended[i-1].Lease.ExpireTime) {
			t.Fatal("expired out of order")
		}
	}
}

// Lowering max_lease_ttl under a live lease's TTL does not break its
// keep-alive: a renew that keeps the TTL gets the new maximum.
func TestRenewAfterMaxTTLLoweredKeepsLease(t *testing.T) {
	te := newTestEngine(t)
	te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 1})
	l := te.mustAcquire(t, AcquireRequest{Pool: "db", TTL: time.Minute})
	if _, err := te.UpdatePool("db", func(c *PoolConfig) { c.MaxLeaseTTL = 10 * time.Second; c.DefaultLeaseTTL = 0 }); err != nil {
		t.Fatal(err)
	}
	r, err := te.Renew("db", l.FencingToken, 0, nil)
	if err != nil {
		t.Fatalf("renew after the maximum was lowered: %v", err)
	}
	if r.TTL != 10*time.Second || !r.ExpireTime.Equal(l.ExpireTime) {
		t.Fatalf("renewed = %+v; want the new 10s maximum, and the expiry it was granted kept (a renew never signs an earlier one)", r)
	}
	// Asking for more than the maximum explicitly is still refused.
	_, err = te.Renew("db", l.FencingToken, time.Minute, nil)
	wantReason(t, err, apierr.ErrInvalidArgument)
}
