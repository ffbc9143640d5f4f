package client_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/tollgate/tollgate/client"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
	"github.com/tollgate/tollgate/server"
)

// newLimiter returns a Limiter of c, closed at the end of the test.
func newLimiter(t *testing.T, c *client.Client, pool string, want float64, opts ...client.LimiterOption) *client.Limiter {
	t.Helper()
	l, err := c.NewLimiter(pool, want, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func waitForLimit(t *testing.T, l *client.Limiter, want float64) {
	t.Helper()
	waitFor(t, fmt.Sprintf("limit %v", want), func() bool { return float64(l.Limit()) == want })
}

// TestLimiterSpendsAShare: a Limiter gets its share and spends it locally;
// a second holder gets only what is free, then its fair part as the first
// gives back at its refresh (pushed); Close gives the share back.
func TestLimiterSpendsAShare(t *testing.T) {
	ts := newTestServer(t)
	ts.pool(limiter.PoolConfig{Name: "api", Rate: 100, Burst: 20, SafeRate: 3})
	c1, c2 := ts.dial(), ts.dial()

	l1 := newLimiter(t, c1, "api", 100, client.WithShareTTL(300*time.Millisecond))
	if err := l1.Wait(ctx(t)); err != nil {
		t.Fatal(err)
	}
	waitForLimit(t, l1, 100)
	if l1.Burst() != 20 {
		t.Fatalf("burst %d, want 20 (the pool's, for the whole rate)", l1.Burst())
	}
	l2 := newLimiter(t, c2, "api", 100, client.WithShareTTL(300*time.Millisecond))
	waitForLimit(t, l1, 50) // at l1's next refresh (100ms)
	waitForLimit(t, l2, 50) // pushed to l2 at once
	if s := ts.status("api"); s.ShareHolders != 2 || s.SharesGranted != 100 {
		t.Fatalf("status: %+v", s.AdaptiveStatus)
	}
	if err := l1.Close(); err != nil {
		t.Fatal(err)
	}
	waitForLimit(t, l2, 100)
	if err := l1.Wait(ctx(t)); !errors.Is(err, client.ErrLimiterClosed) || l1.Allow() {
		t.Fatalf("Wait after Close = %v", err)
	}
	// Spending: the bucket starts empty and refills at the share's rate.
	start := time.Now()
	for i := 0; i < 30; i++ {
		if err := l2.Wait(ctx(t)); err != nil {
			t.Fatal(err)
		}
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("30 tokens at 100/s took %v", d)
	}
	if err := l2.WaitN(ctx(t), 21); err == nil {
		t.Fatal("WaitN above the burst succeeded")
	}
}

// TestLimiterSafeRate: when the server cannot be reached, a Limiter keeps
// its share until the share's local deadline, then spends the safe rate;
// once the server is back it gets its share back if the server still holds
// it (the outage was shorter than the TTL by the server's clock), rather
// than a second share that would get only what the first, spent by no one,
// leaves free; or a new share if the old one expired.
func TestLimiterSafeRate(t *testing.T) {
	for _, expired := range []bool{false, true} {
		t.Run(fmt.Sprintf("expired=%v", expired), func(t *testing.T) {
			ts := newTestServer(t)
			ts.pool(limiter.PoolConfig{Name: "api", Rate: 100, SafeRate: 3})
			c := ts.dial()
			l := newLimiter(t, c, "api", 100, client.WithShareTTL(600*time.Millisecond))
			waitForLimit(t, l, 100)
			before := shareIDs(t, ts, "api")
			ts.stop()
			stopped := time.Now()
			waitForLimit(t, l, 3)
			if d := time.Since(stopped); d < 300*time.Millisecond {
				t.Fatalf("the share was given up %v after the server went away; it should last until its deadline", d)
			}
			if expired {
				ts.clock.Advance(time.Second) // the server expires the old share
			}
			ts.start()
			waitForLimit(t, l, 100)
			if after := shareIDs(t, ts, "api"); len(after) != 1 || (after[0] == before[0]) == expired {
				t.Fatalf("shares %v after the outage, %v before; want one, the same unless it expired", after, before)
			}
		})
	}
}

// shareIDs returns the ids of pool's live shares.
func shareIDs(t *testing.T, ts *testServer, pool string) []uint64 {
	t.Helper()
	shs, err := ts.srv.Engine().Shares(pool)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]uint64, len(shs))
	for i, sh := range shs {
		ids[i] = sh.ID
	}
	return ids
}

// TestLimiterRefused: the server's refusal comes from Wait.
func TestLimiterRefused(t *testing.T) {
	ts := newTestServer(t)
	ts.pool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: 1})
	c := ts.dial()
	l := newLimiter(t, c, "nope", 5)
	mustIs(t, l.Wait(ctx(t)), apierr.ErrPoolNotFound)
	l2 := newLimiter(t, c, "db", 5)
	mustIs(t, l2.Wait(ctx(t)), apierr.ErrNoRateLimit)
	if l2.Allow() {
		t.Fatal("Allow without a share")
	}
	if _, err := c.NewLimiter("db", 0); err == nil {
		t.Fatal("Limiter with want 0")
	}
}

// TestLimiterReportsOutcomes: outcomes reported through a Limiter reach
// the server's counters within a report interval.
func TestLimiterReportsOutcomes(t *testing.T) {
	ts := newTestServer(t)
	ts.pool(limiter.PoolConfig{Name: "api", Rate: 100})
	c := ts.dial()
	l := newLimiter(t, c, "api", 10)
	l.Report(nil, 10*time.Millisecond)
	l.Report(errors.New("boom"), 0)
	l.Report(context.DeadlineExceeded, time.Second)
	l.Report(context.Canceled, 0) // not reported
	c.Report("api", client.OutcomeError, 0)
	waitFor(t, "outcomes counted", func() bool {
		s := ts.status("api")
		return s.SuccessesReported == 1 && s.ErrorsReported == 2 && s.TimeoutsReported == 1
	})
}

// BenchmarkLimiterAllow measures a local decision of a Limiter: Allow on a
// share spent locally, with no call to the server.
func BenchmarkLimiterAllow(b *testing.B) {
	srv := server.New(server.Config{})
	defer srv.Close()
	if _, err := srv.Engine().CreatePool(limiter.PoolConfig{Name: "api", Rate: 1e9, Burst: 1e9}); err != nil {
		b.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	gs := srv.GRPCServer()
	go func() { _ = gs.Serve(lis) }()
	defer gs.Stop()
	c, err := client.Dial(lis.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	l, err := c.NewLimiter("api", 1e9)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	waitFor(b, "the limiter's first share", func() bool { return l.Limit() != 0 })
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		l.Allow()
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
}
