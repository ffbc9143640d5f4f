package limiter

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter/fakeclock"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// durFixture is a durable part on its own: a fake pool (durHost) and an
// engine environment of a fake clock and a memPersister.
type durFixture struct {
	d      durable
	m      *memPersister
	clk    *fakeclock.Clock
	closed atomic.Bool
	bg     sync.WaitGroup
	host   *fakeDurHost
}

// fakeDurHost is a pool as a durable part sees it.
type fakeDurHost struct {
	mu        sync.Mutex
	cfg       PoolConfig
	lastToken uint64
	w         weightHeld
	deleted   bool
}

func (h *fakeDurHost) lock()   { h.mu.Lock() }
func (h *fakeDurHost) unlock() { h.mu.Unlock() }
func (h *fakeDurHost) record(cfg *PoolConfig) SavedPool {
	if cfg == nil {
		cfg = &h.cfg
	}
	return SavedPool{Config: *cfg, State: DurableState{LiveMark: h.lastToken}}
}
func (h *fakeDurHost) heldNow() weightHeld { return h.w }
func (h *fakeDurHost) gone() bool          { return h.deleted }
func (h *fakeDurHost) poolName() string    { return "p" }

// newDurFixture returns a durable part for a pool with concurrency limit
// limit, reservations st, writing to a memPersister (none when
// noPersister), ahead of need when preReserve.
func newDurFixture(t *testing.T, limit int64, st DurableState, preReserve, noPersister bool) *durFixture {
	t.Helper()
	f := &durFixture{m: newMemPersister(), clk: fakeclock.New(time.Unix(1_700_000_000, 0))}
	f.host = &fakeDurHost{cfg: PoolConfig{Name: "p", ConcurrencyLimit: limit}, w: weightHeld{bounded: true}}
	env := &durEnv{persister: f.m, clock: f.clk, horizonSlack: DefaultHorizonSlack, preReserve: preReserve, closed: &f.closed, bg: &f.bg, acting: func() bool { return true }}
	if noPersister {
		env.persister = nil
	}
	f.d.init(env, f.host, st)
	f.d.configure(limit)
	t.Cleanup(func() { f.closed.Store(true); f.bg.Wait() })
	return f
}

// reserve reserves a grant of weight at the fixture's clock, for ttl, as
// the pool does under its lock.
func (f *durFixture) reserve(ttl time.Duration, weight int64) error {
	f.host.lock()
	defer f.host.unlock()
	now := f.clk.Now()
	return f.d.reserve(f.host.lastToken, f.host.w, now, now.Add(ttl), weight)
}

// grant is a reserved grant of weight: the token issued and the weight held.
func (f *durFixture) grant(t *testing.T, ttl time.Duration, weight int64) {
	t.Helper()
	if err := f.reserve(ttl, weight); err != nil {
		t.Fatalf("reserve: %v", err)
	}
	f.host.lock()
	f.host.lastToken++
	f.host.w.held += weight
	f.d.granted(f.host.lastToken)
	f.host.unlock()
}

// TestDurableReservesAhead: the first grant writes a block of tokens, a
// TTL bound and a horizon; grants within them write nothing; the token
// past the ceiling writes the next block, twice as large when the writes
// come less than a second apart.
func TestDurableReservesAhead(t *testing.T) {
	f := newDurFixture(t, 0, DurableState{TokenCeiling: minTokenBlock}, false, false)
	f.grant(t, 10*time.Second, 1)
	st := f.d.state
	if f.m.writeCount() != 1 || st.TTLBound != 10*time.Second || !st.LeaseHorizon.Equal(f.clk.Now().Add(10*time.Second+DefaultHorizonSlack)) || st.HeldBound != -1 {
		t.Fatalf("after the first grant: %d writes, state %+v", f.m.writeCount(), st)
	}
	for f.host.lastToken < st.TokenCeiling {
		f.grant(t, 10*time.Second, 1)
	}
	if f.m.writeCount() != 1 {
		t.Fatalf("grants within the reservations wrote: %d writes", f.m.writeCount())
	}
	f.grant(t, 10*time.Second, 1) // past the ceiling
	if got := f.d.state.TokenCeiling; f.m.writeCount() != 2 || got != minTokenBlock+minTokenBlock {
		t.Fatalf("the grant past the ceiling: %d writes, ceiling %d; want 2 and %d", f.m.writeCount(), got, 2*minTokenBlock)
	}
	f.grant(t, 20*time.Second, 1) // a longer TTL
	if f.m.writeCount() != 3 || f.d.state.TTLBound != 20*time.Second {
		t.Fatalf("a longer TTL: %d writes, TTL bound %v", f.m.writeCount(), f.d.state.TTLBound)
	}
	f.host.lastToken = f.d.state.TokenCeiling // the next block comes within the second
	f.grant(t, 10*time.Second, 1)
	if want := f.host.lastToken - 1 + 2*minTokenBlock; f.d.state.TokenCeiling != want {
		t.Fatalf("a block within a second of the last: ceiling %d, want %d (doubled)", f.d.state.TokenCeiling, want)
	}
	sp, _ := f.m.saved("p")
	if sp.State.TokenCeiling != f.d.state.TokenCeiling || sp.State.LiveMark != f.host.lastToken-1 {
		t.Fatalf("on disk %+v, in force %+v", sp.State, f.d.state)
	}
}

// TestDurableHeldBound: in a pool with a concurrency limit the bound
// covers what is held, the grant and a slack, capped at the limit; a grant
// within it writes nothing; a window whose old leases are not bounded
// keeps none.
func TestDurableHeldBound(t *testing.T) {
	f := newDurFixture(t, 16, DurableState{TokenCeiling: minTokenBlock}, false, false)
	f.grant(t, 10*time.Second, 3)
	if got := f.d.state.HeldBound; got != 3+heldSlack(16) {
		t.Fatalf("held-weight bound %d, want %d", got, 3+heldSlack(16))
	}
	f.grant(t, 10*time.Second, 2) // 5: within
	if f.m.writeCount() != 1 {
		t.Fatalf("a grant within the bound wrote: %d writes", f.m.writeCount())
	}
	f.grant(t, 10*time.Second, 10) // 15: past it
	if got := f.d.state.HeldBound; f.m.writeCount() != 2 || got != 16 {
		t.Fatalf("a grant past the bound: %d writes, bound %d; want 2 and 16 (the limit)", f.m.writeCount(), got)
	}
	if got := f.d.exact(weightHeld{held: 7, bounded: false}); got != -1 {
		t.Fatalf("exact of an unbounded window: %d, want -1", got)
	}
	f.d.configure(0) // the limit went away: no bound
	if got := f.d.heldBound(weightHeld{held: 7, bounded: true}, 1); got != -1 {
		t.Fatalf("bound without a limit: %d, want -1", got)
	}
}

// TestDurableWriteFailureKeepsState: a failed write is apierr.ErrStorageFailed,
// and the reservations in force stay as they were.
func TestDurableWriteFailureKeepsState(t *testing.T) {
	f := newDurFixture(t, 16, DurableState{TokenCeiling: minTokenBlock}, false, false)
	f.grant(t, 10*time.Second, 1)
	before := f.d.state
	f.m.setFail(func(_, _ SavedPool, _ bool) error { return errDiskFull })
	err := f.reserve(time.Minute, 1) // a longer TTL: must write
	if !errors.Is(err, apierr.ErrStorageFailed) {
		t.Fatalf("reserve with a failing disk: %v, want apierr.ErrStorageFailed", err)
	}
	if got := f.d.state; got.TTLBound != before.TTLBound || got.TokenCeiling != before.TokenCeiling || !got.LeaseHorizon.Equal(before.LeaseHorizon) {
		t.Fatalf("state after a failed write %+v, want %+v", got, before)
	}
	if err := f.d.write(nil, nil, "update pool"); !errors.Is(err, apierr.ErrStorageFailed) {
		t.Fatalf("write with a failing disk: %v", err)
	}
	if err := f.d.delete(5); !errors.Is(err, apierr.ErrStorageFailed) {
		t.Fatalf("delete with a failing disk: %v", err)
	}
}

// TestDurableWithoutPersister: without a Persister nothing is reached and
// nothing is written.
func TestDurableWithoutPersister(t *testing.T) {
	f := newDurFixture(t, 16, DurableState{TokenCeiling: minTokenBlock}, true, true)
	for range 3 * minTokenBlock {
		f.grant(t, MaxLeaseTTLLimit, 1)
	}
	if f.d.state.TokenCeiling != noPersistCeiling || f.d.state.HeldBound != -1 || f.d.live.pending() {
		t.Fatalf("state without a Persister: %+v", f.d.state)
	}
	if err := f.d.write(nil, nil, "x"); err != nil {
		t.Fatal(err)
	}
	if err := f.d.delete(1); err != nil {
		t.Fatal(err)
	}
	f.d.recordCleanStop(false, weightHeld{bounded: true})
}

// TestDurableWritesAhead: with preReserve, a grant that has used half of
// the block starts the next one in the background, and the grants after
// it find it written.
func TestDurableWritesAhead(t *testing.T) {
	f := newDurFixture(t, 0, DurableState{TokenCeiling: minTokenBlock}, true, false)
	f.grant(t, 10*time.Second, 1)
	for f.host.lastToken < minTokenBlock/2+1 {
		f.grant(t, 10*time.Second, 1)
	}
	f.bg.Wait()
	if f.m.writeCount() != 2 || f.d.state.TokenCeiling != 2*minTokenBlock || f.d.w.pending != nil {
		t.Fatalf("after half the block: %d writes, ceiling %d, pending %v", f.m.writeCount(), f.d.state.TokenCeiling, f.d.w.pending != nil)
	}
}

// TestDurableHeldBoundComesDown: a bound well above what is held is
// lowered in the background, at most every heldLowerPeriod.
func TestDurableHeldBoundComesDown(t *testing.T) {
	f := newDurFixture(t, 64, DurableState{TokenCeiling: minTokenBlock}, true, false)
	f.grant(t, 10*time.Second, 40)
	f.bg.Wait()
	high := f.d.state.HeldBound
	f.host.lock()
	f.host.w.held = 0 // the leases ended
	f.d.lowerHeldBound(f.host.w, f.clk.Now(), 0)
	f.host.unlock()
	f.bg.Wait()
	if got := f.d.state.HeldBound; got != heldSlack(64) || got >= high {
		t.Fatalf("bound after the leases ended: %d (was %d), want %d", got, high, heldSlack(64))
	}
	sp, _ := f.m.saved("p")
	if sp.State.HeldBound != f.d.state.HeldBound {
		t.Fatalf("bound on disk %d, in force %d", sp.State.HeldBound, f.d.state.HeldBound)
	}
}

// TestDurableRecordCleanStop: a pool that holds nothing records empty
// horizons and an empty live set; one that holds leases records the exact
// weight they hold as its bound.
func TestDurableRecordCleanStop(t *testing.T) {
	f := newDurFixture(t, 16, DurableState{TokenCeiling: minTokenBlock}, false, false)
	f.grant(t, 10*time.Second, 4)
	f.d.recordCleanStop(true, f.host.w)
	if sp, _ := f.m.saved("p"); sp.State.HeldBound != 4 || sp.State.LeaseHorizon.IsZero() {
		t.Fatalf("clean stop holding 4: on disk %+v", sp.State)
	}
	f.d.leaseEnded(f.host.lastToken)
	f.host.w.held = 0
	f.d.recordCleanStop(false, f.host.w)
	sp, _ := f.m.saved("p")
	if !sp.State.LeaseHorizon.IsZero() || !sp.State.ShareHorizon.IsZero() || sp.State.HeldBound != 0 || f.d.live.pending() {
		t.Fatalf("clean stop holding nothing: on disk %+v", sp.State)
	}
}

// TestDurableLiveSet: a released lease from before a restart is ended
// once, and the change is written in the background.
func TestDurableLiveSet(t *testing.T) {
	f := newDurFixture(t, 0, DurableState{TokenCeiling: minTokenBlock}, false, false)
	f.grant(t, 10*time.Second, 1)
	tok := f.host.lastToken
	if live, _ := f.d.live.live(tok); !live {
		t.Fatal("a granted token is not live")
	}
	f.host.lock()
	if !f.d.releaseUnknown(tok) {
		t.Fatal("releaseUnknown of a live token: false")
	}
	if f.d.releaseUnknown(tok) {
		t.Fatal("releaseUnknown of a released token: true")
	}
	f.d.resized(tok+1, 3)
	f.host.unlock()
	writes := f.m.writeCount()
	f.clk.Advance(endedFlushDelay)
	f.bg.Wait()
	if f.m.writeCount() != writes+1 || f.d.live.pending() {
		t.Fatalf("the live set's write: %d writes (was %d), pending %v", f.m.writeCount(), writes, f.d.live.pending())
	}
}
