package limiter

import (
	"math/bits"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// A re-adopting renew is accepted only for the weight its receipt signs:
// a holder of a weight-1 lease claiming 5 is refused, saying why.
func TestReadoptOnlyTheSignedWeight(t *testing.T) {
	m := newMemPersister()
	te := newPersistentTestEngine(t, m)
	te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 10, MaxLeaseTTL: time.Minute})
	l := te.mustAcquire(t, AcquireRequest{Pool: "db", TTL: time.Minute})
	te2 := te.restart(t, m, time.Second)
	signed := Receipt{Expiry: l.ExpireTime, Weight: 1}
	_, err := te2.RenewOrReadopt("db", l.FencingToken, 0, nil, Readopt{Weight: 5, Receipt: signed})
	wantReason(t, err, apierr.ErrLeaseNotReadopted)
	if !strings.Contains(err.Error(), "weight 5") || !strings.Contains(err.Error(), "signed for weight 1") {
		t.Fatalf("message does not say the weight differs: %v", err)
	}
	_, err = te2.RenewOrReadopt("db", l.FencingToken, 0, nil, Readopt{Weight: 1, Receipt: Receipt{Problem: "its expiry receipt was not signed by this server for this lease"}})
	wantReason(t, err, apierr.ErrLeaseNotReadopted)
	if r, err := te2.RenewOrReadopt("db", l.FencingToken, 0, nil, Readopt{Weight: 1, Receipt: signed}); err != nil || r.Weight != 1 {
		t.Fatalf("re-adoption with the signed weight: %+v, %v", r, err)
	}
}

// A renew never signs an expiry earlier than one it signed before, so a
// lease that expired is refused whichever of its receipts is shown (issue
// #20: acquire with TTL 5m, renew with 1s, expire, crash, show the first
// receipt).
func TestOlderReceiptNeverResurrects(t *testing.T) {
	m := newMemPersister()
	te := newPersistentTestEngine(t, m)
	te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 10, MaxLeaseTTL: 5 * time.Minute})
	l := te.mustAcquire(t, AcquireRequest{Pool: "db", TTL: 5 * time.Minute})
	first := Receipt{Expiry: l.ExpireTime, Weight: 1}
	r, err := te.Renew("db", l.FencingToken, time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !r.ExpireTime.Equal(l.ExpireTime) {
		t.Fatalf("a renew with a shorter TTL signed expiry %v, before the %v signed already", r.ExpireTime, l.ExpireTime)
	}
	te.clk.Advance(5*time.Minute + time.Second) // it expires at the latest expiry signed
	if s := te.status(t, "db"); s.Expired != 1 {
		t.Fatalf("not expired: %+v", s)
	}
	te2 := te.restart(t, m, time.Second)
	if te2.status(t, "db").RecoveringUntil.IsZero() {
		t.Fatal("no recovery window: the test does not test")
	}
	_, err = te2.RenewOrReadopt("db", l.FencingToken, 0, nil, Readopt{Weight: 1, Receipt: first})
	wantReason(t, err, apierr.ErrLeaseExpired)
}

// A receipt signed before a shrink does not re-adopt the weight given
// back, once the shrink is written; the receipt of the shrink does.
func TestReceiptBeforeShrinkRefused(t *testing.T) {
	m := newMemPersister()
	te := newPersistentTestEngine(t, m)
	te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 10, MaxLeaseTTL: time.Minute})
	l := te.mustAcquire(t, AcquireRequest{Pool: "db", Weight: 5, TTL: time.Minute})
	old := Receipt{Expiry: l.ExpireTime, Weight: 5}
	s, err := te.ResizeLease(LeaseResize{Pool: "db", Token: l.FencingToken, Weight: 2})
	if err != nil {
		t.Fatal(err)
	}
	te.mustAcquire(t, AcquireRequest{Pool: "db", Weight: 8, TTL: time.Minute}) // the 3 given back are granted
	te.clk.Advance(endedFlushDelay)                                            // the shrink is written
	te2 := te.restart(t, m, time.Second)
	_, err = te2.RenewOrReadopt("db", l.FencingToken, 0, nil, Readopt{Weight: 5, Receipt: old})
	wantReason(t, err, apierr.ErrLeaseNotReadopted)
	if !strings.Contains(err.Error(), "resized to weight 2") {
		t.Fatalf("message does not say it was resized: %v", err)
	}
	if r, err := te2.RenewOrReadopt("db", l.FencingToken, 0, nil, Readopt{Weight: 2, Receipt: Receipt{Expiry: s.ExpireTime, Weight: 2}}); err != nil || r.Weight != 2 {
		t.Fatalf("re-adoption with the receipt of the shrink: %+v, %v", r, err)
	}
}

// No amount of churn makes a live lease impossible to re-adopt: another
// client's acquire/release pairs, more than the ended list held before
// (16,384), leave an older live lease re-adoptable after a crash, while
// the churned leases are refused; and the background writes carry only
// the chunks that changed.
func TestChurnKeepsLiveLeasesReadoptable(t *testing.T) {
	m := newMemPersister()
	te := newPersistentTestEngine(t, m)
	te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 10, MaxLeaseTTL: time.Minute})
	live := te.mustAcquire(t, AcquireRequest{Pool: "db", Weight: 2, TTL: time.Minute})
	var churned Lease
	for i := range 16500 {
		churned = te.mustAcquire(t, AcquireRequest{Pool: "db", TTL: time.Minute})
		if _, err := te.Release("db", churned.FencingToken); err != nil {
			t.Fatal(err)
		}
		if i%1000 == 0 {
			te.clk.Advance(endedFlushDelay) // background writes along the way
		}
	}
	te.clk.Advance(endedFlushDelay)
	if sp, _ := m.saved("db"); sp.State.LiveMark < churned.FencingToken {
		t.Fatalf("live mark %d; the last churned lease %d was written as ended", sp.State.LiveMark, churned.FencingToken)
	}
	if n := len(m.chunks["db"]); n != 1 {
		t.Fatalf("%d chunks stored; want 1, the live lease's", n)
	}
	te2 := te.restart(t, m, time.Second)
	_, err := te2.RenewOrReadopt("db", churned.FencingToken, 0, nil, Readopt{Weight: 1, Receipt: Receipt{Expiry: churned.ExpireTime, Weight: 1}})
	wantReason(t, err, apierr.ErrLeaseNotReadopted)
	if r, err := te2.RenewOrReadopt("db", live.FencingToken, 0, nil, Readopt{Weight: 2, Receipt: Receipt{Expiry: live.ExpireTime, Weight: 2}}); err != nil || r.Weight != 2 {
		t.Fatalf("the live lease after churn: %+v, %v", r, err)
	}
}

// A second crash during a recovery window keeps the leases from before
// the first re-adoptable (they may still be live), and the ones released
// since refused.
func TestCrashDuringRecoveryKeepsUnsure(t *testing.T) {
	m := newMemPersister()
	te := newPersistentTestEngine(t, m)
	te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 10, MaxLeaseTTL: time.Minute})
	a := te.mustAcquire(t, AcquireRequest{Pool: "db", TTL: time.Minute})
	b := te.mustAcquire(t, AcquireRequest{Pool: "db", TTL: time.Minute})
	te2 := te.restart(t, m, time.Second)
	if _, err := te2.Release("db", b.FencingToken); err != nil { // never re-adopted
		t.Fatal(err)
	}
	te2.clk.Advance(endedFlushDelay)
	te3 := te2.restart(t, m, time.Second)
	_, err := te3.RenewOrReadopt("db", b.FencingToken, 0, nil, Readopt{Weight: 1, Receipt: Receipt{Expiry: b.ExpireTime, Weight: 1}})
	wantReason(t, err, apierr.ErrLeaseNotReadopted)
	if _, err := te3.RenewOrReadopt("db", a.FencingToken, 0, nil, Readopt{Weight: 1, Receipt: Receipt{Expiry: a.ExpireTime, Weight: 1}}); err != nil {
		t.Fatalf("a lease from before both crashes: %v", err)
	}
	te3.clk.Advance(time.Minute) // the window ends: the unsure range is resolved
	te4 := te3.restart(t, m, 0)
	if sp, _ := m.saved("db"); len(sp.State.Unsure) != 0 {
		t.Fatalf("unsure %v after the window ended", sp.State.Unsure)
	}
	_ = te4
}

// count is how many tokens b holds.
func (b *LiveBits) count() int {
	n := 0
	for _, w := range b {
		n += bits.OnesCount64(w)
	}
	return n
}

// A record written before the live set was kept (a readopt floor and a
// list of ended leases) restores as it did: a lease above the floor is
// re-adopted unless the list has it.
func TestRestoreLegacyEndedList(t *testing.T) {
	m := newMemPersister()
	te := newPersistentTestEngine(t, m)
	te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 10, MaxLeaseTTL: time.Minute})
	a := te.mustAcquire(t, AcquireRequest{Pool: "db", TTL: time.Minute})
	b := te.mustAcquire(t, AcquireRequest{Pool: "db", TTL: time.Minute})
	te.Engine.Close()
	sp, _ := m.saved("db")
	sp.LiveChunks = nil
	sp.State.LiveMark, sp.State.Unsure = 0, nil // the old floor
	sp.State.LegacyEnded = []EndedLease{{Token: b.FencingToken, Expiry: b.ExpireTime}}
	te2 := &testEngine{clk: te.clk}
	te2.Engine = New(Options{Clock: te.clk, Persister: m})
	t.Cleanup(te2.Close)
	if _, err := te2.RestorePool(sp); err != nil {
		t.Fatal(err)
	}
	_, err := te2.RenewOrReadopt("db", b.FencingToken, 0, nil, Readopt{Weight: 1, Receipt: Receipt{Expiry: b.ExpireTime, Weight: 1}})
	wantReason(t, err, apierr.ErrLeaseNotReadopted)
	if _, err := te2.RenewOrReadopt("db", a.FencingToken, 0, nil, Readopt{Weight: 1, Receipt: Receipt{Expiry: a.ExpireTime, Weight: 1}}); err != nil {
		t.Fatalf("a lease above the old floor, not listed as ended: %v", err)
	}
}

// A chunk dropped (it held nothing and was never written) and made again
// is carried once by the next write.
func TestLiveChunkWrittenOnce(t *testing.T) {
	var s liveSet
	s.grant(5)
	s.end(5)
	s.snapshot() // drops the empty chunk
	s.grant(6)
	s.end(7)
	s.grant(8)
	_, chunks, _ := s.snapshot()
	if len(chunks) != 1 || chunks[0].Index != 0 {
		t.Fatalf("chunks %+v; want chunk 0 once", chunks)
	}
}
