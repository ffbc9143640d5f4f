package session

import (
	"context"
	"sync/atomic"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tollgate/tollgate/internal/term"
	"github.com/tollgate/tollgate/limiter"
)

// A grant whose term stopped leading before the writer sent it does not
// go out: its request is answered with the host's NOT_LEADER for its
// pool, and an answer that grants nothing, or whose term still leads,
// goes out as it is.
func TestGrantOfALapsedTermIsNotSent(t *testing.T) {
	var streams Streams
	e := limiter.New(limiter.Options{})
	t.Cleanup(e.Close)
	if _, err := e.CreatePool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: 4}); err != nil {
		t.Fatal(err)
	}
	var live atomic.Bool
	live.Store(true)
	tm, err := term.New(1, live.Load, func(func() bool) (*limiter.Engine, error) { return e, nil })
	if err != nil {
		t.Fatal(err)
	}
	tm.Begin()
	streams.Calls = newStreamEnv(t, nil).calls
	streams.Host = notLeaderHost{fakeHost{draining: make(chan struct{}), term: tm, clock: e.Clock()}}
	s := newSession(&streams, &fakeStream{ctx: context.Background()})
	q := call{id: 1, pool: "db", t: tm, calls: s.calls.In(tm)}
	lease, _, err := q.calls.StartAcquire(context.Background(), limiter.AcquireRequest{Pool: "db", Weight: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	answers := []answer{
		{r: acquired(1, s.calls.IDs, lease), t: tm, pool: "db"},
		{r: released(2)},
	}
	s.vet(answers)
	if answers[0].r.GetAcquire().GetLease() == nil || answers[1].r.GetRelease() == nil {
		t.Fatalf("while the term leads, vet changed the answers: %v", answers)
	}
	live.Store(false) // the leadership deadline passed
	s.vet(answers)
	se := answers[0].r.GetError()
	if se == nil || answers[0].r.GetRequestId() != 1 || codes.Code(se.GetCode()) != codes.Unavailable || se.GetReason() != "NOT_LEADER" || se.GetMetadata()["pool"] != "db" {
		t.Fatalf("the grant of a term past its deadline went out as %v; want NOT_LEADER for its pool", answers[0].r)
	}
	if answers[1].r.GetRelease() == nil {
		t.Fatalf("an answer that grants nothing became %v", answers[1].r)
	}
}

// notLeaderHost answers NOT_LEADER with the pool in its metadata.
type notLeaderHost struct{ fakeHost }

func (notLeaderHost) NotLeader(pool string) error {
	st, _ := status.New(codes.Unavailable, "not the leader of "+pool).WithDetails(&errdetails.ErrorInfo{Reason: "NOT_LEADER", Metadata: map[string]string{"pool": pool}})
	return st.Err()
}
