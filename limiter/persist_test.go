package limiter

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// memPersister is a Persister in memory that can be made to fail, and that
// checks the engine's promises as it goes.
type memPersister struct {
	mu     sync.Mutex
	pools  map[string]SavedPool
	chunks map[string]map[uint64]LiveChunk // each pool's live set
	writes int
	// liveBytes counts the chunks written, at their size in memory.
	liveBytes int
	fail      func(old, new SavedPool, deleting bool) error // nil: succeed

	tokenFloor uint64 // the highest floor DeletePool recorded
}

func newMemPersister() *memPersister {
	return &memPersister{pools: make(map[string]SavedPool), chunks: make(map[string]map[uint64]LiveChunk)}
}

var errDiskFull = errors.New("disk full")

func (m *memPersister) SavePool(sp SavedPool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	old := m.pools[sp.Config.Name]
	if m.fail != nil {
		if err := m.fail(old, sp, false); err != nil {
			return err
		}
	}
	m.writes++
	m.liveBytes += len(sp.LiveChunks) * (len(LiveBits{})*8 + 8)
	chunks := m.chunks[sp.Config.Name]
	if chunks == nil {
		chunks = make(map[uint64]LiveChunk)
		m.chunks[sp.Config.Name] = chunks
	}
	for _, c := range sp.LiveChunks { // the changes: a store keeps them all
		if c.Delete {
			delete(chunks, c.Index)
		} else {
			chunks[c.Index] = c
		}
	}
	sp.LiveChunks, sp.liveVers = nil, nil
	m.pools[sp.Config.Name] = sp
	return nil
}

func (m *memPersister) DeletePool(name string, tokenFloor uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail != nil {
		if err := m.fail(m.pools[name], SavedPool{}, true); err != nil {
			return err
		}
	}
	m.writes++
	delete(m.pools, name)
	delete(m.chunks, name)
	m.tokenFloor = max(m.tokenFloor, tokenFloor)
	return nil
}

func (m *memPersister) setFail(f func(old, new SavedPool, deleting bool) error) {
	m.mu.Lock()
	m.fail = f
	m.mu.Unlock()
}

func (m *memPersister) saved(name string) (SavedPool, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	sp, ok := m.pools[name]
	return sp, ok
}

func (m *memPersister) snapshot() []SavedPool {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]SavedPool, 0, len(m.pools))
	for name, sp := range m.pools {
		for _, c := range m.chunks[name] {
			sp.LiveChunks = append(sp.LiveChunks, c)
		}
		out = append(out, sp)
	}
	return out
}

func (m *memPersister) writeCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.writes
}

// newPersistentTestEngine is a test engine on a fake clock writing to m,
// with the horizon slack given (or the default).
func newPersistentTestEngine(t testing.TB, m *memPersister, slack ...time.Duration) *testEngine {
	t.Helper()
	te := newTestEngine(t)
	te.Engine.Close()
	opts := Options{Clock: te.clk, Persister: m, OnLeaseEnded: te.Engine.onLeaseEnded}
	if len(slack) > 0 {
		opts.HorizonSlack = slack[0]
	}
	te.Engine = New(opts)
	t.Cleanup(te.Engine.Close)
	return te
}

// TestPersistBeforeVisible: pool changes reach the Persister before they
// are visible, and a failed write leaves the pool as it was.
func TestPersistBeforeVisible(t *testing.T) {
	m := newMemPersister()
	te := newPersistentTestEngine(t, m)

	m.setFail(func(SavedPool, SavedPool, bool) error { return errDiskFull })
	_, err := te.CreatePool(PoolConfig{Name: "db", ConcurrencyLimit: 2})
	wantReason(t, err, apierr.ErrStorageFailed)
	if _, err := te.GetPool("db"); !errors.Is(err, apierr.ErrPoolNotFound) {
		t.Fatalf("after a failed create: GetPool err = %v; want not found", err)
	}
	m.setFail(nil)
	te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 2, Description: "v1"})
	if sp, ok := m.saved("db"); !ok || sp.Config.ConcurrencyLimit != 2 || sp.Config.MaxLeaseTTL != DefaultMaxLeaseTTL || sp.CreateTime != epoch {
		t.Fatalf("saved after create = %+v, %v", sp, ok)
	}

	l := te.mustAcquire(t, AcquireRequest{Pool: "db"})
	m.setFail(func(SavedPool, SavedPool, bool) error { return errDiskFull })
	_, err = te.UpdatePool("db", func(c *PoolConfig) { c.ConcurrencyLimit = 5; c.Description = "v2" })
	wantReason(t, err, apierr.ErrStorageFailed)
	if info, _ := te.GetPool("db"); info.Config.ConcurrencyLimit != 2 || info.Config.Description != "v1" || info.UpdateTime != epoch {
		t.Fatalf("after a failed update: %+v", info.Config)
	}
	err = te.DeletePool("db", true)
	wantReason(t, err, apierr.ErrStorageFailed)
	if s := te.status(t, "db"); s.Held != 1 {
		t.Fatalf("after a failed delete: %+v", s)
	}
	if _, err := te.Release("db", l.FencingToken); err != nil {
		t.Fatalf("release after a failed delete: %v", err)
	}

	m.setFail(nil)
	te.clk.Advance(time.Second)
	if _, err := te.UpdatePool("db", func(c *PoolConfig) { c.ConcurrencyLimit = 5 }); err != nil {
		t.Fatal(err)
	}
	if sp, _ := m.saved("db"); sp.Config.ConcurrencyLimit != 5 || !sp.UpdateTime.Equal(epoch.Add(time.Second)) || sp.CreateTime != epoch {
		t.Fatalf("saved after update = %+v", sp)
	}
	if err := te.DeletePool("db", false); err != nil {
		t.Fatal(err)
	}
	if _, ok := m.saved("db"); ok {
		t.Fatal("deleted pool still saved")
	}
}

// TestTokensReservedInBlocks: every fencing token is within the ceiling
// written before it was issued, and the ceiling is written once per block,
// the block growing while grants come fast.
func TestTokensReservedInBlocks(t *testing.T) {
	m := newMemPersister()
	te := newPersistentTestEngine(t, m)
	te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 10})
	before := m.writeCount()
	const n = 5000
	for i := 0; i < n; i++ {
		l := te.mustAcquire(t, AcquireRequest{Pool: "db"})
		if sp, _ := m.saved("db"); l.FencingToken > sp.State.TokenCeiling {
			t.Fatalf("token %d issued above the saved ceiling %d", l.FencingToken, sp.State.TokenCeiling)
		}
		if _, err := te.Release("db", l.FencingToken); err != nil {
			t.Fatal(err)
		}
	}
	// 1024 from the create; the first grant writes the horizon; then
	// blocks of 1024, 2048 and 4096: 4 writes.
	if w := m.writeCount() - before; w > 4 {
		t.Fatalf("%d writes for %d grants at one instant; want at most 4", w, n)
	}

	// Slow grants reserve the smallest block again.
	te.clk.Advance(time.Hour)
	sp, _ := m.saved("db")
	for i := uint64(0); ; i++ {
		l := te.mustAcquire(t, AcquireRequest{Pool: "db"})
		_, _ = te.Release("db", l.FencingToken)
		if l.FencingToken > sp.State.TokenCeiling {
			break
		}
		te.clk.Advance(2 * time.Second)
	}
	if got, _ := m.saved("db"); got.State.TokenCeiling-sp.State.TokenCeiling != minTokenBlock {
		t.Fatalf("ceiling moved from %d to %d after slow grants; want one block of %d", sp.State.TokenCeiling, got.State.TokenCeiling, minTokenBlock)
	}
}

// TestHorizonWrittenAhead: every live lease expires no later than the
// saved horizon, and a busy pool writes its horizon about once per slack,
// not per grant or renewal.
func TestHorizonWrittenAhead(t *testing.T) {
	m := newMemPersister()
	te := newPersistentTestEngine(t, m)
	te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 10, MaxLeaseTTL: 10 * time.Second})
	if sp, _ := m.saved("db"); !sp.State.LeaseHorizon.IsZero() {
		t.Fatalf("a new pool has horizon %v; want none until a grant", sp.State.LeaseHorizon)
	}
	l := te.mustAcquire(t, AcquireRequest{Pool: "db", TTL: 10 * time.Second})
	w := 0 // writes that move the horizon (releases are written too)
	m.setFail(func(old, new SavedPool, _ bool) error {
		if !new.State.LeaseHorizon.Equal(old.State.LeaseHorizon) {
			w++
		}
		return nil
	})
	for i := 0; i < 300; i++ { // 300s of renewals every second, and a grant and release
		te.clk.Advance(time.Second)
		rl, err := te.Renew("db", l.FencingToken, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		l2 := te.mustAcquire(t, AcquireRequest{Pool: "db", TTL: 10 * time.Second})
		sp, _ := m.saved("db")
		if rl.ExpireTime.After(sp.State.LeaseHorizon) || l2.ExpireTime.After(sp.State.LeaseHorizon) {
			t.Fatalf("expiry %v / %v past the saved horizon %v", rl.ExpireTime, l2.ExpireTime, sp.State.LeaseHorizon)
		}
		if sp.State.TTLBound < 10*time.Second {
			t.Fatalf("TTL bound %v below the pool's max TTL", sp.State.TTLBound)
		}
		_, _ = te.Release("db", l2.FencingToken)
	}
	// One write per DefaultHorizonSlack (30s) of time: 10, give or take one.
	if w < 9 || w > 11 {
		t.Fatalf("%d horizon writes over 300s with a 30s slack; want about 10", w)
	}
}

// TestReservationFailureGrantsNothing: when the reservation cannot be
// written, nothing is granted or renewed past it; once the disk is back,
// grants resume with larger tokens.
func TestReservationFailureGrantsNothing(t *testing.T) {
	m := newMemPersister()
	te := newPersistentTestEngine(t, m)
	te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 1, MaxLeaseTTL: 10 * time.Second})
	m.setFail(func(old, new SavedPool, _ bool) error { return errDiskFull })

	_, err := te.Acquire(context.Background(), AcquireRequest{Pool: "db", Weight: 1})
	wantReason(t, err, apierr.ErrStorageFailed)
	if s := te.status(t, "db"); s.Held != 0 || s.Leases != 0 || s.Granted != 0 || s.LastFencingToken != 0 {
		t.Fatalf("after a failed reservation: %+v", s)
	}

	m.setFail(nil)
	l := te.mustAcquire(t, AcquireRequest{Pool: "db", TTL: 10 * time.Second})
	w := te.startAcquire(t, AcquireRequest{Pool: "db", Weight: 1})
	// The horizon now covers now+10s+30s: a renewal 35s later needs a write.
	te.clk.Advance(9 * time.Second)
	if _, err := te.Renew("db", l.FencingToken, 0, nil); err != nil {
		t.Fatal(err)
	}
	te.clk.Advance(9 * time.Second)
	if _, err := te.Renew("db", l.FencingToken, 0, nil); err != nil {
		t.Fatal(err)
	}
	te.clk.Advance(9 * time.Second)
	if _, err := te.Renew("db", l.FencingToken, 0, nil); err != nil {
		t.Fatal(err)
	}
	te.clk.Advance(9 * time.Second)
	m.setFail(func(old, new SavedPool, _ bool) error { return errDiskFull })
	before, _ := te.GetPool("db")
	_, err = te.Renew("db", l.FencingToken, 0, nil)
	wantReason(t, err, apierr.ErrStorageFailed)
	p, _ := te.lookup("db")
	p.mu.Lock()
	exp := p.leases[l.FencingToken].ExpireTime
	p.mu.Unlock()
	if after, _ := te.GetPool("db"); after.Status.Held != 1 || !exp.Equal(epoch.Add(37*time.Second)) || after.Status != before.Status {
		t.Fatalf("a failed renew changed the pool: %+v, lease expiry %v", after.Status, exp)
	}

	// The waiter is granted by the release, but its grant cannot be
	// reserved if it needs a write: give it one that does.
	te.clk.Advance(500 * time.Millisecond) // now 36.5s: the waiter's default TTL (10s) passes the horizon
	if _, err := te.Release("db", l.FencingToken); err != nil {
		t.Fatal(err)
	}
	_, err = w.result(t)
	wantReason(t, err, apierr.ErrStorageFailed)
	if s := te.status(t, "db"); s.Held != 0 || s.Waiting != 0 {
		t.Fatalf("after a failed grant to a waiter: %+v", s)
	}

	m.setFail(nil)
	l2 := te.mustAcquire(t, AcquireRequest{Pool: "db"})
	if l2.FencingToken <= l.FencingToken {
		t.Fatalf("token %d after %d", l2.FencingToken, l.FencingToken)
	}
}

// TestNoPersisterNeverWrites: an engine without a Persister has
// unreachable reservations (the hot path never leaves its two comparisons).
func TestNoPersisterNeverWrites(t *testing.T) {
	te := newTestEngine(t)
	te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 1, MaxLeaseTTL: 24 * time.Hour})
	for i := 0; i < 3000; i++ {
		l := te.mustAcquire(t, AcquireRequest{Pool: "db", TTL: 24 * time.Hour})
		if _, err := te.Release("db", l.FencingToken); err != nil {
			t.Fatal(err)
		}
		te.clk.Advance(time.Hour)
	}
	p, _ := te.lookup("db")
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dur.state.TokenCeiling != noPersistCeiling || !p.dur.state.LeaseHorizon.Equal(noPersistHorizon) || p.dur.state.TTLBound != MaxLeaseTTLLimit {
		t.Fatalf("reservations moved without a Persister: %+v", p.dur.state)
	}
}
