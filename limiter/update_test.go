package limiter

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

func TestRaisingLimitAdmitsWaitersAtOnce(t *testing.T) {
	te := newTestEngine(t)
	te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 1})
	te.mustAcquire(t, AcquireRequest{Pool: "db"})
	w1 := te.startAcquire(t, AcquireRequest{Pool: "db"})
	w2 := te.startAcquire(t, AcquireRequest{Pool: "db"})
	info, err := te.UpdatePool("db", func(c *PoolConfig) { c.ConcurrencyLimit = 3 })
	if err != nil || info.Config.ConcurrencyLimit != 3 || info.Status.Held != 3 {
		t.Fatalf("update = %+v, %v", info, err)
	}
	for _, w := range []*pending{w1, w2} {
		if _, err := w.result(t); err != nil {
			t.Fatal(err)
		}
	}
}

func TestLoweringLimitBlocksUntilHeldIsUnder(t *testing.T) {
	te := newTestEngine(t)
	te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 4})
	var ls []Lease
	for i := 0; i < 4; i++ {
		ls = append(ls, te.mustAcquire(t, AcquireRequest{Pool: "db"}))
	}
	if _, err := te.UpdatePool("db", func(c *PoolConfig) { c.ConcurrencyLimit = 2 }); err != nil {
		t.Fatal(err)
	}
	w := te.startAcquire(t, AcquireRequest{Pool: "db"})
	// Held leases continue; releases bring held to 3, then 2: still no room.
	for i := 0; i < 2; i++ {
		if _, err := te.Release("db", ls[i].FencingToken); err != nil {
			t.Fatal(err)
		}
		if w.finished() {
			t.Fatalf("granted with held %d over the new limit 2", te.status(t, "db").Held)
		}
	}
	if _, err := te.Release("db", ls[2].FencingToken); err != nil {
		t.Fatal(err)
	}
	if _, err := w.result(t); err != nil {
		t.Fatal(err)
	}
	if s := te.status(t, "db"); s.Held != 2 {
		t.Fatalf("held = %d", s.Held)
	}
}

func TestLoweringLimitBelowWaiterWeightFailsIt(t *testing.T) {
	te := newTestEngine(t)
	te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 4})
	te.mustAcquire(t, AcquireRequest{Pool: "db", Weight: 2})
	big := te.startAcquire(t, AcquireRequest{Pool: "db", Weight: 3})
	small := te.startAcquire(t, AcquireRequest{Pool: "db", Weight: 1})
	if _, err := te.UpdatePool("db", func(c *PoolConfig) { c.ConcurrencyLimit = 2 }); err != nil {
		t.Fatal(err)
	}
	_, err := big.result(t)
	wantReason(t, err, apierr.ErrLimitBelowWeight)
	if small.finished() {
		t.Fatal("small granted while held 2 = limit 2")
	}
	small.cancel()
	_, _ = small.result(t)
}

func TestUpdateValidatesAndKeepsName(t *testing.T) {
	te := newTestEngine(t)
	te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 1})
	_, err := te.UpdatePool("db", func(c *PoolConfig) { c.ConcurrencyLimit = 0 })
	wantReason(t, err, apierr.ErrInvalidArgument)
	_, err = te.UpdatePool("db", func(c *PoolConfig) { c.Name = "other" })
	wantReason(t, err, apierr.ErrInvalidArgument)
	_, err = te.UpdatePool("nope", func(c *PoolConfig) {})
	wantReason(t, err, apierr.ErrPoolNotFound)
	te.clk.Advance(time.Minute)
	info, err := te.UpdatePool("db", func(c *PoolConfig) { c.Description = "orders" })
	if err != nil || info.Config.ConcurrencyLimit != 1 || !info.UpdateTime.Equal(epoch.Add(time.Minute)) || !info.CreateTime.Equal(epoch) {
		t.Fatalf("update = %+v, %v", info, err)
	}
}

func TestLoweringMaxTTLCapsWaitersGrant(t *testing.T) {
	te := newTestEngine(t)
	te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 1})
	h := te.mustAcquire(t, AcquireRequest{Pool: "db"})
	w := te.startAcquire(t, AcquireRequest{Pool: "db", TTL: 4 * time.Minute})
	if _, err := te.UpdatePool("db", func(c *PoolConfig) { c.MaxLeaseTTL = time.Minute; c.DefaultLeaseTTL = 0 }); err != nil {
		t.Fatal(err)
	}
	_, _ = te.Release("db", h.FencingToken)
	l, err := w.result(t)
	if err != nil || l.TTL != time.Minute {
		t.Fatalf("lease = %+v, %v", l, err)
	}
}
