package limits

import (
	"testing"

	"github.com/tollgate/tollgate/limiter"
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
