package limits

import (
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/errtest"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// ForgetLeases stops counting granted and tracked leases, not acquires in
// progress.
func TestForgetLeases(t *testing.T) {
	q := New(Limits{MaxClientLeases: 2})
	if err := q.BeginAcquire("c"); err != nil {
		t.Fatal(err)
	}
	q.EndAcquire("c", &limiter.Lease{Pool: "p", FencingToken: 1})
	q.Track("p", 2, func() string { return "c" })
	if err := q.BeginAcquire("c"); err == nil {
		t.Fatal("a third lease was let in past MaxClientLeases 2")
	}
	q.ForgetLeases()
	if n := q.ClientLeases("c"); n != 0 {
		t.Fatalf("client counts %d after ForgetLeases", n)
	}
	if err := q.BeginAcquire("c"); err != nil { // in progress: kept
		t.Fatal(err)
	}
	q.ForgetLeases()
	if n := q.ClientLeases("c"); n != 1 {
		t.Fatalf("client counts %d with one acquire in progress, want 1", n)
	}
	q.Track("p", 2, func() string { return "c" }) // re-adopted later: counted again
	if n := q.ClientLeases("c"); n != 2 {
		t.Fatalf("client counts %d after re-adoption, want 2", n)
	}
}

// ForgetLeasesIn stops counting the leases of the pools it is given only
// (the pools of a shard whose term ended).
func TestForgetLeasesIn(t *testing.T) {
	q := New(Limits{MaxClientLeases: 3})
	q.Track("p", 1, func() string { return "c" })
	q.Track("q", 2, func() string { return "c" })
	q.ForgetLeasesIn(func(pool string) bool { return pool == "q" })
	if n := q.ClientLeases("c"); n != 1 {
		t.Fatalf("client counts %d after forgetting pool q's lease; want pool p's, 1", n)
	}
	q.LeaseEnded("p", 1)
	if n := q.ClientLeases("c"); n != 0 {
		t.Fatalf("client counts %d after pool p's lease ended", n)
	}
}

// Past its burst a client is refused with its rate, the flag that raises
// it and a retry after one request's share of a second; the refusal is
// counted. Without a rate nothing is refused.
func TestAllowRate(t *testing.T) {
	q := New(Limits{ClientRate: 4, ClientBurst: 2})
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	q.SetRateClock(func() time.Time { return now })
	for i := range 2 {
		if err := q.AllowRate("addr:a"); err != nil {
			t.Fatalf("request %d of the burst refused: %v", i+1, err)
		}
	}
	err := q.AllowRate("addr:a")
	if err == nil || err.Reason != apierr.ReasonClientRateLimited || err.RetryAfter != 250*time.Millisecond ||
		!strings.Contains(err.Message, "4 per second (burst 2)") || !strings.Contains(err.Message, "--client-rate") {
		t.Fatalf("past the burst: %v", err)
	}
	errtest.WantCodes(t, err, apierr.CodeResourceExhausted)
	if n := q.Refused(KindClientRate); n != 1 {
		t.Fatalf("%d refusals counted, want 1", n)
	}
	if err := q.AllowRate("addr:b"); err != nil {
		t.Fatalf("another client refused: %v", err)
	}
	now = now.Add(250 * time.Millisecond)
	if err := q.AllowRate("addr:a"); err != nil {
		t.Fatalf("refused after its retry delay: %v", err)
	}
	if u := New(Limits{}); u.RateLimited() || u.AllowRate("addr:a") != nil {
		t.Fatal("no rate must mean no limit")
	}
}

// A pool past MaxPools is refused with the flag that raises the limit.
func TestAdmitPool(t *testing.T) {
	q := New(Limits{MaxPools: 2})
	if err := q.AdmitPool(1); err != nil {
		t.Fatalf("the second pool refused: %v", err)
	}
	err := q.AdmitPool(2)
	if err == nil || err.Reason != apierr.ReasonTooManyPools || !strings.Contains(err.Message, "--max-pools") {
		t.Fatalf("the third pool: %v", err)
	}
	errtest.WantCodes(t, err, apierr.CodeResourceExhausted)
	if n := q.Refused(KindPools); n != 1 {
		t.Fatalf("%d refusals counted, want 1", n)
	}
	if err := New(Limits{}).AdmitPool(1 << 20); err != nil {
		t.Fatalf("no limit refused: %v", err)
	}
}
