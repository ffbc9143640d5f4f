package limiter

import (
	"context"
	"testing"
	"time"

	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

func TestWaitersGrantedByPriorityThenFIFO(t *testing.T) {
	te := newTestEngine(t)
	te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 1})
	holder := te.mustAcquire(t, AcquireRequest{Pool: "db"})
	low1 := te.startAcquire(t, AcquireRequest{Pool: "db", Priority: 0, Description: "low1"})
	high := te.startAcquire(t, AcquireRequest{Pool: "db", Priority: 5, Description: "high"})
	low2 := te.startAcquire(t, AcquireRequest{Pool: "db", Priority: 0, Description: "low2"})
	mid := te.startAcquire(t, AcquireRequest{Pool: "db", Priority: 1, Description: "mid"})

	prev := holder
	for _, want := range []*pending{high, mid, low1, low2} {
		if _, err := te.Release("db", prev.FencingToken); err != nil {
			t.Fatal(err)
		}
		l, err := want.result(t)
		if err != nil {
			t.Fatal(err)
		}
		for _, other := range []*pending{high, mid, low1, low2} {
			if other != want && other.finished() && other.lease.FencingToken > l.FencingToken {
				t.Fatalf("%s granted before %s", other.lease.Description, l.Description)
			}
		}
		if s := te.status(t, "db"); s.Held != 1 {
			t.Fatalf("held = %d after handing over to %s", s.Held, l.Description)
		}
		prev = l
	}
}

func TestLargeHeadIsNotStarvedBySmallRequests(t *testing.T) {
	te := newTestEngine(t)
	te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 4})
	a := te.mustAcquire(t, AcquireRequest{Pool: "db", Weight: 2})
	b := te.mustAcquire(t, AcquireRequest{Pool: "db", Weight: 2})
	big := te.startAcquire(t, AcquireRequest{Pool: "db", Weight: 4})
	// Capacity frees up bit by bit; a small request behind the big one must
	// not take it, even though it would fit.
	if _, err := te.Release("db", a.FencingToken); err != nil {
		t.Fatal(err)
	}
	small := te.startAcquire(t, AcquireRequest{Pool: "db", Weight: 1})
	_, err := te.Acquire(context.Background(), AcquireRequest{Pool: "db", Weight: 1, NoWait: true})
	wantReason(t, err, apierr.ErrNoCapacity)
	if small.finished() || big.finished() {
		t.Fatal("a request was granted ahead of the big head")
	}
	if _, err := te.Release("db", b.FencingToken); err != nil {
		t.Fatal(err)
	}
	bl, err := big.result(t)
	if err != nil || bl.Weight != 4 {
		t.Fatalf("big = %+v, %v", bl, err)
	}
	if small.finished() {
		t.Fatal("small granted while big holds everything")
	}
	if _, err := te.Release("db", bl.FencingToken); err != nil {
		t.Fatal(err)
	}
	if _, err := small.result(t); err != nil {
		t.Fatal(err)
	}
}

func TestHigherPriorityPassesBlockedHeadWhenItFits(t *testing.T) {
	te := newTestEngine(t)
	te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 3})
	te.mustAcquire(t, AcquireRequest{Pool: "db", Weight: 2})
	big := te.startAcquire(t, AcquireRequest{Pool: "db", Weight: 3})
	// Priority is strict: a higher-priority request goes first when it fits.
	l, err := te.Acquire(context.Background(), AcquireRequest{Pool: "db", Weight: 1, Priority: 1, NoWait: true})
	if err != nil || l.Weight != 1 {
		t.Fatalf("high priority try = %+v, %v", l, err)
	}
	// Equal priority never passes the head.
	_, err = te.Acquire(context.Background(), AcquireRequest{Pool: "db", Weight: 1, NoWait: true})
	wantReason(t, err, apierr.ErrNoCapacity)
	big.cancel()
	_, err = big.result(t)
	wantReason(t, err, apierr.ErrCanceled)
}

func TestWaitTimeoutByEngineClock(t *testing.T) {
	te := newTestEngine(t)
	te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 1})
	te.mustAcquire(t, AcquireRequest{Pool: "db", TTL: time.Minute, Description: "holder"})
	w := te.startAcquire(t, AcquireRequest{Pool: "db", WaitTimeout: 2 * time.Second})
	te.clk.Advance(1999 * time.Millisecond)
	if w.finished() {
		t.Fatal("wait ended before its timeout")
	}
	te.clk.Advance(time.Millisecond)
	_, err := w.result(t)
	wantReason(t, err, apierr.ErrWaitTimeout)
	if s := te.status(t, "db"); s.Waiting != 0 || s.WaitTimeouts != 1 || s.Held != 1 {
		t.Fatalf("status = %+v", s)
	}
}

func TestCancelledWaiterNeverConsumesAPermit(t *testing.T) {
	te := newTestEngine(t)
	te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 1})
	holder := te.mustAcquire(t, AcquireRequest{Pool: "db"})
	w1 := te.startAcquire(t, AcquireRequest{Pool: "db"})
	w2 := te.startAcquire(t, AcquireRequest{Pool: "db"})
	w1.cancel()
	_, err := w1.result(t)
	wantReason(t, err, apierr.ErrCanceled)
	if _, err := te.Release("db", holder.FencingToken); err != nil {
		t.Fatal(err)
	}
	l2, err := w2.result(t)
	if err != nil {
		t.Fatalf("second waiter: %v", err)
	}
	if s := te.status(t, "db"); s.Held != 1 || s.Waiting != 0 || s.Canceled != 1 {
		t.Fatalf("status = %+v", s)
	}
	_, _ = te.Release("db", l2.FencingToken)
}

// A grant that races with the caller going away is undone: the permit is
// back in the pool, not held by a lease nobody knows about.
func TestGrantRacingCancellationIsUndone(t *testing.T) {
	te := newTestEngine(t)
	te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 1})
	for i := 0; i < 200; i++ {
		holder := te.mustAcquire(t, AcquireRequest{Pool: "db"})
		w := te.startAcquire(t, AcquireRequest{Pool: "db"})
		go w.cancel()
		if _, err := te.Release("db", holder.FencingToken); err != nil {
			t.Fatal(err)
		}
		l, err := w.result(t)
		s := te.status(t, "db")
		if err == nil {
			if s.Held != 1 {
				t.Fatalf("granted but held = %d", s.Held)
			}
			if _, err := te.Release("db", l.FencingToken); err != nil {
				t.Fatal(err)
			}
		} else if s.Held != 0 {
			t.Fatalf("iteration %d: cancelled waiter left held = %d (%v)", i, s.Held, err)
		}
	}
}

func TestDeadlineExceededIsAWaitTimeout(t *testing.T) {
	te := newTestEngine(t)
	te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 1})
	te.mustAcquire(t, AcquireRequest{Pool: "db"})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err := te.Acquire(ctx, AcquireRequest{Pool: "db", Weight: 1})
	wantReason(t, err, apierr.ErrWaitTimeout)
	if s := te.status(t, "db"); s.Waiting != 0 || s.WaitTimeouts != 1 {
		t.Fatalf("status = %+v", s)
	}
}

func TestQueueBound(t *testing.T) {
	te := newTestEngine(t)
	te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 1, MaxWaiters: 2})
	te.mustAcquire(t, AcquireRequest{Pool: "db"})
	w1 := te.startAcquire(t, AcquireRequest{Pool: "db"})
	w2 := te.startAcquire(t, AcquireRequest{Pool: "db"})
	_, err := te.Acquire(context.Background(), AcquireRequest{Pool: "db", Weight: 1})
	wantReason(t, err, apierr.ErrQueueFull)
	w1.cancel()
	w2.cancel()
	_, _ = w1.result(t)
	_, _ = w2.result(t)
	if s := te.status(t, "db"); s.Waiting != 0 || s.Rejected != 1 {
		t.Fatalf("status = %+v", s)
	}
}
