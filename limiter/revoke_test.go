package limiter

import (
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

func TestRevokeLeaseFreesPermitsAndTombstones(t *testing.T) {
	te := newTestEngine(t)
	te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 2})
	a := te.mustAcquire(t, AcquireRequest{Pool: "db", Weight: 2, ClientID: "c1", Owner: "owner-a"})
	w := te.startAcquire(t, AcquireRequest{Pool: "db", Weight: 1})

	te.clk.Advance(time.Second)
	if err := te.RevokeLease("db", a.FencingToken, "maintenance of shard 3"); err != nil {
		t.Fatal(err)
	}
	b, err := w.result(t)
	if err != nil {
		t.Fatalf("waiter after revoke: %v", err)
	}
	ended := te.endedLeases()
	if len(ended) != 1 || ended[0].Reason != EndRevoked || ended[0].Message != "maintenance of shard 3" ||
		ended[0].Lease.FencingToken != a.FencingToken || ended[0].Owner != "owner-a" {
		t.Fatalf("ended = %+v", ended)
	}
	if ended[0].Reason.String() != "revoked" {
		t.Fatalf("String = %q", ended[0].Reason.String())
	}
	if s := te.status(t, "db"); s.Held != 1 || s.Leases != 1 || s.Revoked != 1 {
		t.Fatalf("status = %+v", s)
	}

	for _, err := range []error{
		errOf(te.Release("db", a.FencingToken)),
		func() error { _, err := te.Renew("db", a.FencingToken, 0, nil); return err }(),
		func() error { _, err := te.GetLease("db", a.FencingToken); return err }(),
		te.RevokeLease("db", a.FencingToken, "again"),
	} {
		wantReason(t, err, apierr.ErrLeaseRevoked)
		if !strings.Contains(err.Error(), "maintenance of shard 3") {
			t.Errorf("message %q does not carry the reason", err)
		}
	}

	if got, err := te.GetLease("db", b.FencingToken); err != nil || !reflect.DeepEqual(got, b) {
		t.Fatalf("GetLease = %+v, %v; want %+v", got, err, b)
	}
	wantReason(t, te.RevokeLease("db", 999, ""), apierr.ErrLeaseNotFound)
	wantReason(t, te.RevokeLease("nope", 1, ""), apierr.ErrPoolNotFound)
	wantReason(t, te.RevokeLease("db", b.FencingToken, strings.Repeat("x", MaxRevokeReasonLen+1)), apierr.ErrInvalidArgument)

	if err := te.RevokeLease("db", b.FencingToken, ""); err != nil {
		t.Fatal(err)
	}
	if e := te.endedLeases(); e[len(e)-1].Message != DefaultRevokeReason {
		t.Fatalf("default reason = %q", e[len(e)-1].Message)
	}
}

func TestRevokeLeaseOfExpiredLease(t *testing.T) {
	te := newTestEngine(t)
	te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 1})
	a := te.mustAcquire(t, AcquireRequest{Pool: "db", TTL: time.Second})
	te.clk.Set(a.ExpireTime) // due, whether or not the timer ran
	wantReason(t, te.RevokeLease("db", a.FencingToken, "x"), apierr.ErrLeaseExpired)
	if s := te.status(t, "db"); s.Held != 0 || s.Revoked != 0 || s.Expired != 1 {
		t.Fatalf("status = %+v", s)
	}
}

func TestListLeases(t *testing.T) {
	te := newTestEngine(t)
	te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 10})
	var toks []uint64
	for i := range 5 {
		c := "a"
		if i%2 == 1 {
			c = "b"
		}
		toks = append(toks, te.mustAcquire(t, AcquireRequest{Pool: "db", ClientID: c}).FencingToken)
	}
	page, next, err := te.ListLeases("db", "", 0, 2)
	if err != nil || next != toks[1] || len(page) != 2 || page[0].FencingToken != toks[0] || page[1].FencingToken != toks[1] {
		t.Fatalf("page 1 = %+v, %v, %v", page, next, err)
	}
	page, next, _ = te.ListLeases("db", "", next, 10)
	if next != 0 || len(page) != 3 || page[0].FencingToken != toks[2] {
		t.Fatalf("page 2 = %+v, %v", page, next)
	}
	page, next, _ = te.ListLeases("db", "b", 0, 10)
	if next != 0 || len(page) != 2 || page[0].ClientID != "b" || page[1].FencingToken != toks[3] {
		t.Fatalf("client b = %+v, %v", page, next)
	}
	if _, _, err := te.ListLeases("nope", "", 0, 1); err == nil {
		t.Fatal("ListLeases of a missing pool succeeded")
	}
}

// A pool whose revocation policy is revoke, lowered under what it holds,
// revokes the lowest priority, then newest, leases until within the limit.
func TestRevocationPolicyOnUpdate(t *testing.T) {
	te := newTestEngine(t)
	te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 10, RevocationPolicy: RevocationRevoke})
	old := te.mustAcquire(t, AcquireRequest{Pool: "db", Weight: 2, Priority: 0})
	high := te.mustAcquire(t, AcquireRequest{Pool: "db", Weight: 3, Priority: 5})
	newer := te.mustAcquire(t, AcquireRequest{Pool: "db", Weight: 2, Priority: 0})
	mid := te.mustAcquire(t, AcquireRequest{Pool: "db", Weight: 1, Priority: 1})

	info, err := te.UpdatePool("db", func(c *PoolConfig) { c.ConcurrencyLimit = 4 })
	if err != nil {
		t.Fatal(err)
	}
	// held 8 > 4: newer (prio 0, newest), then old (prio 0) -> held 4.
	if info.Status.Held != 4 || info.Status.Revoked != 2 {
		t.Fatalf("status = %+v", info.Status)
	}
	ended := te.endedLeases()
	if len(ended) != 2 || ended[0].Lease.FencingToken != newer.FencingToken || ended[1].Lease.FencingToken != old.FencingToken {
		t.Fatalf("revoked %+v; want %d then %d", ended, newer.FencingToken, old.FencingToken)
	}
	if ended[0].Reason != EndRevoked || !strings.Contains(ended[0].Message, "lowered to 4") {
		t.Fatalf("reason = %v %q", ended[0].Reason, ended[0].Message)
	}
	_, err = te.Renew("db", newer.FencingToken, 0, nil)
	wantReason(t, err, apierr.ErrLeaseRevoked)
	for _, l := range []Lease{high, mid} {
		if _, err := te.GetLease("db", l.FencingToken); err != nil {
			t.Fatalf("lease %d: %v", l.FencingToken, err)
		}
	}

	// Under wait, a lowering keeps every lease.
	if _, err := te.UpdatePool("db", func(c *PoolConfig) { c.RevocationPolicy = RevocationWait; c.ConcurrencyLimit = 1 }); err != nil {
		t.Fatal(err)
	}
	if s := te.status(t, "db"); s.Held != 4 || s.Revoked != 2 {
		t.Fatalf("wait policy: %+v", s)
	}
	// Turning revoke on while over the limit revokes at once.
	if _, err := te.UpdatePool("db", func(c *PoolConfig) { c.RevocationPolicy = RevocationRevoke }); err != nil {
		t.Fatal(err)
	}
	if s := te.status(t, "db"); s.Held != 0 || s.Revoked != 4 {
		t.Fatalf("revoke turned on: %+v", s)
	}
	if _, err := te.UpdatePool("db", func(c *PoolConfig) { c.RevocationPolicy = 7 }); err == nil {
		t.Fatal("policy 7 accepted")
	}
	for s, want := range map[string]RevocationPolicy{"": RevocationWait, "wait": RevocationWait, "revoke": RevocationRevoke} {
		if got, err := ParseRevocationPolicy(s); err != nil || got != want || (s != "" && got.String() != s) {
			t.Fatalf("ParseRevocationPolicy(%q) = %v, %v", s, got, err)
		}
	}
	_, err = ParseRevocationPolicy("kill")
	wantReason(t, err, apierr.ErrInvalidArgument)
}

// An adaptive cut under the held weight revokes too, and a revocation that
// frees more than needed grants waiters.
func TestRevocationPolicyOnAdaptiveCut(t *testing.T) {
	te := newTestEngine(t)
	te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 4, RevocationPolicy: RevocationRevoke, Adaptive: AdaptiveConfig{Enabled: true,
		Target: AdaptConcurrency, Window: time.Second, MinSamples: 2, Cooldown: 100 * time.Millisecond, Interval: time.Hour, Backoff: 0.5}})
	for range 4 {
		te.mustAcquire(t, AcquireRequest{Pool: "db"})
	}
	for range 4 {
		_ = te.RecordOutcome("db", OutcomeError, 0)
	}
	s := te.status(t, "db")
	if s.EffectiveConcurrencyLimit >= 4 {
		t.Fatalf("no cut: %+v", s)
	}
	if s.Held > s.EffectiveConcurrencyLimit || s.Revoked == 0 {
		t.Fatalf("after the cut: %+v", s)
	}
}

// TestListLeasesPageCostsThePage: a page of one lease of a pool of 50,000
// copies one lease, not all of them (it copied and sorted every lease
// under the pool's lock on every page), and a page filtered by a client
// holding none passes over at most MaxListScan leases, with a cursor.
func TestListLeasesPageCostsThePage(t *testing.T) {
	te := newTestEngine(t)
	const n = 50_000
	te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: n})
	var toks []uint64
	for range n {
		toks = append(toks, te.mustAcquire(t, AcquireRequest{Pool: "db", ClientID: "a"}).FencingToken)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	const calls = 20
	for i := range calls {
		page, next, err := te.ListLeases("db", "", toks[i*100], 1)
		if err != nil || len(page) != 1 || page[0].FencingToken != toks[i*100+1] || next != toks[i*100+1] {
			t.Fatalf("page after %d = %+v, %d, %v", toks[i*100], page, next, err)
		}
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / calls; per > 16<<10 {
		t.Fatalf("a page of one lease of %d allocates %d bytes; want at most 16 KiB", n, per)
	}
	page, next, err := te.ListLeases("db", "nobody", 0, 10)
	if err != nil || len(page) != 0 || next != toks[MaxListScan-1] {
		t.Fatalf("page of a client with no lease = %+v, next %d (want %d), %v", page, next, toks[MaxListScan-1], err)
	}
	if _, next, _ := te.ListLeases("db", "", toks[n-2], 1); next != 0 {
		t.Fatalf("the last page has next %d; want 0", next)
	}
}
