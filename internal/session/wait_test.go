package session

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/limiter/fakeclock"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// answers reads n answers and returns them by request id.
func (env *streamEnv) answers(t *testing.T, n int) map[uint64]*tollgatev1.SessionResponse {
	t.Helper()
	got := make(map[uint64]*tollgatev1.SessionResponse, n)
	for range n {
		r := env.next(t)
		got[r.GetRequestId()] = r
	}
	return got
}

// waiting returns how many acquires wait in pool's queue.
func (env *streamEnv) waiting(t *testing.T, pool string) int64 {
	t.Helper()
	info, err := env.e.GetPool(pool)
	if err != nil {
		t.Fatal(err)
	}
	return info.Status.Waiting
}

// An acquire that waits is answered when a release on the same stream
// grants it; a CancelRequest answers a waiting acquire with CANCELLED and
// frees its place; the counts of both waits are finished.
func TestSessionWaitAnswered(t *testing.T) {
	env := newStreamEnv(t, fakeclock.New(epoch), limiter.PoolConfig{Name: "db", ConcurrencyLimit: 1})
	env.send(acquireReq(1, "db"))
	first := env.next(t).GetAcquire().GetLease()
	if first == nil {
		t.Fatal("no first grant")
	}
	env.send(acquireReq(2, "db"))
	env.send(releaseReq(3, "db", first.GetId()))
	got := env.answers(t, 2)
	if got[2].GetAcquire().GetLease() == nil || got[3].GetRelease() == nil {
		t.Fatalf("answers %v; want the waiter's grant and the release", got)
	}
	env.send(acquireReq(4, "db"))
	env.send(&tollgatev1.SessionRequest{RequestId: 5, Kind: &tollgatev1.SessionRequest_Cancel{Cancel: &tollgatev1.CancelRequest{RequestId: 4}}})
	r := env.next(t)
	if r.GetRequestId() != 4 || codes.Code(r.GetError().GetCode()) != codes.Canceled {
		t.Fatalf("answer %v; want request 4 CANCELLED", r)
	}
	if n := env.waiting(t, "db"); n != 0 {
		t.Fatalf("%d waiting after the cancel", n)
	}
	if n := env.calls.Quotas.Waiters(); n != 0 {
		t.Fatalf("quotas count %d waits; want none", n)
	}
}

// A take that waits for its tokens is answered when they come, by the
// engine's clock.
func TestSessionTakeWaitAnswered(t *testing.T) {
	clk := fakeclock.New(epoch)
	env := newStreamEnv(t, clk, limiter.PoolConfig{Name: "api", Rate: 1, Burst: 1})
	one := int64(1)
	take := func(id uint64) {
		env.send(&tollgatev1.SessionRequest{RequestId: id, Kind: &tollgatev1.SessionRequest_Take{Take: &tollgatev1.TakeRequest{Pool: "api", Tokens: &one, MaxWait: durationpb.New(time.Minute)}}})
	}
	take(1)
	if r := env.next(t); r.GetTake().GetTokens() != 1 {
		t.Fatalf("first take: %v", r)
	}
	take(2)
	for clk.Pending() == 0 {
		time.Sleep(time.Millisecond) // until the take's timer waits for its token
	}
	clk.Advance(time.Second)
	if r := env.next(t); r.GetRequestId() != 2 || r.GetTake().GetTokens() != 1 || r.GetTake().GetWaited().AsDuration() != time.Second {
		t.Fatalf("waiting take: %v; want its token after 1s", r)
	}
	if n := env.calls.Quotas.Waiters(); n != 0 {
		t.Fatalf("quotas count %d waits; want none", n)
	}
}

// When the stream ends, its waiting acquires are given up: they leave the
// pool's queue and the quotas, and the lease it holds stays.
func TestSessionEndGivesUpWaits(t *testing.T) {
	env := newStreamEnv(t, fakeclock.New(epoch), limiter.PoolConfig{Name: "db", ConcurrencyLimit: 1})
	env.send(acquireReq(1, "db"))
	if env.next(t).GetAcquire().GetLease() == nil {
		t.Fatal("no first grant")
	}
	env.send(acquireReq(2, "db"))
	for env.waiting(t, "db") == 0 {
		time.Sleep(time.Millisecond) // until the acquire waits
	}
	env.cancel()
	<-env.served
	info, err := env.e.GetPool("db")
	if err != nil {
		t.Fatal(err)
	}
	if info.Status.Waiting != 0 || info.Status.Held != 1 {
		t.Fatalf("pool status %+v; want the lease held and nothing waiting", info.Status)
	}
	if n := env.calls.Quotas.Waiters(); n != 0 {
		t.Fatalf("quotas count %d waits; want none", n)
	}
}

// A client that half-closes with an acquire waiting gets its answer
// before the stream ends.
func TestSessionHalfCloseAnswersWaits(t *testing.T) {
	env := newStreamEnv(t, fakeclock.New(epoch), limiter.PoolConfig{Name: "db", ConcurrencyLimit: 1})
	env.send(acquireReq(1, "db"))
	first := env.next(t).GetAcquire().GetLease()
	env.send(acquireReq(2, "db"))
	env.send(releaseReq(3, "db", first.GetId()))
	close(env.stream.in)
	got := env.answers(t, 2)
	if got[2].GetAcquire().GetLease() == nil {
		t.Fatalf("answers %v; want the waiter's grant", got)
	}
	<-env.served
	if env.err != nil {
		t.Fatalf("Serve: %v; want nil after the half-close", env.err)
	}
}
