package limiter

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/testwait"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// newPreReserveEngine is a test engine on a fake clock writing to m with
// Options.PreReserve.
func newPreReserveEngine(t *testing.T, m *memPersister) *testEngine {
	t.Helper()
	te := newPersistentTestEngine(t, m)
	te.Engine.Close()
	te.Engine = New(Options{Clock: te.clk, Persister: m, PreReserve: true, OnLeaseEnded: te.Engine.onLeaseEnded})
	t.Cleanup(te.Engine.Close)
	return te
}

// pendingWrite reports whether the pool has a background write in flight.
func (te *testEngine) pendingWrite(name string) bool {
	p := te.pools.get(name)
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dur.w.pending != nil
}

// grantOnce acquires and releases one lease, failing the test if the
// grant does not return within 10s (it would be waiting for the disk).
func (te *testEngine) grantOnce(t *testing.T, pool string) Lease {
	t.Helper()
	done := make(chan struct{})
	var l Lease
	var err error
	go func() {
		defer close(done)
		l, err = te.Acquire(context.Background(), AcquireRequest{Pool: pool, Weight: 1, TTL: time.Second, NoWait: true})
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a grant waited for the disk")
	}
	if err != nil {
		t.Fatal(err)
	}
	if _, err := te.Release(pool, l.FencingToken); err != nil {
		t.Fatal(err)
	}
	return l
}

// TestPreReserveKeepsGrantsOffTheDisk: once a pool has used half of its
// block of fencing tokens, the next block is written in the background;
// grants up to the old ceiling go on while that write is stuck, and the
// grants after it need no write of their own.
func TestPreReserveKeepsGrantsOffTheDisk(t *testing.T) {
	m := newMemPersister()
	te := newPreReserveEngine(t, m)
	te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 10})
	gate := make(chan struct{})
	m.mu.Lock()
	m.fail = func(old, new SavedPool, deleting bool) error {
		if new.State.TokenCeiling > old.State.TokenCeiling {
			<-gate // the background write of the next block hangs on the disk
		}
		return nil
	}
	m.mu.Unlock()
	last := te.grantOnce(t, "db")          // the first grant writes the pool's first lease horizon
	writes := m.writeCount()               // (the stuck write will hold m's lock: count before)
	for i := 1; i < minTokenBlock-1; i++ { // up to the ceiling: no grant needs a write
		last = te.grantOnce(t, "db")
	}
	if !te.pendingWrite("db") {
		t.Fatal("no background write of the next block after half of it was used")
	}
	close(gate)
	testwait.For(t, "the pool's write to be taken", func() bool { return !te.pendingWrite("db") })
	if got := m.writeCount(); got != writes+1 {
		t.Fatalf("%d writes for %d grants; want 1, the background one", got-writes, minTokenBlock-1)
	}
	if c := m.snapshot()[0].State.TokenCeiling; c != 2*minTokenBlock {
		t.Fatalf("ceiling on disk %d; want %d", c, 2*minTokenBlock)
	}
	before := m.writeCount()
	for i := 0; i < 10; i++ {
		if l := te.grantOnce(t, "db"); l.FencingToken <= last.FencingToken || l.FencingToken > 2*minTokenBlock {
			t.Fatalf("token %d after %d, ceiling %d", l.FencingToken, last.FencingToken, 2*minTokenBlock)
		}
	}
	if m.writeCount() != before {
		t.Fatalf("grants past the old ceiling wrote %d times; the block was reserved ahead", m.writeCount()-before)
	}
}

// TestPreReserveAndAConfigChange: a pool update that comes while the
// background write is on the disk waits for it, then records both the new
// configuration and the reservation: the store never goes back.
func TestPreReserveAndAConfigChange(t *testing.T) {
	m := newMemPersister()
	te := newPreReserveEngine(t, m)
	te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 10})
	type write struct {
		limit   int64
		ceiling uint64
	}
	var writes []write // in the order they reached the disk (under m's lock)
	gate, entered := make(chan struct{}), make(chan struct{}, 1)
	m.mu.Lock()
	m.fail = func(old, new SavedPool, deleting bool) error {
		if new.State.TokenCeiling > old.State.TokenCeiling && new.Config.ConcurrencyLimit == 10 {
			entered <- struct{}{}
			<-gate
		}
		writes = append(writes, write{new.Config.ConcurrencyLimit, new.State.TokenCeiling})
		return nil
	}
	m.mu.Unlock()
	for i := 0; i < minTokenBlock/2+1; i++ {
		te.grantOnce(t, "db")
	}
	<-entered // the background write is on the disk
	updated := make(chan error, 1)
	go func() {
		_, err := te.UpdatePool("db", func(c *PoolConfig) { c.ConcurrencyLimit = 20 })
		updated <- err
	}()
	// The update holds the pool's lock from before its write to after it,
	// and cannot write while the background write is stuck: once the lock
	// is taken, the update has decided what to write.
	waitPoolLocked(t, te, "db", "the update")
	close(gate)
	if err := <-updated; err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "the pool's write to be taken", func() bool { return !te.pendingWrite("db") })
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := 1; i < len(writes); i++ {
		if writes[i].ceiling < writes[i-1].ceiling {
			t.Fatalf("the ceiling on disk went back: %+v", writes)
		}
	}
	if last := writes[len(writes)-1]; last.limit != 20 || last.ceiling != 2*minTokenBlock {
		t.Fatalf("last write %+v; want limit 20, ceiling %d (writes %+v)", last, 2*minTokenBlock, writes)
	}
}

// TestPreReserveFailureFallsBackToTheGrant: when the background write
// fails, the grant that reaches the ceiling writes in the foreground and
// reports the error if that fails too; nothing is granted past what is
// on disk.
func TestPreReserveFailureFallsBackToTheGrant(t *testing.T) {
	m := newMemPersister()
	te := newPreReserveEngine(t, m)
	te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 10})
	m.mu.Lock()
	m.fail = func(old, new SavedPool, deleting bool) error {
		if new.State.TokenCeiling > old.State.TokenCeiling {
			return errDiskFull
		}
		return nil
	}
	m.mu.Unlock()
	for i := 0; i < minTokenBlock; i++ {
		te.grantOnce(t, "db")
		testwait.For(t, "the pool's write to be taken", func() bool { return !te.pendingWrite("db") })
	}
	_, err := te.Acquire(context.Background(), AcquireRequest{Pool: "db", Weight: 1, NoWait: true})
	if !errors.Is(err, apierr.ErrStorageFailed) {
		t.Fatalf("a grant past the ceiling with the disk failing: %v", err)
	}
	if c := m.snapshot()[0].State.TokenCeiling; c != minTokenBlock {
		t.Fatalf("ceiling on disk %d", c)
	}
}

// TestPreReserveRaisesHeldBound: a pool filling up finds its held-weight
// bound raised in the background before a grant needs it.
func TestPreReserveRaisesHeldBound(t *testing.T) {
	m := newMemPersister()
	te := newPreReserveEngine(t, m)
	te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 64})
	p := te.pools.get("db")
	for held := int64(1); held < 64; held++ {
		te.mustAcquire(t, AcquireRequest{Pool: "db", Weight: 1, TTL: time.Minute, NoWait: true})
		testwait.For(t, "the pool's write to be taken", func() bool { return !te.pendingWrite("db") })
		p.mu.Lock()
		b := p.dur.state.HeldBound
		p.mu.Unlock()
		if b <= held {
			t.Fatalf("held %d, bound %d: the next grant must write in the foreground", held, b)
		}
		if sp, _ := m.saved("db"); sp.State.HeldBound != b {
			t.Fatalf("bound %d in memory, %d written", b, sp.State.HeldBound)
		}
	}
}
