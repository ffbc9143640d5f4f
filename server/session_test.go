package server

import (
	"context"
	"io"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tollgate/tollgate/internal/testwait"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

func TestSessionHappyPath(t *testing.T) {
	e := newEnv(t)
	e.createPool(&tollgatev1.Pool{Name: "db", ConcurrencyLimit: 2})
	e.createPool(&tollgatev1.Pool{Name: "api", Rate: 5})
	s := e.session()

	w := s.call(&tollgatev1.SessionRequest{RequestId: 1, Kind: &tollgatev1.SessionRequest_Hello{Hello: &tollgatev1.Hello{ClientId: "worker-1"}}})
	if w.GetWelcome().GetClientId() != "worker-1" {
		t.Fatalf("welcome = %v", w)
	}
	a := s.call(acquireReq(2, &tollgatev1.AcquireRequest{Pool: "db", Weight: i64(2)}))
	l := a.GetAcquire().GetLease()
	if l.GetWeight() != 2 || l.GetClientId() != "worker-1" {
		t.Fatalf("acquire answer = %v", a)
	}
	// A client id on the acquire wins over the session's.
	a2 := s.call(acquireReq(3, &tollgatev1.AcquireRequest{Pool: "api", ClientId: "other", NoWait: true}))
	if a2.GetAcquire().GetLease().GetClientId() != "other" {
		t.Fatalf("acquire answer = %v", a2)
	}
	e.clock.Advance(time.Second)
	r := s.call(renewReq(4, "db", l.GetId(), 30*time.Second))
	if got := r.GetRenew().GetLease().GetExpireTime().AsTime(); !got.Equal(testStart.Add(31 * time.Second)) {
		t.Fatalf("renew answer = %v", r)
	}
	tk := s.call(takeReq(5, &tollgatev1.TakeRequest{Pool: "api", Tokens: i64(3)}))
	if tk.GetTake().GetTokens() != 3 {
		t.Fatalf("take answer = %v", tk)
	}
	rl := s.call(releaseReq(6, "db", l.GetId()))
	if rl.GetRelease() == nil {
		t.Fatalf("release answer = %v", rl)
	}
	// Errors carry the unary call's code and reason.
	wantSessionError(t, s.call(releaseReq(7, "db", "999")), codes.NotFound, apierr.ReasonLeaseNotFound)
	wantSessionError(t, s.call(releaseReq(8, "db", "x")), codes.InvalidArgument, apierr.ReasonInvalidArgument)
	wantSessionError(t, s.call(acquireReq(9, &tollgatev1.AcquireRequest{Pool: "db", Weight: i64(0)})), codes.InvalidArgument, apierr.ReasonInvalidArgument)
	wantSessionError(t, s.call(acquireReq(10, &tollgatev1.AcquireRequest{Pool: "nope"})), codes.NotFound, apierr.ReasonPoolNotFound)
	wantSessionError(t, s.call(takeReq(11, &tollgatev1.TakeRequest{Pool: "db"})), codes.FailedPrecondition, apierr.ReasonNoRateLimit)
	wantSessionError(t, s.call(takeReq(12, &tollgatev1.TakeRequest{Pool: "api", Tokens: i64(5)})), codes.ResourceExhausted, apierr.ReasonRateLimited)
	wantSessionError(t, s.call(&tollgatev1.SessionRequest{RequestId: 13}), codes.InvalidArgument, apierr.ReasonInvalidArgument)
	// Hello only comes first.
	wantSessionError(t, s.call(&tollgatev1.SessionRequest{RequestId: 14, Kind: &tollgatev1.SessionRequest_Hello{Hello: &tollgatev1.Hello{}}}), codes.InvalidArgument, apierr.ReasonInvalidArgument)

	// A half-closed stream ends cleanly once everything is answered.
	if err := s.stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if err := s.wantEnd(); err != io.EOF {
		t.Fatalf("stream ended with %v, want a clean end", err)
	}
}

// An acquire that waits does not hold up other requests, and its answer
// comes when it is granted, after a half-close too.
func TestSessionWaitingAcquireDoesNotBlock(t *testing.T) {
	e := newEnv(t)
	e.createPool(&tollgatev1.Pool{Name: "db", ConcurrencyLimit: 1})
	s := e.session()
	l := s.call(acquireReq(1, &tollgatev1.AcquireRequest{Pool: "db"})).GetAcquire().GetLease()
	s.send(acquireReq(2, &tollgatev1.AcquireRequest{Pool: "db"}))
	testwait.For(t, "the acquire to wait", func() bool { return e.status("db").GetWaiting() == 1 })
	r := s.call(renewReq(3, "db", l.GetId(), 0))
	if r.GetRenew() == nil {
		t.Fatalf("renew answer = %v", r)
	}
	if err := s.stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	s.expectNone()
	// Release on another stream; the waiter is granted and answered.
	if _, err := e.lim.Release(e.ctx(), &tollgatev1.ReleaseRequest{Pool: "db", LeaseId: l.GetId()}); err != nil {
		t.Fatal(err)
	}
	a := s.next()
	if a.GetRequestId() != 2 || a.GetAcquire().GetLease() == nil {
		t.Fatalf("answer = %v", a)
	}
	if err := s.wantEnd(); err != io.EOF {
		t.Fatalf("stream ended with %v", err)
	}
}

func TestSessionCancel(t *testing.T) {
	e := newEnv(t)
	e.createPool(&tollgatev1.Pool{Name: "db", ConcurrencyLimit: 1})
	e.createPool(&tollgatev1.Pool{Name: "api", Rate: 1})
	s := e.session()
	l := s.call(acquireReq(1, &tollgatev1.AcquireRequest{Pool: "db"})).GetAcquire().GetLease()
	s.send(acquireReq(2, &tollgatev1.AcquireRequest{Pool: "db"}))
	testwait.For(t, "the acquire to wait", func() bool { return e.status("db").GetWaiting() == 1 })
	s.send(cancelReq(3, 2))
	wantSessionError(t, s.next(), codes.Canceled, apierr.ReasonCanceled)
	if st := e.status("db"); st.GetWaiting() != 0 || st.GetHeld() != 1 || st.GetCanceled() != 1 {
		t.Fatalf("status = %v", st)
	}
	// Cancelling a waiting take.
	s.call(takeReq(4, &tollgatev1.TakeRequest{Pool: "api"}))
	s.send(takeReq(5, &tollgatev1.TakeRequest{Pool: "api", MaxWait: dur(time.Minute)}))
	testwait.For(t, "the take to reserve", func() bool { return e.status("api").GetTokensAvailable() < 0 })
	s.send(cancelReq(6, 5))
	wantSessionError(t, s.next(), codes.Canceled, apierr.ReasonCanceled)
	if st := e.status("api"); st.GetTokensGranted() != 1 || st.GetTokensAvailable() < 0 {
		t.Fatalf("status after cancelled take = %v", st)
	}
	// Cancelling something not pending is ignored; the id is free again.
	s.send(cancelReq(7, 2))
	s.send(cancelReq(8, 12345))
	if r := s.call(renewReq(2, "db", l.GetId(), 0)); r.GetRenew() == nil {
		t.Fatalf("renew after cancels = %v", r)
	}
}

func TestSessionDuplicateRequestID(t *testing.T) {
	e := newEnv(t)
	e.createPool(&tollgatev1.Pool{Name: "db", ConcurrencyLimit: 1})
	s := e.session()
	l := s.call(acquireReq(1, &tollgatev1.AcquireRequest{Pool: "db"})).GetAcquire().GetLease()
	// Answered ids may be reused.
	s.call(renewReq(1, "db", l.GetId(), 0))
	s.send(acquireReq(2, &tollgatev1.AcquireRequest{Pool: "db"}))
	testwait.For(t, "the acquire to wait", func() bool { return e.status("db").GetWaiting() == 1 })
	wantSessionError(t, s.call(acquireReq(2, &tollgatev1.AcquireRequest{Pool: "db"})), codes.InvalidArgument, ReasonRequestIDInUse)
	wantSessionError(t, s.call(releaseReq(2, "db", l.GetId())), codes.InvalidArgument, ReasonRequestIDInUse)
	if st := e.status("db"); st.GetWaiting() != 1 || st.GetHeld() != 1 {
		t.Fatalf("status = %v", st)
	}
}

func TestSessionTooManyPending(t *testing.T) {
	e := newEnv(t)
	e.createPool(&tollgatev1.Pool{Name: "db", ConcurrencyLimit: 1, MaxWaiters: 2 * MaxSessionPending})
	s := e.session()
	l := s.call(acquireReq(0, &tollgatev1.AcquireRequest{Pool: "db"})).GetAcquire().GetLease()
	for i := uint64(1); i <= MaxSessionPending; i++ {
		s.send(acquireReq(i, &tollgatev1.AcquireRequest{Pool: "db"}))
	}
	r := s.call(acquireReq(MaxSessionPending+1, &tollgatev1.AcquireRequest{Pool: "db"}))
	wantSessionError(t, r, codes.ResourceExhausted, ReasonTooManyRequests)
	// Inline requests still go through.
	if r := s.call(renewReq(MaxSessionPending+2, "db", l.GetId(), 0)); r.GetRenew() == nil {
		t.Fatalf("renew = %v", r)
	}
	testwait.For(t, "the acquires to wait", func() bool { return e.status("db").GetWaiting() == MaxSessionPending })
	// Ending the stream cancels every waiter.
	s.cancel()
	testwait.For(t, "the waiters to go", func() bool { return e.status("db").GetWaiting() == 0 })
	if st := e.status("db"); st.GetHeld() != 1 || st.GetCanceled() != MaxSessionPending {
		t.Fatalf("status = %v", st)
	}
}

// A lease that expires is pushed to the session that acquired it; one that
// is revoked by a forced delete too.
func TestSessionLeaseEvents(t *testing.T) {
	e := newEnv(t)
	e.createPool(&tollgatev1.Pool{Name: "db", ConcurrencyLimit: 2})
	e.createPool(&tollgatev1.Pool{Name: "gone", ConcurrencyLimit: 2})
	s := e.session()
	l := s.call(acquireReq(1, &tollgatev1.AcquireRequest{Pool: "db", Ttl: dur(time.Second)})).GetAcquire().GetLease()
	keep := s.call(acquireReq(2, &tollgatev1.AcquireRequest{Pool: "db", Ttl: dur(time.Minute)})).GetAcquire().GetLease()

	e.clock.Advance(2 * time.Second)
	ev := s.next()
	if ev.GetRequestId() != 0 || ev.GetEvent().GetType() != tollgatev1.LeaseEventType_LEASE_EVENT_TYPE_EXPIRED ||
		ev.GetEvent().GetLease().GetId() != l.GetId() || ev.GetEvent().GetReason() == "" {
		t.Fatalf("event = %v", ev)
	}
	if st := e.status("db"); st.GetHeld() != 1 || st.GetExpired() != 1 {
		t.Fatalf("status = %v", st)
	}

	g := s.call(acquireReq(3, &tollgatev1.AcquireRequest{Pool: "gone"})).GetAcquire().GetLease()
	if _, err := e.adm.DeletePool(e.ctx(), &tollgatev1.DeletePoolRequest{Name: "gone", Force: true}); err != nil {
		t.Fatal(err)
	}
	ev = s.next()
	if ev.GetEvent().GetType() != tollgatev1.LeaseEventType_LEASE_EVENT_TYPE_REVOKED || ev.GetEvent().GetLease().GetId() != g.GetId() {
		t.Fatalf("event = %v", ev)
	}
	// Leases acquired by unary calls have no session to tell.
	e.acquire(&tollgatev1.AcquireRequest{Pool: "db", Ttl: dur(time.Second)})
	e.clock.Advance(2 * time.Second)
	r := s.call(renewReq(4, "db", keep.GetId(), 0))
	if r.GetRenew() == nil {
		t.Fatalf("renew = %v", r)
	}
}

// A broken stream does not free its leases: they stay held until they
// expire, and a new stream that renews them gets their events.
func TestSessionBrokenKeepsLeases(t *testing.T) {
	e := newEnv(t)
	e.createPool(&tollgatev1.Pool{Name: "db", ConcurrencyLimit: 2})
	s := e.session()
	l := s.call(acquireReq(1, &tollgatev1.AcquireRequest{Pool: "db", Weight: i64(2), Ttl: dur(10 * time.Second)})).GetAcquire().GetLease()
	s.send(acquireReq(2, &tollgatev1.AcquireRequest{Pool: "db"}))
	testwait.For(t, "the acquire to wait", func() bool { return e.status("db").GetWaiting() == 1 })

	s.cancel() // the client goes away
	if err := s.wantEnd(); status.Code(err) != codes.Canceled {
		t.Fatalf("stream ended with %v", err)
	}
	testwait.For(t, "the server to end the session", func() bool { return e.srv.liveSessions.Load() == 0 })
	st := e.status("db")
	if st.GetHeld() != 2 || st.GetLeases() != 1 || st.GetWaiting() != 0 || st.GetCanceled() != 1 || st.GetGranted() != 1 {
		t.Fatalf("status after the stream broke = %v", st)
	}

	// The client reconnects and renews on a new stream.
	s2 := e.session()
	if r := s2.call(renewReq(1, "db", l.GetId(), 5*time.Second)); r.GetRenew() == nil {
		t.Fatalf("renew on the new stream = %v", r)
	}
	e.clock.Advance(11 * time.Second) // a renew keeps the later expiry it was granted (10s)
	ev := s2.next()
	if ev.GetEvent().GetType() != tollgatev1.LeaseEventType_LEASE_EVENT_TYPE_EXPIRED || ev.GetEvent().GetLease().GetId() != l.GetId() {
		t.Fatalf("event = %v", ev)
	}
	if st := e.status("db"); st.GetHeld() != 0 {
		t.Fatalf("status after expiry = %v", st)
	}
}

// A client that does not read its stream while events pile up is cut off
// rather than block the engine or grow the server's memory.
func TestSessionEventOverflow(t *testing.T) {
	// A fixed 64 KiB window (no BDP growth) makes the server's sends block
	// once the unread events fill it.
	e := newEnv(t, grpc.WithInitialWindowSize(1<<16), grpc.WithInitialConnWindowSize(1<<16))
	e.srv.sessions.MaxEvents.Store(16)
	e.createPool(&tollgatev1.Pool{Name: "db", ConcurrencyLimit: 100000})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := e.lim.Session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const n = 2000 // about 400 KB of events: far more than the window
	desc := strings.Repeat("d", 100)
	for i := uint64(1); i <= n; i++ {
		if err := stream.Send(acquireReq(i, &tollgatev1.AcquireRequest{Pool: "db", Ttl: dur(time.Second), Description: desc})); err != nil {
			t.Fatal(err)
		}
		if r, err := stream.Recv(); err != nil || r.GetAcquire() == nil {
			t.Fatalf("acquire %d: %v, %v", i, r, err)
		}
	}
	// Not reading, let every lease expire at once: Advance must not block.
	e.clock.Advance(2 * time.Second)
	events := 0
	for {
		r, err := stream.Recv()
		if err != nil {
			wantStatus(t, err, codes.ResourceExhausted, ReasonSessionOverflow)
			break
		}
		if r.GetEvent() == nil {
			t.Fatalf("unexpected %v", r)
		}
		events++
	}
	if events >= n {
		t.Fatalf("got all %d events; the stream should have been cut off", events)
	}
	if st := e.status("db"); st.GetHeld() != 0 || st.GetExpired() != n {
		t.Fatalf("status = %v", st)
	}
}

// Requests whose body is empty are refused, never crash the server.
func TestSessionEmptyRequests(t *testing.T) {
	e := newEnv(t)
	s := e.session()
	reqs := []*tollgatev1.SessionRequest{
		{RequestId: 1, Kind: &tollgatev1.SessionRequest_Acquire{}},
		{RequestId: 2, Kind: &tollgatev1.SessionRequest_Release{}},
		{RequestId: 3, Kind: &tollgatev1.SessionRequest_Renew{}},
		{RequestId: 4, Kind: &tollgatev1.SessionRequest_Take{}},
		{RequestId: 5, Kind: &tollgatev1.SessionRequest_Acquire{Acquire: &tollgatev1.AcquireRequest{}}},
		{RequestId: 6, Kind: &tollgatev1.SessionRequest_Take{Take: &tollgatev1.TakeRequest{}}},
	}
	s.send(&tollgatev1.SessionRequest{RequestId: 99, Kind: &tollgatev1.SessionRequest_Cancel{}}) // not answered
	for _, r := range reqs {
		wantSessionError(t, s.call(r), codes.InvalidArgument, apierr.ReasonInvalidArgument)
	}
	long := &tollgatev1.SessionRequest{RequestId: 7, Kind: &tollgatev1.SessionRequest_Hello{Hello: &tollgatev1.Hello{ClientId: strings.Repeat("c", 300)}}}
	r := e.session().call(long)
	wantSessionError(t, r, codes.InvalidArgument, apierr.ReasonInvalidArgument)
	if !strings.Contains(r.GetError().GetMessage(), "256") {
		t.Fatalf("message %q does not give the limit", r.GetError().GetMessage())
	}
}

// Many callers share one stream, with cancels racing grants: every acquire
// gets exactly one answer, a lease or CANCELLED, and no permit leaks.
func TestSessionConcurrentCancelsLeakNothing(t *testing.T) {
	e := newEnv(t)
	e.createPool(&tollgatev1.Pool{Name: "db", ConcurrencyLimit: 3})
	mc, err := newMuxClient(e.lim)
	if err != nil {
		t.Fatal(err)
	}
	defer mc.close()
	const callers, rounds = 8, 60
	var granted, cancelled atomic.Int64
	var wg sync.WaitGroup
	for c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				id, ch := mc.start(func(id uint64) *tollgatev1.SessionRequest {
					return acquireReq(id, &tollgatev1.AcquireRequest{Pool: "db"})
				})
				if (c+i)%3 == 0 {
					mc.sendRaw(cancelReq(0, id))
				}
				r := mc.await(id, ch)
				if l := r.GetAcquire().GetLease(); l != nil {
					granted.Add(1)
					if rr := mc.call(func(id uint64) *tollgatev1.SessionRequest { return releaseReq(id, "db", l.GetId()) }); rr.GetRelease() == nil {
						t.Errorf("release: %v", rr)
						return
					}
					continue
				}
				if se := r.GetError(); codes.Code(se.GetCode()) != codes.Canceled {
					t.Errorf("acquire answered %v", r)
					return
				}
				cancelled.Add(1)
			}
		}()
	}
	wg.Wait()
	st := e.status("db")
	if st.GetHeld() != 0 || st.GetWaiting() != 0 || st.GetLeases() != 0 {
		t.Fatalf("status after the storm = %v", st)
	}
	if granted.Load()+cancelled.Load() != callers*rounds || st.GetGranted() != granted.Load() || st.GetReleased() != granted.Load() {
		t.Fatalf("granted %d, cancelled %d of %d; status %v", granted.Load(), cancelled.Load(), callers*rounds, st)
	}
	t.Logf("granted %d, cancelled %d", granted.Load(), cancelled.Load())
}

// Acquires that need no wait are granted by the stream's reader, one after
// the other: their answers come in the order they were sent, with fencing
// tokens in that order, while an acquire that waits does not hold them up.
func TestSessionImmediateGrantsInOrder(t *testing.T) {
	e := newEnv(t)
	e.createPool(&tollgatev1.Pool{Name: "db", ConcurrencyLimit: 1000})
	e.createPool(&tollgatev1.Pool{Name: "one", ConcurrencyLimit: 1})
	s := e.session()
	s.call(acquireReq(1, &tollgatev1.AcquireRequest{Pool: "one"}))
	s.send(acquireReq(2, &tollgatev1.AcquireRequest{Pool: "one"})) // waits
	const n = 500
	for i := uint64(3); i < 3+n; i++ {
		s.send(acquireReq(i, &tollgatev1.AcquireRequest{Pool: "db"}))
	}
	var last uint64
	for i := uint64(3); i < 3+n; i++ {
		a := s.next()
		l := a.GetAcquire().GetLease()
		if a.GetRequestId() != i || l == nil {
			t.Fatalf("answer %d is %v; want the grant of request %d", i-3, a, i)
		}
		if l.GetFencingToken() <= last {
			t.Fatalf("request %d got fencing token %d after %d", i, l.GetFencingToken(), last)
		}
		last = l.GetFencingToken()
	}
	if st := e.status("one"); st.GetWaiting() != 1 {
		t.Fatalf("pool one: %v; want its second acquire waiting", st)
	}
}

// An acquire that waits is a record in its pool's queue, not a goroutine:
// a thousand of them add no goroutines to the server; a cancel and the
// stream's end still give them up.
func TestSessionWaitsHoldNoGoroutine(t *testing.T) {
	e := newEnv(t)
	e.createPool(&tollgatev1.Pool{Name: "db", ConcurrencyLimit: 1, MaxWaiters: 2000})
	s := e.session()
	s.call(acquireReq(1, &tollgatev1.AcquireRequest{Pool: "db"}))
	before := runtime.NumGoroutine()
	const n = 1000
	for i := uint64(2); i < 2+n; i++ {
		s.send(acquireReq(i, &tollgatev1.AcquireRequest{Pool: "db"}))
	}
	testwait.For(t, "the acquires to wait", func() bool { return e.status("db").GetWaiting() == n })
	if grew := runtime.NumGoroutine() - before; grew > n/10 {
		t.Fatalf("%d waiting acquires added %d goroutines", n, grew)
	}
	s.send(cancelReq(2+n, 2))
	wantSessionError(t, s.next(), codes.Canceled, apierr.ReasonCanceled)
	s.cancel()
	testwait.For(t, "the waiters to go", func() bool { return e.status("db").GetWaiting() == 0 })
	if st := e.status("db"); st.GetHeld() != 1 || st.GetCanceled() != n {
		t.Fatalf("status = %v", st)
	}
}

// Takes waiting for their tokens are records too: a thousand of them add
// no goroutine per take, are answered as the engine clock brings their
// tokens, and end with the stream.
func TestSessionTakesHoldNoGoroutine(t *testing.T) {
	e := newEnv(t)
	e.createPool(&tollgatev1.Pool{Name: "api", Rate: 10, Burst: 1, MaxWaiters: 2000})
	s := e.session()
	if r := s.call(takeReq(1, &tollgatev1.TakeRequest{Pool: "api"})); r.GetTake().GetTokens() != 1 {
		t.Fatalf("first take = %v", r)
	}
	before := runtime.NumGoroutine()
	const n = 1000
	for i := uint64(2); i < 2+n; i++ {
		s.send(takeReq(i, &tollgatev1.TakeRequest{Pool: "api", MaxWait: dur(time.Hour)}))
	}
	testwait.For(t, "the takes to wait", func() bool { return e.srv.quotas.Waiters() == n })
	if grew := runtime.NumGoroutine() - before; grew > n/10 {
		t.Fatalf("%d waiting takes added %d goroutines", n, grew)
	}
	s.send(cancelReq(2+n, 2))
	wantSessionError(t, s.next(), codes.Canceled, apierr.ReasonCanceled)
	e.clock.Advance(200 * time.Millisecond) // take 3's token
	if r := s.next(); r.GetRequestId() != 3 || r.GetTake().GetTokens() != 1 || r.GetTake().GetWaited().AsDuration() != 200*time.Millisecond {
		t.Fatalf("got %v, want take 3 granted after 200ms", r)
	}
	s.cancel()
	testwait.For(t, "the waits to go", func() bool { return e.srv.quotas.Waiters() == 0 })
	if st := e.status("api"); st.GetCanceled() != n-1 {
		t.Fatalf("status = %v, want %d takes cancelled", st, n-1)
	}
}
