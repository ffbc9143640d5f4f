package limiter

import (
	"context"
	"testing"
	"time"

	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// TestSharesRecoveredAfterRestart: after a restart, while shares from
// before it may still be spending the rate, the engine grants none of it
// again — not to new shares, not to the bucket — except to holders that
// re-adopt their shares (refreshing with the rate they were granted).
// When the last old share must have expired, the rest is given out.
// Granted shares, exact tokens and what old shares may spend never exceed
// the rate together.
func TestSharesRecoveredAfterRestart(t *testing.T) {
	m := newMemPersister()
	te := newPersistentTestEngine(t, m)
	te.mustCreate(t, PoolConfig{Name: "api", Rate: 100, Burst: 10, DefaultLeaseTTL: 6 * time.Second})
	a, err := te.AcquireShare(ShareRequest{Pool: "api", Want: 60})
	if err != nil || a.Rate != 60 {
		t.Fatalf("share a = %+v, %v", a, err)
	}
	b, err := te.AcquireShare(ShareRequest{Pool: "api", Want: 80})
	if err != nil || b.Rate != 40 {
		t.Fatalf("share b = %+v, %v", b, err)
	}

	te2 := te.restart(t, m, time.Second)
	check := func(when string) {
		t.Helper()
		if err := te2.checkInvariants(map[string]int64{}); err != nil {
			t.Fatalf("%s: %v", when, err)
		}
	}
	check("after the restart")
	c, err := te2.AcquireShare(ShareRequest{Pool: "api", Want: 50})
	if err != nil || c.Rate != 0 {
		t.Fatalf("a new share while old ones may still spend the rate: %+v, %v", c, err)
	}
	te2.clk.Advance(time.Second)
	if _, err := te2.Take(context.Background(), "api", 1, 0); err == nil {
		t.Fatal("Take got a token while old shares may still spend the whole rate")
	}

	// a comes back, saying it was granted 60/s: re-adopted, with its id.
	ra, err := te2.RefreshShare(ShareRefresh{Pool: "api", ID: a.ID, Want: 60, Granted: 60})
	if err != nil || ra.ID != a.ID || ra.Rate <= 0 || ra.Rate > 60 {
		t.Fatalf("re-adopting a: %+v, %v", ra, err)
	}
	check("after a's re-adoption")
	// b refreshes without saying its rate: not re-adopted.
	_, err = te2.RefreshShare(ShareRefresh{Pool: "api", ID: b.ID})
	wantReason(t, err, apierr.ErrShareNotFound)
	// A release of an old share succeeds, and it cannot come back after.
	if err := te2.ReleaseShare("api", b.ID); err != nil {
		t.Fatalf("releasing an old share: %v", err)
	}
	_, err = te2.RefreshShare(ShareRefresh{Pool: "api", ID: b.ID, Granted: 40})
	wantReason(t, err, apierr.ErrShareNotFound)
	if st := te2.status(t, "api"); st.SharesGranted > 60 {
		t.Fatalf("during the window: %+v", st)
	}

	te2.clk.Advance(2 * time.Second)
	if _, err := te2.RefreshShare(ShareRefresh{Pool: "api", ID: c.ID}); err != nil {
		t.Fatal(err)
	}
	// The old shares had a TTL of 6s: 6s after the restart none can be live.
	te2.clk.Advance(3 * time.Second)
	check("after the window")
	st := te2.status(t, "api")
	if st.SharesGranted != 100 || st.ShareHolders != 2 {
		t.Fatalf("after the window the rate is not all given out: %+v", st)
	}
	_, err = te2.RefreshShare(ShareRefresh{Pool: "api", ID: b.ID, Granted: 40})
	wantReason(t, err, apierr.ErrShareNotFound)
}
