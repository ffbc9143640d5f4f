package limiter

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter/fakeclock"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// resizeEngine is a testEngine that also records OnLeaseResized pushes.
type resizeEngine struct {
	*testEngine
	rmu     sync.Mutex
	resized []LeaseResized
}

func newResizeEngine(t *testing.T) *resizeEngine {
	re := &resizeEngine{testEngine: &testEngine{clk: fakeclock.New(epoch)}}
	re.Engine = New(Options{Clock: re.clk, OnLeaseResized: func(r LeaseResized) {
		re.rmu.Lock()
		re.resized = append(re.resized, r)
		re.rmu.Unlock()
	}})
	t.Cleanup(re.Close)
	return re
}

// last returns the newest push about token, if any.
func (re *resizeEngine) last(token uint64) (Lease, bool) {
	re.rmu.Lock()
	defer re.rmu.Unlock()
	for i := len(re.resized) - 1; i >= 0; i-- {
		if re.resized[i].Lease.FencingToken == token {
			return re.resized[i].Lease, true
		}
	}
	return Lease{}, false
}

func (re *resizeEngine) resize(t *testing.T, r LeaseResize) Lease {
	t.Helper()
	l, err := re.ResizeLease(r)
	if err != nil {
		t.Fatalf("ResizeLease(%+v): %v", r, err)
	}
	return l
}

func TestResizeLeaseShrinkServesWaiter(t *testing.T) {
	te := newTestEngine(t)
	te.mustCreate(t, PoolConfig{Name: "p", ConcurrencyLimit: 4})
	a := te.mustAcquire(t, AcquireRequest{Pool: "p", Weight: 4})
	w := te.startAcquire(t, AcquireRequest{Pool: "p", Weight: 2})
	l, err := te.ResizeLease(LeaseResize{Pool: "p", Token: a.FencingToken, Weight: 2})
	if err != nil || l.Weight != 2 {
		t.Fatalf("shrink: %+v, %v", l, err)
	}
	if got, err := w.result(t); err != nil || got.Weight != 2 {
		t.Fatalf("the waiter was not served by the shrink: %+v, %v", got, err)
	}
	if s := te.status(t, "p"); s.Held != 4 || s.Waiting != 0 {
		t.Fatalf("status after the shrink: %+v", s)
	}
}

func TestResizeLeaseGrowsOnlyWhenItFitsAndNoWaiterIsAhead(t *testing.T) {
	te := newTestEngine(t)
	te.mustCreate(t, PoolConfig{Name: "p", ConcurrencyLimit: 4, MaxWaiters: 4})
	a := te.mustAcquire(t, AcquireRequest{Pool: "p", Weight: 1})
	b := te.mustAcquire(t, AcquireRequest{Pool: "p", Weight: 2})
	if _, err := te.ResizeLease(LeaseResize{Pool: "p", Token: a.FencingToken, Weight: 3}); !errors.Is(err, apierr.ErrNoCapacity) {
		t.Fatalf("grow past the limit: %v, want apierr.ErrNoCapacity", err)
	}
	if l := func() Lease {
		l, _ := te.ResizeLease(LeaseResize{Pool: "p", Token: a.FencingToken, Weight: 2})
		return l
	}(); l.Weight != 2 {
		t.Fatalf("grow that fits: %+v", l)
	}
	te.resizeTo(t, a.FencingToken, 1)
	w := te.startAcquire(t, AcquireRequest{Pool: "p", Weight: 3}) // needs 3, 1 is free: waits at the head
	if _, err := te.ResizeLease(LeaseResize{Pool: "p", Token: a.FencingToken, Weight: 2}); !errors.Is(err, apierr.ErrNoCapacity) {
		t.Fatalf("grow past a waiting acquire: %v, want apierr.ErrNoCapacity (head of line)", err)
	}
	if _, err := te.Release("p", b.FencingToken); err != nil {
		t.Fatal(err)
	}
	if got, err := w.result(t); err != nil || got.Weight != 3 {
		t.Fatalf("waiter: %+v, %v", got, err)
	}
	if l, err := te.ResizeLease(LeaseResize{Pool: "p", Token: a.FencingToken, Want: 50}); err != nil || l.Share.Want != 4 {
		t.Fatalf("a want above the limit: %+v, %v; want it counted as the limit", l, err)
	}
	if _, err := te.ResizeLease(LeaseResize{Pool: "p", Token: 999}); !errors.Is(err, apierr.ErrLeaseNotFound) {
		t.Fatalf("resize of a lease never issued: %v", err)
	}
	te.clk.Advance(time.Minute) // a expires
	if _, err := te.ResizeLease(LeaseResize{Pool: "p", Token: a.FencingToken, Weight: 1}); !errors.Is(err, apierr.ErrLeaseExpired) {
		t.Fatalf("resize of an expired lease: %v", err)
	}
}

func (te *testEngine) resizeTo(t *testing.T, token uint64, w int64) {
	t.Helper()
	if l, err := te.ResizeLease(LeaseResize{Pool: "p", Token: token, Weight: w}); err != nil || l.Weight != w {
		t.Fatalf("resize to %d: %+v, %v", w, l, err)
	}
}

func TestResizeLeaseRefusesBadRequests(t *testing.T) {
	te := newTestEngine(t)
	te.mustCreate(t, PoolConfig{Name: "p", ConcurrencyLimit: 4})
	te.mustCreate(t, PoolConfig{Name: "r", Rate: 10, Burst: 5})
	a := te.mustAcquire(t, AcquireRequest{Pool: "p"})
	r := te.mustAcquire(t, AcquireRequest{Pool: "r"})
	te.mustCreate(t, PoolConfig{Name: "both", ConcurrencyLimit: 4, Rate: 10, Burst: 5})
	both := te.mustAcquire(t, AcquireRequest{Pool: "both"})
	for _, req := range []LeaseResize{
		{Pool: "p", Token: a.FencingToken, Weight: -1},
		{Pool: "r", Token: r.FencingToken, Want: 1},
		{Pool: "both", Token: both.FencingToken, Want: 1},
	} {
		if _, err := te.ResizeLease(req); !errors.Is(err, apierr.ErrInvalidArgument) {
			t.Errorf("ResizeLease(%+v): %v, want apierr.ErrInvalidArgument", req, err)
		}
	}
}

// TestConcSharesFairShares: a share alone grows to what it wants; an
// acquire that waits makes it give back; two shares wanting more than half
// get half each; one wanting little leaves the rest to the other.
func TestConcSharesFairShares(t *testing.T) {
	re := newResizeEngine(t)
	re.mustCreate(t, PoolConfig{Name: "p", ConcurrencyLimit: 10})
	a := re.mustAcquire(t, AcquireRequest{Pool: "p"})
	if l := re.resize(t, LeaseResize{Pool: "p", Token: a.FencingToken, Want: 10}); l.Weight != 10 || l.Share == nil || l.Share.Target != 10 {
		t.Fatalf("a share alone: %+v %+v, want weight and target 10", l, l.Share)
	}
	w := re.startAcquire(t, AcquireRequest{Pool: "p"}) // b's share starts as an ordinary acquire
	if l, ok := re.last(a.FencingToken); !ok || l.Share.Target != 9 || l.Weight != 10 {
		t.Fatalf("a was not asked to give one back for the waiter: %+v %v", l, ok)
	}
	re.resize(t, LeaseResize{Pool: "p", Token: a.FencingToken, Weight: 9})
	b, err := w.result(t)
	if err != nil {
		t.Fatal(err)
	}
	lb := re.resize(t, LeaseResize{Pool: "p", Token: b.FencingToken, Want: 10})
	if lb.Weight != 1 || lb.Share.Target != 5 {
		t.Fatalf("b wanting 10 beside a: %+v %+v, want weight 1 (nothing free) and target 5", lb, lb.Share)
	}
	la, _ := re.last(a.FencingToken)
	if la.Share.Target != 5 {
		t.Fatalf("a's target beside b: %+v, want 5", la.Share)
	}
	re.resize(t, LeaseResize{Pool: "p", Token: a.FencingToken, Weight: 5}) // a's tasks ended
	if l, _ := re.last(b.FencingToken); l.Weight != 5 || l.Share.Target != 5 {
		t.Fatalf("b did not grow into what a gave back: %+v %+v", l, l.Share)
	}
	lb = re.resize(t, LeaseResize{Pool: "p", Token: b.FencingToken, Want: 2, Weight: 2})
	if lb.Weight != 2 || lb.Share.Target != 2 {
		t.Fatalf("b wanting 2: %+v %+v", lb, lb.Share)
	}
	if l, _ := re.last(a.FencingToken); l.Weight != 8 || l.Share.Target != 8 {
		t.Fatalf("a did not get what b left: %+v %+v, want 8", l, l.Share)
	}
	// Versions only grow, so a holder can order answers and pushes.
	if l, _ := re.last(a.FencingToken); l.Share.Version <= la.Share.Version {
		t.Fatalf("version did not grow: %d then %d", la.Share.Version, l.Share.Version)
	}
	// b's lease ends: a grows into it.
	re.clk.Advance(time.Duration(0))
	if _, err := re.Release("p", b.FencingToken); err != nil {
		t.Fatal(err)
	}
	if l, _ := re.last(a.FencingToken); l.Weight != 10 {
		t.Fatalf("a after b released: %+v, want 10", l)
	}
	if s := re.status(t, "p"); s.Held != 10 {
		t.Fatalf("held %d", s.Held)
	}
}

// TestConcShareExpiresLikeALease: a share not renewed expires and the
// other share grows into its permits.
func TestConcShareExpiresLikeALease(t *testing.T) {
	re := newResizeEngine(t)
	re.mustCreate(t, PoolConfig{Name: "p", ConcurrencyLimit: 6})
	a := re.mustAcquire(t, AcquireRequest{Pool: "p", TTL: 10 * time.Second})
	b := re.mustAcquire(t, AcquireRequest{Pool: "p", TTL: 3 * time.Second})
	re.resize(t, LeaseResize{Pool: "p", Token: a.FencingToken, Want: 6})
	if l := re.resize(t, LeaseResize{Pool: "p", Token: b.FencingToken, Want: 6}); l.Weight != 1 || l.Share.Target != 3 {
		t.Fatalf("b: %+v %+v", l, l.Share)
	}
	re.clk.Advance(4 * time.Second) // b expires
	if l, _ := re.last(a.FencingToken); l.Weight != 6 || l.Share.Target != 6 {
		t.Fatalf("a after b expired: %+v %+v, want 6", l, l.Share)
	}
	l, err := re.Renew("p", a.FencingToken, 0, nil)
	if err != nil || l.Share == nil || l.Weight != 6 {
		t.Fatalf("renew of a share: %+v, %v", l, err)
	}
}

// checkConcSharesLocked: every share is a live lease, with a target of at
// least 1 and at most its want, and its holder has heard its weight and
// target (the push or the answer was made).
func (p *pool) checkConcSharesLocked() error {
	if p.csh == nil {
		return nil
	}
	for tok, cs := range p.csh.byToken {
		l := p.leases[tok]
		if l == nil {
			return fmt.Errorf("concurrency share %d has no live lease", tok)
		}
		if cs.fair.target < 1 || (cs.fair.target > cs.fair.want && cs.fair.want >= 1) {
			return fmt.Errorf("concurrency share %d: target %d, want %d", tok, cs.fair.target, cs.fair.want)
		}
		if cs.pushed != [2]int64{l.Weight, cs.fair.target} {
			return fmt.Errorf("concurrency share %d: weight %d target %d, but its holder last heard %v", tok, l.Weight, cs.fair.target, cs.pushed)
		}
	}
	return nil
}

// TestConcSharesRandomized drives concurrency shares, ordinary acquires
// (some waiting), releases, expiries and limit changes in random order and
// checks the pool's invariants after every step: the held weight never
// exceeds the effective limit because of a share's growth, a share never
// grows past a waiting acquire, and every holder heard its share's changes.
func TestConcSharesRandomized(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		re := newResizeEngine(t)
		rng := rand.New(rand.NewPCG(seed, 99))
		re.mustCreate(t, PoolConfig{Name: "p", ConcurrencyLimit: 8, MaxWaiters: 50})
		var held []uint64
		var waiting []*pending
		prev := map[string]int64{}
		for step := 0; step < 2000; step++ {
			switch op := rng.IntN(10); {
			case op < 2:
				if l, err := re.Acquire(context.Background(), AcquireRequest{Pool: "p", Weight: 1 + rng.Int64N(2), NoWait: true, TTL: time.Duration(1+rng.IntN(5)) * time.Second}); err == nil {
					held = append(held, l.FencingToken)
				}
			case op < 3:
				waiting = append(waiting, re.startAcquire(t, AcquireRequest{Pool: "p", Weight: 1 + rng.Int64N(3), TTL: time.Duration(1+rng.IntN(5)) * time.Second}))
			case op < 7 && len(held) > 0: // a share's holder: wants more or less, gives back some
				tok := held[rng.IntN(len(held))]
				_, _ = re.ResizeLease(LeaseResize{Pool: "p", Token: tok, Want: rng.Int64N(9), Weight: rng.Int64N(4)})
			case op < 8 && len(held) > 0:
				i := rng.IntN(len(held))
				_, _ = re.Release("p", held[i])
				held = append(held[:i], held[i+1:]...)
			case op < 9:
				re.clk.Advance(time.Duration(rng.IntN(1500)) * time.Millisecond)
			default:
				if _, err := re.UpdatePool("p", func(c *PoolConfig) { c.ConcurrencyLimit = 3 + rng.Int64N(8) }); err != nil {
					t.Fatal(err)
				}
			}
			kept := waiting[:0]
			for _, w := range waiting {
				if !w.finished() {
					kept = append(kept, w)
				} else if w.err == nil {
					held = append(held, w.lease.FencingToken)
				}
			}
			waiting = kept
			if err := re.checkInvariants(prev); err != nil {
				t.Fatalf("seed %d step %d: %v", seed, step, err)
			}
		}
		for _, w := range waiting {
			w.cancel()
			_, _ = w.result(t)
		}
	}
}

// TestConcSharesPart drives the concurrency shares alone: two shares
// divide what an ordinary lease and the waiters leave of the limit; a
// change of weight or target is heard once, except by the share a resize
// answers; an ended lease's share is forgotten.
func TestConcSharesPart(t *testing.T) {
	leases := map[uint64]*lease{
		1: {Lease: Lease{FencingToken: 1, Weight: 2}}, // ordinary
		2: {Lease: Lease{FencingToken: 2, Weight: 1}},
		3: {Lease: Lease{FencingToken: 3, Weight: 1}},
	}
	var c concShares
	c.want(3, 10)
	c.want(2, 2)
	tokens := c.retarget(10, 4, 1, leases) // 10 - 2 ordinary - 1 waiting = 7 for the shares
	if len(tokens) != 2 || tokens[0] != 2 || c.target(2) != 2 || c.target(3) != 5 {
		t.Fatalf("tokens %v, targets %d, %d", tokens, c.target(2), c.target(3))
	}
	c.answering = 2
	if c.heard(2, 1) || !c.heard(3, 1) || c.heard(3, 1) {
		t.Fatal("a change was not heard once, or the answered share was pushed")
	}
	if l := c.leaseOut(leases[3]); l.Share == nil || l.Share.Want != 10 || l.Share.Target != 5 || l.Share.Version != 1 {
		t.Fatalf("lease out %+v", l.Share)
	}
	if l := c.leaseOut(leases[1]); l.Share != nil {
		t.Fatal("an ordinary lease has a share")
	}
	c.forget(3)
	if c.retarget(1, 3, 0, leases); c.target(2) != 1 { // at least 1, even with nothing left
		t.Fatalf("target %d", c.target(2))
	}
}
