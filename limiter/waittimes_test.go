package limiter

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

func TestWaitBucketEdges(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 100000; i++ {
		d := time.Duration(r.Int64N(int64(10 * time.Hour)))
		b := waitBucket(d)
		up := waitBucketUpper(b)
		if d < 1024 {
			if b != 0 || up != 0 {
				t.Fatalf("%v: bucket %d upper %v, want 0", d, b, up)
			}
			continue
		}
		if up <= d || float64(up) > 1.25*float64(d) {
			t.Fatalf("%v: bucket %d upper edge %v is not in (d, 1.25d]", d, b, up)
		}
		if b > 1 && waitBucketUpper(b-1) > d {
			t.Fatalf("%v: the bucket below, %d, already reaches %v", d, b-1, waitBucketUpper(b-1))
		}
	}
}

func TestWaitTimePercentiles(t *testing.T) {
	var h waitHist
	now := epoch
	for i := 1; i <= 100; i++ { // 1ms..100ms, spread over the window
		h.record(now.Add(time.Duration(i)*400*time.Millisecond), time.Duration(i)*time.Millisecond)
	}
	end := now.Add(40 * time.Second)
	wt := h.summary(end)
	within := func(name string, got, want time.Duration) {
		t.Helper()
		if got < want || float64(got) > 1.25*float64(want) {
			t.Errorf("%s = %v, want %v to 1.25×", name, got, want)
		}
	}
	if wt.Count != 100 || wt.Max != 100*time.Millisecond || wt.Window != WaitWindow {
		t.Fatalf("summary %+v: want 100 waits, max 100ms", wt)
	}
	within("p50", wt.P50, 50*time.Millisecond)
	within("p90", wt.P90, 90*time.Millisecond)
	within("p99", wt.P99, 99*time.Millisecond)

	// Slots leave the window as the clock moves on: the waits recorded in
	// the first 10s (1ms..24ms) are gone 60s later.
	wt = h.summary(now.Add(WaitWindow + 5*time.Second))
	if wt.Count != 100-24 || wt.Max != 100*time.Millisecond || wt.P50 < 60*time.Millisecond {
		t.Fatalf("after the first slot left the window: %+v", wt)
	}
	if wt = h.summary(end.Add(2 * WaitWindow)); wt.Count != 0 || wt.P50 != 0 || wt.Max != 0 {
		t.Fatalf("long after: %+v, want nothing", wt)
	}
}

// Every grant records its wait, from the acquire's arrival to the grant by
// the engine's clock; immediate grants wait 0.
func TestPoolStatsWaitTimes(t *testing.T) {
	te := newTestEngine(t)
	te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 1})
	for i := 0; i < 3; i++ { // three immediate grants
		l := te.mustAcquire(t, AcquireRequest{Pool: "db"})
		if _, err := te.Release("db", l.FencingToken); err != nil {
			t.Fatal(err)
		}
	}
	held := te.mustAcquire(t, AcquireRequest{Pool: "db"})
	pa := te.startAcquire(t, AcquireRequest{Pool: "db"})
	te.clk.Advance(3 * time.Second)
	if _, err := te.Release("db", held.FencingToken); err != nil {
		t.Fatal(err)
	}
	if _, err := pa.result(t); err != nil {
		t.Fatal(err)
	}
	st, err := te.PoolStats("db")
	if err != nil {
		t.Fatal(err)
	}
	wt := st.WaitTimes
	if wt.Count != 5 || wt.P50 != 0 || wt.P90 != 3*time.Second || wt.P99 != 3*time.Second || wt.Max != 3*time.Second {
		t.Fatalf("wait times %+v: want 5 grants, p50 0, p90/p99/max 3s", wt)
	}
	if st.Status.Held != 1 || st.Status.Granted != 5 || st.Status.Utilisation != 1 {
		t.Fatalf("status %+v", st.Status)
	}
	_, err = te.PoolStats("nope")
	wantReason(t, err, apierr.ErrPoolNotFound)
	_, err = te.PoolStats("bad name")
	wantReason(t, err, apierr.ErrInvalidArgument)
}

// A rate-only pool's utilisation is the fraction of its rate granted over
// the window; a pool with a concurrency limit reports held / limit.
func TestPoolStatsRateUtilisation(t *testing.T) {
	te := newTestEngine(t)
	te.mustCreate(t, PoolConfig{Name: "api", Rate: 10, Burst: 100})
	te.mustCreate(t, PoolConfig{Name: "both", Rate: 10, Burst: 100, ConcurrencyLimit: 4, DefaultLeaseTTL: time.Hour, MaxLeaseTTL: time.Hour})
	te.mustAcquire(t, AcquireRequest{Pool: "both"}) // one token, and 1 of 4 held
	for pool, n := range map[string]int64{"api": 100, "both": 99} {
		if _, err := te.Take(context.Background(), pool, n, 0); err != nil { // the rest of the full bucket
			t.Fatal(err)
		}
	}
	te.clk.Advance(20 * time.Second)
	st, err := te.PoolStats("api")
	if err != nil {
		t.Fatal(err)
	}
	if st.RateUtilisation != 0.5 || st.Utilisation != 0.5 { // 100 tokens of 20s × 10/s
		t.Fatalf("api: rate utilisation %v, utilisation %v; want 0.5", st.RateUtilisation, st.Utilisation)
	}
	if st, err = te.PoolStats("both"); err != nil {
		t.Fatal(err)
	}
	if st.RateUtilisation != 0.5 || st.Utilisation != 0.25 {
		t.Fatalf("both: rate utilisation %v, utilisation %v; want 0.5 and 0.25", st.RateUtilisation, st.Utilisation)
	}
	// A minute later, nothing granted in the window: 0.
	te.clk.Advance(WaitWindow)
	if st, err = te.PoolStats("api"); err != nil || st.RateUtilisation != 0 {
		t.Fatalf("api a minute later: %v %v", st.RateUtilisation, err)
	}
}

// TestWaitHistRateUtilisation: the tokens of the window over what the rate
// refills in it, or in the time since the pool was born when that is
// shorter.
func TestWaitHistRateUtilisation(t *testing.T) {
	var h waitHist
	start := time.Unix(0, 10*int64(WaitSlot)) // at a slot's start
	h.addTokens(start, 300)
	now := start.Add(30 * time.Second)
	if u := h.rateUtilisation(now, 10, start); u != 1 { // 300 of 10/s × 30s
		t.Fatalf("since born: %v, want 1", u)
	}
	if u := h.rateUtilisation(now, 10, time.Time{}); u != 0.6 { // 300 of 10/s × the window so far: its five slots before now's, 50s
		t.Fatalf("over the window: %v, want 0.6", u)
	}
	if u := h.rateUtilisation(now, 0, start); u != 0 {
		t.Fatalf("no rate: %v", u)
	}
}
