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

// Once Options.Live says false the engine is frozen: a lease that falls
// due does not expire, capacity freed by a waiter that gives up is not
// granted to the next, a wait timeout does not fire, nothing is reported
// to the callbacks, and calls fail apierr.ErrNotLeader.
func TestLiveFreezesTheEngine(t *testing.T) {
	clk := fakeclock.New(epoch)
	var live atomic.Bool
	live.Store(true)
	var mu sync.Mutex
	var reported []string
	note := func(what string) {
		mu.Lock()
		reported = append(reported, what)
		mu.Unlock()
	}
	e := New(Options{Clock: clk, Live: live.Load, OnLeaseEnded: func(le LeaseEnded) { note("ended " + le.Reason.String()) },
		OnPoolEvent: func(ev PoolEvent) { note("event " + ev.Type.String()) }, MarkEventInterval: -1})
	t.Cleanup(e.Close)
	if _, err := e.CreatePool(PoolConfig{Name: "db", ConcurrencyLimit: 2}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.StartAcquire(AcquireRequest{Pool: "db", Weight: 1, TTL: time.Second}); err != nil {
		t.Fatal(err)
	}
	_, first, err := e.StartAcquire(AcquireRequest{Pool: "db", Weight: 2, TTL: time.Second}) // at the head, blocking the next
	if err != nil || first == nil {
		t.Fatalf("the second acquire did not wait: %v", err)
	}
	_, second, err := e.StartAcquire(AcquireRequest{Pool: "db", Weight: 1, TTL: time.Second, WaitTimeout: 30 * time.Second})
	if err != nil || second == nil {
		t.Fatalf("the third acquire did not wait: %v", err)
	}
	answered := make(chan error, 1)
	second.Notify(func(_ Lease, err error) { answered <- err })
	mu.Lock()
	reported = nil
	mu.Unlock()

	live.Store(false)
	first.Cancel(errors.New("the caller left")) // the next waiter fits now
	clk.Advance(time.Minute)                    // the lease falls due, and the wait timeout passes
	select {
	case err := <-answered:
		t.Fatalf("the frozen engine answered a waiter: %v", err)
	default:
	}
	mu.Lock()
	got := reported
	mu.Unlock()
	if len(got) != 0 {
		t.Fatalf("the frozen engine reported %v", got)
	}
	if _, err := e.Acquire(t.Context(), AcquireRequest{Pool: "db", Weight: 1, NoWait: true}); !errors.Is(err, apierr.ErrNotLeader) {
		t.Fatalf("an acquire on the frozen engine: %v, want apierr.ErrNotLeader", err)
	}
	if _, err := e.Take(t.Context(), "db", 1, 0); !errors.Is(err, apierr.ErrNotLeader) {
		t.Fatalf("a take on the frozen engine: %v, want apierr.ErrNotLeader", err)
	}
}
