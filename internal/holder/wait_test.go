package holder

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/leaseid"
	"github.com/tollgate/tollgate/internal/limits"
	"github.com/tollgate/tollgate/internal/metrics"
	"github.com/tollgate/tollgate/internal/term"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/limiter/fakeclock"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// newCalls returns a holder's calls on an engine of its own with a fake
// clock, pool "db" (one permit) and pool "api" (one token a second).
func newCalls(t *testing.T) (*Calls, *fakeclock.Clock) {
	t.Helper()
	clk := fakeclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	e := limiter.New(limiter.Options{Clock: clk})
	t.Cleanup(e.Close)
	for _, pc := range []limiter.PoolConfig{{Name: "db", ConcurrencyLimit: 1}, {Name: "api", Rate: 1, Burst: 1}} {
		if _, err := e.CreatePool(pc); err != nil {
			t.Fatal(err)
		}
	}
	lim := limits.Limits{}.WithDefaults()
	a := auth.New(nil)
	tm, err := term.New(0, nil, func(func() bool) (*limiter.Engine, error) { return e, nil })
	if err != nil {
		t.Fatal(err)
	}
	tm.Begin()
	return (&Calls{
		Auth:    func() *auth.Authorizer { return a },
		Quotas:  limits.New(lim),
		Limits:  lim,
		Metrics: metrics.New(nil, []string{"acquire"}, -1),
		IDs:     leaseid.New(nil),
		Log:     slog.New(slog.DiscardHandler),
	}).In(tm), clk
}

// wantCounts checks what the quotas count: waits in progress, and the
// leases and calls in progress of the anonymous client.
func wantCounts(t *testing.T, c *Calls, waiters, clientLeases int64) {
	t.Helper()
	key := c.Auth().Identify(context.Background()).ClientKey("")
	if w, l := c.Quotas.Waiters(), c.Quotas.ClientLeases(key); w != waiters || l != clientLeases {
		t.Fatalf("quotas count %d waiting and %d for the client; want %d and %d", w, l, waiters, clientLeases)
	}
}

// An acquire that waits counts as waiting until its outcome comes; the
// outcome Notify delivers has its counts finished already: a grant counts
// as the client's lease, a cancelled wait as nothing.
func TestAcquireWaitFinishesItsCounts(t *testing.T) {
	c, _ := newCalls(t)
	ctx := context.Background()
	held, w, err := c.StartAcquire(ctx, limiter.AcquireRequest{Pool: "db", Weight: 1}, nil)
	if err != nil || w.Waits() {
		t.Fatalf("first acquire: %v, waits %v; want a grant", err, w.Waits())
	}
	wantCounts(t, c, 0, 1)
	type outcome struct {
		l   limiter.Lease
		err error
	}
	got := make(chan outcome, 1)
	_, w, err = c.StartAcquire(ctx, limiter.AcquireRequest{Pool: "db", Weight: 1}, nil)
	if err != nil || !w.Waits() {
		t.Fatalf("second acquire: %v; want a wait", err)
	}
	wantCounts(t, c, 1, 2)
	w.Notify(func(l limiter.Lease, err error) {
		wantCounts(t, c, 0, 2) // finished before the outcome is handed over
		got <- outcome{l, err}
	})
	if err := c.ReleaseLease("db", held.FencingToken, nil); err != nil {
		t.Fatal(err)
	}
	o := <-got
	if o.err != nil || o.l.FencingToken == 0 {
		t.Fatalf("granted wait: %+v", o)
	}
	wantCounts(t, c, 0, 1)

	_, w, err = c.StartAcquire(ctx, limiter.AcquireRequest{Pool: "db", Weight: 1}, nil)
	if err != nil || !w.Waits() {
		t.Fatalf("third acquire: %v; want a wait", err)
	}
	w.Notify(func(l limiter.Lease, err error) { got <- outcome{l, err} })
	w.Cancel(context.Canceled)
	if o := <-got; !errors.Is(o.err, apierr.ErrCanceled) {
		t.Fatalf("cancelled wait: %+v; want ErrCanceled", o)
	}
	wantCounts(t, c, 0, 1)
}

// The unary Acquire awaits the same wait: its counts end with it, and a
// call whose ctx ends while it waits reports the end and holds nothing.
func TestUnaryAcquireAwaits(t *testing.T) {
	c, _ := newCalls(t)
	held, err := c.Acquire(context.Background(), &tollgatev1.AcquireRequest{Pool: "db"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.Acquire(ctx, &tollgatev1.AcquireRequest{Pool: "db"})
		done <- err
	}()
	for c.Quotas.Waiters() == 0 {
		time.Sleep(time.Millisecond) // until the call waits in the pool's queue
	}
	cancel()
	if err := <-done; !errors.Is(err, apierr.ErrCanceled) {
		t.Fatalf("cancelled Acquire: %v; want ErrCanceled", err)
	}
	wantCounts(t, c, 0, 1)
	if err := c.ReleaseLease("db", held.FencingToken, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Acquire(context.Background(), &tollgatev1.AcquireRequest{Pool: "db"}); err != nil {
		t.Fatalf("Acquire after the release: %v", err)
	}
	wantCounts(t, c, 0, 1)
}

// A take that waits for its tokens finishes its counts as an acquire's
// wait does, whether Notify or Await learns the outcome.
func TestTakeWaitFinishesItsCounts(t *testing.T) {
	c, clk := newCalls(t)
	ctx := context.Background()
	one := int64(1)
	req := &tollgatev1.TakeRequest{Pool: "api", Tokens: &one, MaxWait: durationpb.New(time.Minute)}
	if res, w, err := c.StartTake(ctx, req); err != nil || w.Waits() || res.Tokens != 1 {
		t.Fatalf("first take: %+v, %v, waits %v; want the token at once", res, err, w.Waits())
	}
	wantCounts(t, c, 0, 0)
	_, w, err := c.StartTake(ctx, req)
	if err != nil || !w.Waits() {
		t.Fatalf("second take: %v; want a wait", err)
	}
	wantCounts(t, c, 1, 1)
	got := make(chan error, 1)
	w.Notify(func(res limiter.TakeResult, err error) {
		wantCounts(t, c, 0, 0)
		if err == nil && res.Tokens != 1 {
			err = errors.New("no token")
		}
		got <- err
	})
	clk.Advance(time.Second)
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	_, w, err = c.StartTake(ctx, req)
	if err != nil || !w.Waits() {
		t.Fatalf("third take: %v; want a wait", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := w.Await(cctx); !errors.Is(err, apierr.ErrCanceled) {
		t.Fatalf("Await with a done context: %v; want ErrCanceled", err)
	}
	wantCounts(t, c, 0, 0)
}
