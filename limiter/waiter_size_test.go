package limiter

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/testwait"
)

// TestWaiterIsSmall: a queued acquire with a notified wait is a small
// record (about 200 bytes, 40 of them its links in the rank treaps of
// QueuePositions; it embedded a whole Lease and took 400), not a lease:
// the memory per waiter in docs/benchmarks.md depends on it.
func TestWaiterIsSmall(t *testing.T) {
	te := newTestEngine(t)
	te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 1, MaxWaiters: 10_000})
	te.mustAcquire(t, AcquireRequest{Pool: "db"})
	const n = 4096
	waits := make([]*Wait[Lease], 0, n)
	then := func(Lease, error) {}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range n {
		_, w, err := te.StartAcquire(AcquireRequest{Pool: "db", Weight: 1, ClientID: "c"})
		if err != nil || w == nil {
			t.Fatalf("StartAcquire: %v, %v; want a wait", w, err)
		}
		w.Notify(then)
		waits = append(waits, w)
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / n; per > 256 {
		t.Fatalf("a queued acquire allocates %d bytes; want at most 256", per)
	}
	runtime.KeepAlive(waits)
}

// TestWaitedGrantCarriesRequest: a lease granted after a wait, learned by
// Await or by Notify, carries what the request asked for, as one granted
// at once does.
func TestWaitedGrantCarriesRequest(t *testing.T) {
	te := newTestEngine(t)
	te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 1})
	req := AcquireRequest{Pool: "db", Weight: 1, TTL: 7 * time.Second, Priority: 3, ClientID: "cid", Description: "desc", Owner: "owner", WaitTimeout: time.Hour}
	want := func(how string, l Lease) {
		t.Helper()
		if l.Pool != "db" || l.Weight != 1 || l.TTL != 7*time.Second || l.Priority != 3 || l.ClientID != "cid" || l.Description != "desc" ||
			!l.AcquireTime.Equal(te.clk.Now()) || !l.ExpireTime.Equal(te.clk.Now().Add(7*time.Second)) || l.FencingToken == 0 {
			t.Fatalf("%s: lease %+v; want the request's fields", how, l)
		}
	}
	now, _, err := te.StartAcquire(req)
	if err != nil {
		t.Fatal(err)
	}
	want("granted at once", now)
	_, awaited, err := te.StartAcquire(req)
	if err != nil || awaited == nil {
		t.Fatalf("StartAcquire: %v, %v; want a wait", awaited, err)
	}
	_, notified, err := te.StartAcquire(req)
	if err != nil || notified == nil {
		t.Fatalf("StartAcquire: %v, %v; want a wait", notified, err)
	}
	var got Lease
	notified.Notify(func(l Lease, err error) {
		if err != nil {
			t.Errorf("notified: %v", err)
		}
		got = l
	})
	te.clk.Advance(time.Second)
	if _, err := te.Release("db", now.FencingToken); err != nil {
		t.Fatal(err)
	}
	l, err := awaited.Await(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want("awaited", l)
	te.clk.Advance(time.Second)
	if _, err := te.Release("db", l.FencingToken); err != nil {
		t.Fatal(err)
	}
	want("notified", got)
	te.clk.Advance(8 * time.Second)
	testwait.For(t, "one lease-ended event", func() bool { return len(te.endedLeases()) == 1 })
	if ended := te.endedLeases(); ended[0].Owner != "owner" {
		t.Fatalf("ended %+v; want the notified lease's end, with its owner", ended)
	}
}
