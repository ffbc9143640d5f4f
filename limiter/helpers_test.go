package limiter

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/testwait"
	"github.com/tollgate/tollgate/limiter/fakeclock"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// testEngine is an Engine on a fake clock that records ended leases.
type testEngine struct {
	*Engine
	clk *fakeclock.Clock

	mu    sync.Mutex
	ended []LeaseEnded
}

func newTestEngine(t testing.TB) *testEngine {
	t.Helper()
	te := &testEngine{clk: fakeclock.New(epoch)}
	te.Engine = New(Options{Clock: te.clk, OnLeaseEnded: func(le LeaseEnded) {
		te.mu.Lock()
		te.ended = append(te.ended, le)
		te.mu.Unlock()
	}})
	t.Cleanup(te.Close)
	return te
}

func (te *testEngine) endedLeases() []LeaseEnded {
	te.mu.Lock()
	defer te.mu.Unlock()
	return append([]LeaseEnded(nil), te.ended...)
}

func (te *testEngine) mustCreate(t testing.TB, cfg PoolConfig) PoolInfo {
	t.Helper()
	info, err := te.CreatePool(cfg)
	if err != nil {
		t.Fatalf("CreatePool(%+v): %v", cfg, err)
	}
	return info
}

func (te *testEngine) mustAcquire(t testing.TB, req AcquireRequest) Lease {
	t.Helper()
	req.NoWait = true
	if req.Weight == 0 {
		req.Weight = 1
	}
	l, err := te.Acquire(context.Background(), req)
	if err != nil {
		t.Fatalf("Acquire(%+v): %v", req, err)
	}
	return l
}

func (te *testEngine) status(t testing.TB, pool string) PoolStatus {
	t.Helper()
	info, err := te.GetPool(pool)
	if err != nil {
		t.Fatalf("GetPool(%q): %v", pool, err)
	}
	return info.Status
}

// pending is an Acquire running in its own goroutine.
type pending struct {
	cancel context.CancelFunc
	done   chan struct{}
	lease  Lease
	err    error
}

// startAcquire starts a waiting Acquire and returns once it is queued (or
// has already finished).
func (te *testEngine) startAcquire(t testing.TB, req AcquireRequest) *pending {
	t.Helper()
	if req.Weight == 0 {
		req.Weight = 1
	}
	before := te.status(t, req.Pool).Waiting
	ctx, cancel := context.WithCancel(context.Background())
	pa := &pending{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(pa.done)
		pa.lease, pa.err = te.Acquire(ctx, req)
	}()
	testwait.For(t, "the acquire to join the queue or end", func() bool {
		select {
		case <-pa.done:
			return true
		default:
			return te.status(t, req.Pool).Waiting > before
		}
	})
	return pa
}

// result waits for the acquire to finish.
func (pa *pending) result(t testing.TB) (Lease, error) {
	t.Helper()
	select {
	case <-pa.done:
		return pa.lease, pa.err
	case <-time.After(10 * time.Second):
		t.Fatal("acquire did not finish")
		return Lease{}, nil
	}
}

// finished reports whether the acquire has returned.
func (pa *pending) finished() bool {
	select {
	case <-pa.done:
		return true
	default:
		return false
	}
}

func wantReason(t testing.TB, err error, kind *apierr.Error) {
	t.Helper()
	if !errors.Is(err, kind) {
		t.Fatalf("error = %v; want reason %s", err, kind.Reason)
	}
	var e *apierr.Error
	if !errors.As(err, &e) || e.Code != kind.Code || e.Message == "" {
		t.Fatalf("error = %#v; want code %d with a message", err, kind.Code)
	}
}

// errOf returns the error of a call that also returns a value, such as
// Release.
func errOf[T any](_ T, err error) error { return err }

// waitPoolLocked waits until the pool's lock is held, by who (a call the
// test started, which holds it while it is stuck).
func waitPoolLocked(t testing.TB, te *testEngine, pool, who string) {
	t.Helper()
	p := te.pools.get(pool)
	testwait.For(t, who+" to hold pool "+pool+"'s lock", func() bool {
		if p.mu.TryLock() {
			p.mu.Unlock()
			return false
		}
		return true
	})
}

// fakeTimers is a timerHost that counts the timers that went off.
type fakeTimers struct{ adaptive, shares, shareRecovery, marks int }

func (f *fakeTimers) adaptiveFired()      { f.adaptive++ }
func (f *fakeTimers) sharesFired()        { f.shares++ }
func (f *fakeTimers) shareRecoveryFired() { f.shareRecovery++ }
func (f *fakeTimers) marksFired()         { f.marks++ }
