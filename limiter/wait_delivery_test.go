package limiter

import (
	"context"
	"testing"
	"time"

	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// TestWaitOutcomeDeliveredAfterUnlock: however a wait ends (a release
// grants it, its WaitTimeout passes, its owner cancels it, a take's tokens
// come, the engine closes), Notify's function runs once with the pool's
// lock released, so it may call the engine: here it releases the lease it
// was granted on the spot.
func TestWaitOutcomeDeliveredAfterUnlock(t *testing.T) {
	te := newTestEngine(t)
	te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 1, MaxWaiters: 10})
	te.mustCreate(t, PoolConfig{Name: "api", Rate: 1, Burst: 1})
	p := te.pools.get("db")
	type outcome struct {
		locked bool
		err    error
	}
	got := make(chan outcome, 10)
	notify := func(w *Wait[Lease]) {
		w.Notify(func(l Lease, err error) {
			locked := !p.mu.TryLock()
			if !locked {
				p.mu.Unlock()
			}
			if err == nil && !locked {
				_, err = te.Release("db", l.FencingToken) // calls the engine back
			}
			got <- outcome{locked, err}
		})
	}
	start := func(req AcquireRequest) *Wait[Lease] {
		t.Helper()
		req.Pool, req.Weight = "db", 1
		_, w, err := te.StartAcquire(req)
		if err != nil || w == nil {
			t.Fatalf("StartAcquire: %v, %v; want a wait", w, err)
		}
		return w
	}
	want := func(how string, wantErr *apierr.Error) {
		t.Helper()
		o := <-got
		if o.locked {
			t.Fatalf("%s: Notify's function ran with the pool locked", how)
		}
		if wantErr == nil && o.err != nil {
			t.Fatalf("%s: %v", how, o.err)
		}
		if wantErr != nil {
			wantReason(t, o.err, wantErr)
		}
	}
	held := te.mustAcquire(t, AcquireRequest{Pool: "db"})

	notify(start(AcquireRequest{}))
	if _, err := te.Release("db", held.FencingToken); err != nil {
		t.Fatal(err)
	}
	want("granted by a release", nil)

	held = te.mustAcquire(t, AcquireRequest{Pool: "db"})
	notify(start(AcquireRequest{WaitTimeout: time.Second}))
	te.clk.Advance(time.Second)
	want("timed out", apierr.ErrWaitTimeout)

	w := start(AcquireRequest{})
	notify(w)
	w.Cancel(context.Canceled)
	want("cancelled", apierr.ErrCanceled)

	if _, err := te.Take(context.Background(), "api", 1, 0); err != nil {
		t.Fatal(err)
	}
	_, tw, err := te.StartTake("api", 1, time.Minute)
	if err != nil || tw == nil {
		t.Fatalf("StartTake: %v, %v; want a wait", tw, err)
	}
	tp := te.pools.get("api")
	took := make(chan bool, 1)
	tw.Notify(func(TakeResult, error) {
		locked := !tp.mu.TryLock()
		if !locked {
			tp.mu.Unlock()
		}
		took <- locked
	})
	te.clk.Advance(time.Second)
	if <-took {
		t.Fatal("a take's Notify function ran with the pool locked")
	}

	notify(start(AcquireRequest{}))
	te.Close()
	want("failed by Close", apierr.ErrShuttingDown)
	if len(got) != 0 {
		t.Fatalf("%d more outcomes; want each once", len(got))
	}
}

// The waits that one release grants are told in the order they were
// granted, as the queue orders them.
func TestWaitsDeliveredInGrantOrder(t *testing.T) {
	te := newTestEngine(t)
	te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 12, MaxWaiters: 20})
	held := te.mustAcquire(t, AcquireRequest{Pool: "db", Weight: 12})
	var order []int32
	for i := range 10 {
		_, w, err := te.StartAcquire(AcquireRequest{Pool: "db", Weight: 1, Priority: int32(i % 3)})
		if err != nil || w == nil {
			t.Fatalf("StartAcquire: %v, %v; want a wait", w, err)
		}
		w.Notify(func(l Lease, err error) {
			if err != nil {
				t.Errorf("wait %d: %v", i, err)
			}
			order = append(order, l.Priority)
		})
	}
	if _, err := te.Release("db", held.FencingToken); err != nil {
		t.Fatal(err)
	}
	want := []int32{2, 2, 2, 1, 1, 1, 0, 0, 0, 0}
	if len(order) != len(want) {
		t.Fatalf("told %v; want %v", order, want)
	}
	for i := range want {
		if order[i] != want[i] {
			t.Fatalf("told %v; want %v", order, want)
		}
	}
}
