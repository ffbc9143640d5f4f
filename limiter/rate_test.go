package limiter

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/testwait"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

func TestTakeImmediateAndRateLimited(t *testing.T) {
	te := newTestEngine(t)
	te.mustCreate(t, PoolConfig{Name: "api", Rate: 10, Burst: 5})
	ctx := context.Background()
	r, err := te.Take(ctx, "api", 5, 0)
	if err != nil || r.Tokens != 5 || r.Waited != 0 {
		t.Fatalf("take = %+v, %v", r, err)
	}
	_, err = te.Take(ctx, "api", 2, 100*time.Millisecond)
	wantReason(t, err, apierr.ErrRateLimited)
	var e *apierr.Error
	errors.As(err, &e)
	if e.RetryAfter != 200*time.Millisecond {
		t.Fatalf("RetryAfter = %v; want 200ms", e.RetryAfter)
	}
	// The refused take reserved nothing: after 200ms two tokens are there.
	te.clk.Advance(200 * time.Millisecond)
	if _, err := te.Take(ctx, "api", 2, 0); err != nil {
		t.Fatal(err)
	}
	s := te.status(t, "api")
	if s.TokensGranted != 7 || s.Rejected != 1 {
		t.Fatalf("status = %+v", s)
	}
}

func TestTakeWaitsByEngineClock(t *testing.T) {
	te := newTestEngine(t)
	te.mustCreate(t, PoolConfig{Name: "api", Rate: 1, Burst: 1})
	ctx := context.Background()
	if _, err := te.Take(ctx, "api", 1, 0); err != nil {
		t.Fatal(err)
	}
	done := make(chan TakeResult, 1)
	go func() {
		r, err := te.Take(ctx, "api", 1, 5*time.Second)
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	testwait.For(t, "the take to reserve tokens and wait on the clock", func() bool { return te.clk.Pending() > 0 && te.status(t, "api").TokensAvailable < 0 })
	te.clk.Advance(999 * time.Millisecond)
	select {
	case <-done:
		t.Fatal("take finished before its token")
	default:
	}
	te.clk.Advance(time.Millisecond)
	if r := <-done; r.Waited != time.Second {
		t.Fatalf("waited %v", r.Waited)
	}
}

func TestCancelledTakeGivesTokensBack(t *testing.T) {
	te := newTestEngine(t)
	te.mustCreate(t, PoolConfig{Name: "api", Rate: 1, Burst: 2})
	bg := context.Background()
	if _, err := te.Take(bg, "api", 2, 0); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(bg)
	errc := make(chan error, 1)
	go func() { _, err := te.Take(ctx, "api", 2, time.Minute); errc <- err }()
	testwait.For(t, "a take to reserve tokens", func() bool { return te.status(t, "api").TokensAvailable < 0 })
	cancel()
	wantReason(t, <-errc, apierr.ErrCanceled)
	te.clk.Advance(2 * time.Second)
	if _, err := te.Take(bg, "api", 2, 0); err != nil {
		t.Fatalf("tokens of the cancelled take were not returned: %v", err)
	}
}

func TestTakeBadRequests(t *testing.T) {
	te := newTestEngine(t)
	te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 1})
	te.mustCreate(t, PoolConfig{Name: "api", Rate: 10, Burst: 3})
	ctx := context.Background()
	_, err := te.Take(ctx, "db", 1, 0)
	wantReason(t, err, apierr.ErrNoRateLimit)
	_, err = te.Take(ctx, "api", 4, time.Hour)
	wantReason(t, err, apierr.ErrInvalidArgument)
	_, err = te.Take(ctx, "api", 0, 0)
	wantReason(t, err, apierr.ErrInvalidArgument)
	_, err = te.Take(ctx, "api", 1, -1)
	wantReason(t, err, apierr.ErrInvalidArgument)
	_, err = te.Take(ctx, "none", 1, 0)
	wantReason(t, err, apierr.ErrPoolNotFound)
}

// In a pool with both limits, a grant must pass both: here the rate binds,
// and a queued acquire is granted when its tokens arrive (by the rate
// timer), not before.
func TestAcquireInPoolWithRateAndConcurrency(t *testing.T) {
	te := newTestEngine(t)
	te.mustCreate(t, PoolConfig{Name: "both", ConcurrencyLimit: 10, Rate: 2, Burst: 2})
	te.mustAcquire(t, AcquireRequest{Pool: "both"})
	te.mustAcquire(t, AcquireRequest{Pool: "both"})
	_, err := te.Acquire(context.Background(), AcquireRequest{Pool: "both", Weight: 1, NoWait: true})
	wantReason(t, err, apierr.ErrNoCapacity)
	w := te.startAcquire(t, AcquireRequest{Pool: "both", Weight: 2})
	te.clk.Advance(999 * time.Millisecond)
	if w.finished() {
		t.Fatal("granted before the tokens were there")
	}
	te.clk.Advance(time.Millisecond)
	if _, err := w.result(t); err != nil {
		t.Fatal(err)
	}
	if s := te.status(t, "both"); s.Held != 4 || s.TokensGranted != 4 {
		t.Fatalf("status = %+v", s)
	}
	// Now the concurrency limit binds.
	if _, err := te.UpdatePool("both", func(c *PoolConfig) { c.ConcurrencyLimit = 4 }); err != nil {
		t.Fatal(err)
	}
	te.clk.Advance(10 * time.Second)
	_, err = te.Acquire(context.Background(), AcquireRequest{Pool: "both", Weight: 1, NoWait: true})
	wantReason(t, err, apierr.ErrNoCapacity)
}

// Invariant 3: over any window, granted tokens <= rate*window + burst.
func TestTokensGrantedNeverExceedRateTimesWindowPlusBurst(t *testing.T) {
	te := newTestEngine(t)
	const rate, burst = 50.0, 10
	te.mustCreate(t, PoolConfig{Name: "api", Rate: rate, Burst: burst})
	type grant struct {
		at time.Time
		n  int64
	}
	var grants []grant
	ctx := context.Background()
	seed := uint64(1)
	next := func(n uint64) uint64 { seed = seed*6364136223846793005 + 1442695040888963407; return (seed >> 33) % n }
	for i := 0; i < 3000; i++ {
		n := int64(next(burst) + 1)
		if r, err := te.Take(ctx, "api", n, 0); err == nil {
			grants = append(grants, grant{te.clk.Now(), r.Tokens})
		}
		te.clk.Advance(time.Duration(next(40)) * time.Millisecond)
	}
	for i := range grants {
		var sum int64
		for j := i; j < len(grants); j++ {
			sum += grants[j].n
			window := grants[j].at.Sub(grants[i].at).Seconds()
			if float64(sum) > rate*window+burst+1e-9 {
				t.Fatalf("granted %d tokens in %.3fs window; bound %.1f", sum, window, rate*window+burst)
			}
		}
	}
	if len(grants) < 100 {
		t.Fatalf("only %d grants: test is not exercising the bucket", len(grants))
	}
}
