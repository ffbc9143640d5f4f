package limiter

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// restart simulates a crash of te's engine and a restart after downtime: the
// old engine stops (its timers with it, nothing is released), the clock
// moves on, and a new engine on the same clock restores every pool m holds.
func (te *testEngine) restart(t testing.TB, m *memPersister, downtime time.Duration) *testEngine {
	t.Helper()
	te.Engine.Close()
	te.clk.Advance(downtime)
	ne := &testEngine{clk: te.clk}
	ne.Engine = New(Options{Clock: te.clk, Persister: m, HorizonSlack: te.horizonSlack, PreReserve: te.preReserve, OnLeaseEnded: func(le LeaseEnded) {
		ne.mu.Lock()
		ne.ended = append(ne.ended, le)
		ne.mu.Unlock()
	}})
	t.Cleanup(ne.Close)
	for _, sp := range m.snapshot() {
		if _, err := ne.RestorePool(sp); err != nil {
			t.Fatalf("RestorePool(%+v): %v", sp, err)
		}
	}
	return ne
}

// readopt is what a holder sends to re-adopt a lease of weight w, with an
// expiry receipt still ahead (its lease was live at the restart).
func readopt(w int64) Readopt {
	return Readopt{Weight: w, ClientID: "c", Description: "d", Priority: 2, Receipt: Receipt{Expiry: liveReceipt, Weight: w}}
}

// liveReceipt is the expiry receipt of a lease still live at any time tests reach.
var liveReceipt = time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)

// TestRestartContinuesTokensAboveCeiling: tokens after a restart are above
// every token issued before it, and the restored pool keeps its
// configuration and times.
func TestRestartContinuesTokensAboveCeiling(t *testing.T) {
	m := newMemPersister()
	te := newPersistentTestEngine(t, m)
	te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 3, Description: "orders", MaxLeaseTTL: time.Second, DefaultLeaseTTL: time.Second})
	var last uint64
	for i := 0; i < 2000; i++ {
		l := te.mustAcquire(t, AcquireRequest{Pool: "db"})
		last = l.FencingToken
		_, _ = te.Release("db", l.FencingToken)
	}
	te2 := te.restart(t, m, time.Hour)
	info, err := te2.GetPool("db")
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.Description != "orders" || info.Config.ConcurrencyLimit != 3 || !info.CreateTime.Equal(epoch) {
		t.Fatalf("restored pool: %+v", info)
	}
	if !info.Status.RecoveringUntil.IsZero() {
		t.Fatalf("a pool whose horizon passed long ago is recovering until %v", info.Status.RecoveringUntil)
	}
	l := te2.mustAcquire(t, AcquireRequest{Pool: "db"})
	if l.FencingToken <= last {
		t.Fatalf("token %d after a restart; before it %d was issued", l.FencingToken, last)
	}
	// And again, twice, with no grant in between.
	te3 := te2.restart(t, m, time.Hour)
	te4 := te3.restart(t, m, time.Hour)
	if l2 := te4.mustAcquire(t, AcquireRequest{Pool: "db"}); l2.FencingToken <= l.FencingToken {
		t.Fatalf("token %d after two more restarts; before them %d", l2.FencingToken, l.FencingToken)
	}
}

// TestRecoveryWindowBounds: the window ends at the earlier of the saved
// horizon plus ClockStepTolerance and restart + the TTL bound; a pool that
// granted nothing, or whose horizon has passed by more than the
// tolerance, does not recover.
func TestRecoveryWindowBounds(t *testing.T) {
	m := newMemPersister()
	te := newPersistentTestEngine(t, m)
	te.mustCreate(t, PoolConfig{Name: "quick", ConcurrencyLimit: 2, MaxLeaseTTL: 10 * time.Second})
	te.mustCreate(t, PoolConfig{Name: "idle", ConcurrencyLimit: 2, MaxLeaseTTL: 10 * time.Second})
	te.mustCreate(t, PoolConfig{Name: "old", ConcurrencyLimit: 2, MaxLeaseTTL: 10 * time.Second})
	te.mustAcquire(t, AcquireRequest{Pool: "old", TTL: 10 * time.Second}) // horizon 40s
	te.clk.Advance(35 * time.Second)
	te.mustAcquire(t, AcquireRequest{Pool: "quick", TTL: 10 * time.Second}) // horizon 35+40 = 75s

	te2 := te.restart(t, m, 3*time.Second) // now 38s
	if got, want := te2.status(t, "quick").RecoveringUntil, epoch.Add(48*time.Second); !got.Equal(want) {
		t.Fatalf("quick recovers until %v; want restart + max TTL = %v", got, want)
	}
	if got, want := te2.status(t, "old").RecoveringUntil, epoch.Add(48*time.Second); !got.Equal(want) {
		t.Fatalf("old recovers until %v; want restart + max TTL = %v (its horizon 40s was too recent to trust)", got, want)
	}
	if got := te2.status(t, "idle").RecoveringUntil; !got.IsZero() {
		t.Fatalf("idle (never granted) recovers until %v", got)
	}
	te2.mustAcquire(t, AcquireRequest{Pool: "idle"})

	te2.clk.Advance(10 * time.Second) // 48s: old's window is over
	if got := te2.status(t, "old").RecoveringUntil; !got.IsZero() {
		t.Fatalf("old still recovering at its window's end: %v", got)
	}
	te2.mustAcquire(t, AcquireRequest{Pool: "old"})

	te3 := te2.restart(t, m, ClockStepTolerance+time.Minute) // every horizon has passed, by more than the tolerance
	for _, name := range []string{"quick", "idle", "old"} {
		if got := te3.status(t, name).RecoveringUntil; !got.IsZero() {
			t.Fatalf("%s recovers until %v long after its horizon", name, got)
		}
	}
}

// TestRecoveryHoldsBackNewGrants: during the window a no-wait acquire fails
// with RECOVERING (UNAVAILABLE, saying until when), a waiting one is
// granted when the window ends, and not an instant before.
func TestRecoveryHoldsBackNewGrants(t *testing.T) {
	m := newMemPersister()
	te := newPersistentTestEngine(t, m)
	te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 5, MaxLeaseTTL: 10 * time.Second})
	te.mustAcquire(t, AcquireRequest{Pool: "db", TTL: 10 * time.Second})
	sp, _ := m.saved("db")
	sp.State.HeldBound = -1 // unknown (a record from before it was kept)
	m.pools["db"] = sp
	te2 := te.restart(t, m, time.Second)
	until := epoch.Add(11 * time.Second)

	_, err := te2.Acquire(context.Background(), AcquireRequest{Pool: "db", Weight: 1, NoWait: true})
	wantReason(t, err, apierr.ErrRecovering)
	var e *apierr.Error
	errors.As(err, &e)
	if e.Code != apierr.CodeUnavailable || e.RetryAfter != 10*time.Second || !strings.Contains(e.Message, until.Format(time.RFC3339Nano)) {
		t.Fatalf("recovering error = %#v", e)
	}
	w := te2.startAcquire(t, AcquireRequest{Pool: "db", Weight: 1})
	if s := te2.status(t, "db"); s.Waiting != 1 || s.Held != 0 {
		t.Fatalf("during recovery: %+v", s)
	}
	te2.clk.Advance(10*time.Second - time.Nanosecond)
	if w.finished() {
		t.Fatal("waiter granted before the window ended")
	}
	te2.clk.Advance(time.Nanosecond)
	l, err := w.result(t)
	if err != nil || !l.AcquireTime.Equal(until) {
		t.Fatalf("waiter at the window's end: %+v, %v", l, err)
	}
	if s := te2.status(t, "db"); !s.RecoveringUntil.IsZero() {
		t.Fatalf("after the window: %+v", s)
	}
}

// TestHeldBoundGrantsAtOnce: the held-weight bound written ahead lets a
// restarted pool grant at once what leases from before the restart cannot
// hold; re-adopting them moves their weight from the bound to held.
func TestHeldBoundGrantsAtOnce(t *testing.T) {
	m := newMemPersister()
	te := newPersistentTestEngine(t, m)
	te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 16, MaxLeaseTTL: 10 * time.Second})
	l := te.mustAcquire(t, AcquireRequest{Pool: "db", Weight: 3, TTL: 10 * time.Second})
	sp, _ := m.saved("db")
	if b := sp.State.HeldBound; b != 5 { // 3 held + 16/8
		t.Fatalf("held bound %d, want 5", b)
	}
	te2 := te.restart(t, m, time.Second)
	if s := te2.status(t, "db"); s.RecoveringUntil.IsZero() {
		t.Fatal("not recovering")
	}
	te2.mustAcquire(t, AcquireRequest{Pool: "db", Weight: 11, NoWait: true})
	_, err := te2.Acquire(context.Background(), AcquireRequest{Pool: "db", Weight: 1, NoWait: true})
	wantReason(t, err, apierr.ErrRecovering)
	if !strings.Contains(err.Error(), "may hold up to 5") {
		t.Fatalf("recovering error %q does not say what old leases may hold", err)
	}
	// The bound written now covers the new grant and the old leases.
	sp, _ = m.saved("db")
	if sp.State.HeldBound < 16 {
		t.Fatalf("held bound %d during recovery with 11 held and 5 unknown", sp.State.HeldBound)
	}
	if _, err := te2.RenewOrReadopt("db", l.FencingToken, 10*time.Second, nil, readopt(3)); err != nil {
		t.Fatalf("re-adopting beside the new grant: %v", err)
	}
	if s := te2.status(t, "db"); s.Held != 14 {
		t.Fatalf("held %d after re-adoption, want 14", s.Held)
	}
	_, err = te2.Acquire(context.Background(), AcquireRequest{Pool: "db", Weight: 1, NoWait: true})
	wantReason(t, err, apierr.ErrRecovering) // 14 held + 2 unknown
	// The bound survives a second restart during the window.
	te3 := te2.restart(t, m, 0)
	_, err = te3.Acquire(context.Background(), AcquireRequest{Pool: "db", Weight: 1, NoWait: true})
	wantReason(t, err, apierr.ErrRecovering)
}

// TestHeldBoundWrittenAhead: no grant makes the held weight pass the
// bound written before it, and a pool filling up raises it a few times,
// not at every grant.
func TestHeldBoundWrittenAhead(t *testing.T) {
	m := newMemPersister()
	te := newPersistentTestEngine(t, m)
	te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 64, MaxLeaseTTL: 10 * time.Second})
	var held int64
	raises, last := 0, int64(0)
	for i := 0; i < 64; i++ {
		te.mustAcquire(t, AcquireRequest{Pool: "db", Weight: 1, TTL: 10 * time.Second})
		held++
		sp, _ := m.saved("db")
		if sp.State.HeldBound < held {
			t.Fatalf("held %d above the written bound %d", held, sp.State.HeldBound)
		}
		if sp.State.HeldBound != last {
			raises++
			last = sp.State.HeldBound
		}
	}
	if raises > 9 {
		t.Fatalf("the bound was raised %d times while 64 permits were granted", raises)
	}
}

// TestReadopt: a renew of a lease from before the restart re-adopts it with
// the same token and the weight the renew says; the lease then behaves as
// any other, and is not re-adopted a second time once released.
func TestReadopt(t *testing.T) {
	m := newMemPersister()
	te := newPersistentTestEngine(t, m)
	te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 5, MaxLeaseTTL: 10 * time.Second, DefaultLeaseTTL: 4 * time.Second})
	a := te.mustAcquire(t, AcquireRequest{Pool: "db", Weight: 2, TTL: 10 * time.Second})
	b := te.mustAcquire(t, AcquireRequest{Pool: "db", Weight: 3, TTL: 10 * time.Second})
	te2 := te.restart(t, m, time.Second)

	l, err := te2.RenewOrReadopt("db", a.FencingToken, 0, "owner", readopt(2))
	if err != nil {
		t.Fatal(err)
	}
	want := Lease{Pool: "db", FencingToken: a.FencingToken, Weight: 2, Priority: 2, ClientID: "c", Description: "d", TTL: 4 * time.Second, AcquireTime: te2.clk.Now(), ExpireTime: te2.clk.Now().Add(4 * time.Second)}
	if !reflect.DeepEqual(l, want) {
		t.Fatalf("re-adopted %+v; want %+v", l, want)
	}
	if s := te2.status(t, "db"); s.Held != 2 || s.Leases != 1 || s.Readopted != 1 {
		t.Fatalf("after a re-adoption: %+v", s)
	}
	if l, err = te2.RenewOrReadopt("db", a.FencingToken, 8*time.Second, nil, readopt(2)); err != nil || l.TTL != 8*time.Second {
		t.Fatalf("renew of the re-adopted lease: %+v, %v", l, err)
	}
	if _, err := te2.Release("db", a.FencingToken); err != nil {
		t.Fatal(err)
	}
	_, err = te2.RenewOrReadopt("db", a.FencingToken, 0, nil, readopt(2))
	wantReason(t, err, apierr.ErrLeaseNotReadopted)

	// b's holder releases without renewing first: that is fine.
	if _, err := te2.Release("db", b.FencingToken); err != nil {
		t.Fatalf("release of a lease from before the restart: %v", err)
	}
	_, err = te2.RenewOrReadopt("db", b.FencingToken, 0, nil, readopt(3))
	wantReason(t, err, apierr.ErrLeaseNotReadopted)
	if s := te2.status(t, "db"); s.Held != 0 || s.Released != 2 {
		t.Fatalf("after releases: %+v", s)
	}

	// An expiring re-adopted lease ends like any other.
	te2.clk.Advance(endedFlushDelay) // the releases are written
	te3 := te2.restart(t, m, 0)
	_, err = te3.RenewOrReadopt("db", a.FencingToken, time.Second, nil, readopt(2))
	wantReason(t, err, apierr.ErrLeaseNotReadopted) // released before the restart
	te3.clk.Advance(10 * time.Second)               // its window ends
	d := te3.mustAcquire(t, AcquireRequest{Pool: "db", TTL: 5 * time.Second})
	te4 := te3.restart(t, m, 0)
	c, err := te4.RenewOrReadopt("db", d.FencingToken, time.Second, nil, readopt(1))
	if err != nil {
		t.Fatal(err)
	}
	te4.clk.Advance(time.Second)
	if s := te4.status(t, "db"); s.Held != 0 || s.Expired != 1 {
		t.Fatalf("after the re-adopted lease's TTL: %+v", s)
	}
	_, err = te4.RenewOrReadopt("db", c.FencingToken, 0, nil, readopt(1))
	wantReason(t, err, apierr.ErrLeaseExpired)
}

// TestReadoptRefusals: what is not re-adopted, and why.
func TestReadoptRefusals(t *testing.T) {
	m := newMemPersister()
	te := newPersistentTestEngine(t, m)
	te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 3, MaxLeaseTTL: 10 * time.Second})
	a := te.mustAcquire(t, AcquireRequest{Pool: "db", Weight: 2, TTL: 10 * time.Second})
	b := te.mustAcquire(t, AcquireRequest{Pool: "db", Weight: 1, TTL: 10 * time.Second})
	te2 := te.restart(t, m, time.Second)

	_, err := te2.RenewOrReadopt("db", a.FencingToken, 0, nil, Readopt{})
	wantReason(t, err, apierr.ErrLeaseNotReadopted)
	if !strings.Contains(err.Error(), "weight") {
		t.Fatalf("message does not say the weight is missing: %v", err)
	}
	_, err = te2.Renew("db", a.FencingToken, 0, nil) // the engine's plain Renew never re-adopts
	wantReason(t, err, apierr.ErrLeaseNotFound)
	_, err = te2.RenewOrReadopt("db", a.FencingToken, time.Hour, nil, readopt(2))
	wantReason(t, err, apierr.ErrInvalidArgument)
	_, err = te2.RenewOrReadopt("db", a.FencingToken, 0, nil, Readopt{Weight: 1, ClientID: strings.Repeat("x", MaxClientIDLen+1), Receipt: Receipt{Expiry: liveReceipt, Weight: 1}})
	wantReason(t, err, apierr.ErrInvalidArgument)

	// A holder that claims more than fits is refused; the others fit.
	if _, err := te2.RenewOrReadopt("db", b.FencingToken, 0, nil, readopt(3)); err != nil {
		t.Fatal(err)
	}
	_, err = te2.RenewOrReadopt("db", a.FencingToken, 0, nil, readopt(2))
	wantReason(t, err, apierr.ErrLeaseNotReadopted)
	if s := te2.status(t, "db"); s.Held != 3 {
		t.Fatalf("held %d after a refused re-adoption; want 3", s.Held)
	}

	// Tokens never issued before the restart are not re-adopted.
	sp, _ := m.saved("db")
	_, err = te2.RenewOrReadopt("db", sp.State.TokenCeiling+1, 0, nil, readopt(1))
	wantReason(t, err, apierr.ErrLeaseNotFound)

	// After the window nothing is re-adopted.
	te2.clk.Advance(10 * time.Second)
	_, _ = te2.Release("db", b.FencingToken)
	_, err = te2.RenewOrReadopt("db", a.FencingToken, 0, nil, readopt(2))
	wantReason(t, err, apierr.ErrLeaseNotFound)
	_, err = te2.Release("db", a.FencingToken)
	wantReason(t, err, apierr.ErrLeaseNotFound)
}

// TestRecoveryRatePools: a pool with only a rate grants during the window
// (it has no held capacity to protect) but its bucket starts empty, so a
// restart never adds a burst; re-adoption works there too.
func TestRecoveryRatePools(t *testing.T) {
	m := newMemPersister()
	te := newPersistentTestEngine(t, m)
	te.mustCreate(t, PoolConfig{Name: "api", Rate: 10, Burst: 10, MaxLeaseTTL: 10 * time.Second})
	a := te.mustAcquire(t, AcquireRequest{Pool: "api", TTL: 10 * time.Second})
	te2 := te.restart(t, m, time.Second)
	if s := te2.status(t, "api"); s.RecoveringUntil.IsZero() || s.TokensAvailable > 0 {
		t.Fatalf("restored rate pool: %+v", s)
	}
	_, err := te2.Take(context.Background(), "api", 1, 0)
	wantReason(t, err, apierr.ErrRateLimited)
	te2.clk.Advance(100 * time.Millisecond)
	if _, err := te2.Acquire(context.Background(), AcquireRequest{Pool: "api", Weight: 1, NoWait: true}); err != nil {
		t.Fatalf("acquire in a rate pool during recovery: %v", err)
	}
	if _, err := te2.RenewOrReadopt("api", a.FencingToken, 0, nil, readopt(5)); err != nil {
		t.Fatalf("re-adopt in a rate pool: %v", err)
	}

	// A limit added during the window holds back grants from then on.
	if _, err := te2.UpdatePool("api", func(c *PoolConfig) { c.ConcurrencyLimit = 100 }); err != nil {
		t.Fatal(err)
	}
	te2.clk.Advance(time.Second)
	_, err = te2.Acquire(context.Background(), AcquireRequest{Pool: "api", Weight: 1, NoWait: true})
	wantReason(t, err, apierr.ErrRecovering)
}

// TestTTLBoundCoversLoweredMaxTTL: leases granted under a larger
// MaxLeaseTTL keep the recovery window long enough for them after the
// maximum is lowered, until their horizon passes.
func TestTTLBoundCoversLoweredMaxTTL(t *testing.T) {
	m := newMemPersister()
	te := newPersistentTestEngine(t, m)
	te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 1, MaxLeaseTTL: time.Minute})
	te.mustAcquire(t, AcquireRequest{Pool: "db", TTL: time.Minute}) // expires at 60s; horizon 90s
	if _, err := te.UpdatePool("db", func(c *PoolConfig) {
		c.MaxLeaseTTL = time.Second
		c.DefaultLeaseTTL = time.Second
		c.ConcurrencyLimit = 2
	}); err != nil {
		t.Fatal(err)
	}
	// Enough grants to write a new block of tokens while the long lease
	// is live: that write must keep the bound.
	for i := 0; i < 2*minTokenBlock; i++ {
		l := te.mustAcquire(t, AcquireRequest{Pool: "db"})
		_, _ = te.Release("db", l.FencingToken)
	}
	te2 := te.restart(t, m, 5*time.Second)
	if got, want := te2.status(t, "db").RecoveringUntil, epoch.Add(65*time.Second); !got.Equal(want) {
		t.Fatalf("recovering until %v; want %v (restart + the old maximum TTL)", got, want)
	}
	// Long after, the bound shrinks back with the next horizon write.
	te2.clk.Advance(5 * time.Minute)
	te2.mustAcquire(t, AcquireRequest{Pool: "db"})
	if sp, _ := m.saved("db"); sp.State.TTLBound != time.Second {
		t.Fatalf("TTL bound %v after the old horizon passed; want the new maximum 1s", sp.State.TTLBound)
	}
}

// TestRestoreErrors: a bad record or a taken name is refused.
func TestRestoreErrors(t *testing.T) {
	te := newTestEngine(t)
	_, err := te.RestorePool(SavedPool{Config: PoolConfig{Name: "bad name", ConcurrencyLimit: 1}})
	wantReason(t, err, apierr.ErrInvalidArgument)
	te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 1})
	_, err = te.RestorePool(SavedPool{Config: PoolConfig{Name: "db", ConcurrencyLimit: 1}})
	wantReason(t, err, apierr.ErrPoolExists)
	te.Close()
	_, err = te.RestorePool(SavedPool{Config: PoolConfig{Name: "x", ConcurrencyLimit: 1}})
	wantReason(t, err, apierr.ErrShuttingDown)
}

// TestDeleteDuringRecovery: deleting a recovering pool stops its window.
func TestDeleteDuringRecovery(t *testing.T) {
	m := newMemPersister()
	te := newPersistentTestEngine(t, m)
	te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 1, MaxLeaseTTL: 10 * time.Second})
	te.mustAcquire(t, AcquireRequest{Pool: "db", TTL: 10 * time.Second})
	te2 := te.restart(t, m, 0)
	w := te2.startAcquire(t, AcquireRequest{Pool: "db", Weight: 1})
	if err := te2.DeletePool("db", false); err != nil {
		t.Fatal(err)
	}
	_, err := w.result(t)
	wantReason(t, err, apierr.ErrPoolDeleted)
	if n := te2.clk.Pending(); n != 0 {
		t.Fatalf("%d timers left after deleting the recovering pool", n)
	}
}

// TestRecoveryWindowFollowsTTLsInUse: the window lasts as long as the
// leases really granted, not the pool's MaxLeaseTTL: with the default 5m
// maximum and 15s leases, 15s. A longer lease is reserved before it is
// granted, and the window then covers it.
func TestRecoveryWindowFollowsTTLsInUse(t *testing.T) {
	m := newMemPersister()
	te := newPersistentTestEngine(t, m)
	te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 5}) // max TTL 5m, default 15s
	te.mustAcquire(t, AcquireRequest{Pool: "db"})
	te2 := te.restart(t, m, time.Second)
	if got, want := te2.status(t, "db").RecoveringUntil, epoch.Add(16*time.Second); !got.Equal(want) {
		t.Fatalf("recovering until %v; want restart + 15s = %v", got, want)
	}

	te2.clk.Advance(time.Minute)
	te2.mustAcquire(t, AcquireRequest{Pool: "db"}) // horizon now + 15s + 30s
	// 40s: within the horizon, but longer than any lease before.
	before := m.writeCount()
	long := te2.mustAcquire(t, AcquireRequest{Pool: "db", TTL: 40 * time.Second})
	if m.writeCount() != before+1 {
		t.Fatal("a lease longer than any before was granted without writing the TTL bound first")
	}
	if sp, _ := m.saved("db"); sp.State.TTLBound != 40*time.Second || sp.State.LeaseHorizon.Before(long.ExpireTime) {
		t.Fatalf("saved state %+v for a lease expiring at %v", sp.State, long.ExpireTime)
	}
	te3 := te2.restart(t, m, time.Second)
	if got, want := te3.status(t, "db").RecoveringUntil, te3.clk.Now().Add(40*time.Second); !got.Equal(want) {
		t.Fatalf("recovering until %v; want restart + 40s = %v", got, want)
	}
}

// TestCleanStopNeedsNoWindow: after a graceful stop (Close, then
// RecordCleanStop), a pool that held nothing restarts with no recovery
// window, one that held a lease recovers as after a crash; the next grant
// writes a horizon again before it is made, so a crash after it recovers;
// and no lease from before the clean stop is re-adopted later.
func TestCleanStopNeedsNoWindow(t *testing.T) {
	m := newMemPersister()
	te := newPersistentTestEngine(t, m)
	te.mustCreate(t, PoolConfig{Name: "idle", ConcurrencyLimit: 2, MaxLeaseTTL: 10 * time.Second})
	te.mustCreate(t, PoolConfig{Name: "busy", ConcurrencyLimit: 2, MaxLeaseTTL: 10 * time.Second})
	a := te.mustAcquire(t, AcquireRequest{Pool: "idle", TTL: 10 * time.Second})
	if _, err := te.Release("idle", a.FencingToken); err != nil {
		t.Fatal(err)
	}
	te.mustAcquire(t, AcquireRequest{Pool: "busy", TTL: 10 * time.Second})
	te.Engine.Close()
	te.RecordCleanStop()

	te2 := te.restart(t, m, time.Second)
	if got := te2.status(t, "idle").RecoveringUntil; !got.IsZero() {
		t.Fatalf("a pool that held nothing at a clean stop recovers until %v", got)
	}
	if got := te2.status(t, "busy").RecoveringUntil; got.IsZero() {
		t.Fatal("a pool that held a lease at the stop does not recover")
	}
	b := te2.mustAcquire(t, AcquireRequest{Pool: "idle", TTL: 10 * time.Second})
	if sp, _ := m.saved("idle"); sp.State.LeaseHorizon.Before(b.ExpireTime) {
		t.Fatalf("granted until %v over a saved horizon of %v", b.ExpireTime, sp.State.LeaseHorizon)
	}
	te3 := te2.restart(t, m, time.Second) // a crash
	if got := te3.status(t, "idle").RecoveringUntil; got.IsZero() {
		t.Fatal("no recovery after a crash that followed a grant")
	}
	_, err := te3.RenewOrReadopt("idle", a.FencingToken, 0, nil, readopt(1))
	wantReason(t, err, apierr.ErrLeaseNotReadopted)
	if _, err := te3.RenewOrReadopt("idle", b.FencingToken, 0, nil, readopt(1)); err != nil {
		t.Fatalf("the live lease: %v", err)
	}
}

// TestCleanStopWritesExactHeldBound: the final write of a clean stop
// lowers a pool's held-weight bound to the weight its leases hold, and no
// other write ever lowers it; the next start grants at once beside them,
// re-adopted or not, gets a re-adopted lease's weight back when it is
// released, and the rest once the window ends. When the final write fails,
// the next start keeps the higher bound written ahead.
func TestCleanStopWritesExactHeldBound(t *testing.T) {
	for _, finalFails := range []bool{false, true} {
		m := newMemPersister()
		final, lowered := false, 0
		m.setFail(func(old, sp SavedPool, deleting bool) error {
			if final && finalFails {
				return errors.New("fenced")
			}
			if !deleting && old.State.HeldBound >= 0 && sp.State.HeldBound < old.State.HeldBound {
				if !final {
					t.Errorf("held bound lowered from %d to %d outside the final write", old.State.HeldBound, sp.State.HeldBound)
				}
				lowered++
			}
			return nil
		})
		te := newPersistentTestEngine(t, m)
		te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 16, MaxLeaseTTL: 10 * time.Second})
		a := te.mustAcquire(t, AcquireRequest{Pool: "db", Weight: 3, TTL: 4 * time.Second})
		b := te.mustAcquire(t, AcquireRequest{Pool: "db", Weight: 5, TTL: 4 * time.Second})
		te.mustAcquire(t, AcquireRequest{Pool: "db", Weight: 2, TTL: 4 * time.Second}) // its holder never renews
		if _, err := te.Release("db", b.FencingToken); err != nil {
			t.Fatal(err)
		}
		sp, _ := m.saved("db")
		ahead := sp.State.HeldBound
		if ahead != 10 { // 8 held + 16/8, not lowered by the release
			t.Fatalf("held bound %d before the stop, want 10", ahead)
		}
		te.Engine.Close()
		final = true
		te.RecordCleanStop()
		final = false
		want := int64(5) // 3 + 2 held
		if finalFails {
			want = ahead
		}
		if sp, _ := m.saved("db"); sp.State.HeldBound != want || (lowered == 1) == finalFails {
			t.Fatalf("final write failing %v: saved held bound %d (lowered %d times), want %d", finalFails, sp.State.HeldBound, lowered, want)
		}

		te2 := te.restart(t, m, 100*time.Millisecond)
		te2.mustAcquire(t, AcquireRequest{Pool: "db", Weight: 16 - want, NoWait: true, TTL: 10 * time.Second})
		_, err := te2.Acquire(context.Background(), AcquireRequest{Pool: "db", Weight: 1, NoWait: true})
		wantReason(t, err, apierr.ErrRecovering)
		if finalFails {
			continue
		}
		if _, err := te2.RenewOrReadopt("db", a.FencingToken, 10*time.Second, nil, readopt(3)); err != nil {
			t.Fatalf("re-adopting beside the new grant: %v", err)
		}
		_, err = te2.Acquire(context.Background(), AcquireRequest{Pool: "db", Weight: 1, NoWait: true})
		wantReason(t, err, apierr.ErrRecovering) // 11 + 3 held, 2 may be
		if _, err := te2.Release("db", a.FencingToken); err != nil {
			t.Fatal(err)
		}
		te2.mustAcquire(t, AcquireRequest{Pool: "db", Weight: 3, NoWait: true, TTL: 10 * time.Second})
		te2.clk.Advance(4*time.Second - time.Millisecond) // the silent holder's lease may still be live
		_, err = te2.Acquire(context.Background(), AcquireRequest{Pool: "db", Weight: 1, NoWait: true})
		wantReason(t, err, apierr.ErrRecovering)
		te2.clk.Advance(time.Millisecond) // restart + TTL bound: it is over
		te2.mustAcquire(t, AcquireRequest{Pool: "db", Weight: 2, NoWait: true})
		if s := te2.status(t, "db"); s.Held != 16 || !s.RecoveringUntil.IsZero() {
			t.Fatalf("after the window: %+v", s)
		}
	}
}

// TestWallClockStepNeverShortensTheWindow: the engine's clock stepping
// forward by up to ClockStepTolerance just before a crash (the saved
// horizon, in wall time, then looks that much earlier than the lease it
// covers really ends) leaves the recovery window long enough to cover the
// lease by the time that really passes.
func TestWallClockStepNeverShortensTheWindow(t *testing.T) {
	for _, step := range []time.Duration{5 * time.Second, time.Minute, ClockStepTolerance} {
		m := newMemPersister()
		te := newPersistentTestEngine(t, m, time.Millisecond) // the horizon hugs the lease
		te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 1, MaxLeaseTTL: 10 * time.Second})
		l := te.mustAcquire(t, AcquireRequest{Pool: "db", TTL: 10 * time.Second})
		// The wall clock steps forward by step, and the engine crashes at
		// once: no real time passes, so the holder keeps its lease until
		// ExpireTime + step on the stepped clock.
		te2 := te.restart(t, m, step)
		if got, end := te2.status(t, "db").RecoveringUntil, l.ExpireTime.Add(step); got.Before(end) {
			t.Fatalf("after a %v step: recovering until %v, before the lease really ends at %v", step, got, end)
		}
	}
}

// TestShareGrowthWithinHeldBound: a concurrency share that grows, by its
// holder's resize or by the fair split, never holds more than the
// written bound: a successor after a crash counts on it.
func TestShareGrowthWithinHeldBound(t *testing.T) {
	m := newMemPersister()
	te := newPersistentTestEngine(t, m)
	te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 64, MaxLeaseTTL: 10 * time.Second})
	check := func(what string) {
		t.Helper()
		held := te.status(t, "db").Held
		if sp, _ := m.saved("db"); sp.State.HeldBound < held {
			t.Fatalf("%s: held %d above the written bound %d", what, held, sp.State.HeldBound)
		}
	}
	a := te.mustAcquire(t, AcquireRequest{Pool: "db", Weight: 1, TTL: 10 * time.Second})
	if _, err := te.ResizeLease(LeaseResize{Pool: "db", Token: a.FencingToken, Weight: 40}); err != nil {
		t.Fatal(err)
	}
	check("grown by its holder to 40")
	b := te.mustAcquire(t, AcquireRequest{Pool: "db", Weight: 1, TTL: 10 * time.Second})
	if l, err := te.ResizeLease(LeaseResize{Pool: "db", Token: b.FencingToken, Want: 64}); err != nil || l.Weight != 24 {
		t.Fatalf("a share wanting 64 beside 40 held: %+v, %v; want it grown to 24", l, err)
	}
	check("grown by the fair split to 24")
}
