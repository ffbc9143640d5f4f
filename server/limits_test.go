package server

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tollgate/tollgate/internal/limits"
	"github.com/tollgate/tollgate/internal/testwait"
	"github.com/tollgate/tollgate/limiter/fakeclock"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

func TestMaxPools(t *testing.T) {
	o := startOps(t, Config{Limits: limits.Limits{MaxPools: 2}}, nil)
	e := o.env()
	e.createPool(&tollgatev1.Pool{Name: "a", ConcurrencyLimit: 1})
	e.createPool(&tollgatev1.Pool{Name: "b", ConcurrencyLimit: 1})
	_, err := e.adm.CreatePool(e.ctx(), &tollgatev1.CreatePoolRequest{Pool: &tollgatev1.Pool{Name: "c", ConcurrencyLimit: 1}})
	wantRefusal(t, err, codes.ResourceExhausted, "TOO_MANY_POOLS", "--max-pools", "2 pools")
	if _, err := e.adm.DeletePool(e.ctx(), &tollgatev1.DeletePoolRequest{Name: "a"}); err != nil {
		t.Fatal(err)
	}
	e.createPool(&tollgatev1.Pool{Name: "c", ConcurrencyLimit: 1})
}

// A client that floods the server with acquires gets at most
// MaxClientLeases leases and waits, the server never has more than
// MaxWaiters acquires in progress, and another client still gets its
// grant.
func TestWaiterFloodIsBounded(t *testing.T) {
	const perClient, serverWide = 20, 30
	o := startOps(t, Config{Limits: limits.Limits{MaxClientLeases: perClient, MaxWaiters: serverWide}}, nil)
	e := o.env()
	e.createPool(&tollgatev1.Pool{Name: "shared", ConcurrencyLimit: 25})
	e.createPool(&tollgatev1.Pool{Name: "busy", ConcurrencyLimit: 1})
	e.acquire(&tollgatev1.AcquireRequest{Pool: "busy", ClientId: "holder"})

	// The flooder asks for 100 leases of "busy": 20 wait, and the other
	// 80 are refused at once, naming the limit. Then its requests for
	// "shared", which has room, are refused too.
	flood := e.session()
	flood.call(&tollgatev1.SessionRequest{RequestId: 1, Kind: &tollgatev1.SessionRequest_Hello{Hello: &tollgatev1.Hello{ClientId: "flooder"}}})
	wantLimit := func(r *tollgatev1.SessionResponse) {
		t.Helper()
		wantSessionError(t, r, codes.ResourceExhausted, ReasonClientLeaseLimit)
		if !strings.Contains(r.GetError().GetMessage(), "--max-client-leases") {
			t.Fatalf("refusal %q does not name the flag", r.GetError().GetMessage())
		}
	}
	for i := range uint64(100) {
		flood.send(acquireReq(10+i, &tollgatev1.AcquireRequest{Pool: "busy"}))
	}
	for range 100 - perClient {
		wantLimit(flood.next())
	}
	testwait.For(t, "the flooder's waits to queue", func() bool { return e.status("busy").GetWaiting() == perClient })
	for i := range uint64(10) {
		wantLimit(flood.call(acquireReq(200+i, &tollgatev1.AcquireRequest{Pool: "shared"})))
	}
	if n := o.srv.quotas.ClientLeases("client:flooder"); n != perClient {
		t.Fatalf("flooder holds or waits for %d, want %d", n, perClient)
	}

	// Another client (on its own connection: the flooder's connection
	// waits as much as the flooder) still gets its grant at once, and may
	// queue too, up to the server-wide bound: 30 acquires in progress at
	// most.
	oe := o.env()
	oe.acquire(&tollgatev1.AcquireRequest{Pool: "shared", ClientId: "other"})
	other := oe.session()
	other.call(&tollgatev1.SessionRequest{RequestId: 1, Kind: &tollgatev1.SessionRequest_Hello{Hello: &tollgatev1.Hello{ClientId: "other"}}})
	for i := range uint64(15) {
		other.send(acquireReq(100+i, &tollgatev1.AcquireRequest{Pool: "busy"}))
	}
	for range 15 - (serverWide - perClient) {
		r := other.next()
		wantSessionError(t, r, codes.ResourceExhausted, ReasonTooManyWaiters)
		if !strings.Contains(r.GetError().GetMessage(), "--max-waiters") {
			t.Fatalf("refusal %q does not name the flag", r.GetError().GetMessage())
		}
	}
	testwait.For(t, "the other client's waits to queue", func() bool { return e.status("busy").GetWaiting() == serverWide })
	if w := o.srv.quotas.Waiters(); w != serverWide {
		t.Fatalf("%d acquires in progress, want the bound %d", w, serverWide)
	}

	// Ending the flooder's stream cancels its waits, and it counts for
	// nothing any more.
	flood.cancel()
	testwait.For(t, "the flooder's waits to end", func() bool { return o.srv.quotas.ClientLeases("client:flooder") == 0 })
	testwait.For(t, "the server-wide count to drop", func() bool { return o.srv.quotas.Waiters() == serverWide-perClient })
}

func TestMaxClientSessions(t *testing.T) {
	o := startOps(t, Config{Limits: limits.Limits{MaxClientSessions: 2}}, nil)
	e := o.env()
	hello := &tollgatev1.SessionRequest{RequestId: 1, Kind: &tollgatev1.SessionRequest_Hello{Hello: &tollgatev1.Hello{ClientId: "c"}}}
	s1, s2 := e.session(), e.session()
	s1.call(hello)
	s2.call(hello)
	s3 := e.session()
	wantRefusal(t, s3.wantEnd(), codes.ResourceExhausted, "CLIENT_SESSION_LIMIT", "--max-client-sessions", "127.0.0.1")
	s1.cancel()
	testwait.For(t, "the closed stream to stop counting", func() bool {
		sessions := o.srv.quotas.Sessions()
		for k, n := range sessions {
			return len(sessions) == 1 && n == 1 && strings.HasPrefix(k, "conn:127.0.0.1:")
		}
		return false
	})
	e.session().call(hello)
}

func TestClientRate(t *testing.T) {
	o := startOps(t, Config{Limits: limits.Limits{ClientRate: 1, ClientBurst: 3}}, nil)
	rateClock := fakeclock.New(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	o.srv.quotas.SetRateClock(rateClock.Now)
	e := o.env()
	e.createPool(&tollgatev1.Pool{Name: "db", ConcurrencyLimit: 5})
	l := e.acquire(&tollgatev1.AcquireRequest{Pool: "db"})
	e.status("db")
	_, err := e.lim.Acquire(e.ctx(), &tollgatev1.AcquireRequest{Pool: "db"})
	wantRefusal(t, err, codes.ResourceExhausted, "CLIENT_RATE_LIMITED", "--client-rate", "the connection from 127.0.0.1:")
	if d, ok := retryDelay(err); !ok || d != time.Second {
		t.Errorf("retry delay = %v, %v; want 1s", d, ok)
	}
	// Releases are never refused: they give capacity back.
	if _, err := e.lim.Release(e.ctx(), &tollgatev1.ReleaseRequest{Pool: "db", LeaseId: l.GetId()}); err != nil {
		t.Fatal(err)
	}
	// Opening a stream counts as a request, and so does each request on it
	// but releases and cancels.
	wantRefusal(t, e.session().wantEnd(), codes.ResourceExhausted, "CLIENT_RATE_LIMITED")
	rateClock.Advance(time.Second)
	s := e.session()
	r := s.call(acquireReq(1, &tollgatev1.AcquireRequest{Pool: "db"}))
	wantSessionError(t, r, codes.ResourceExhausted, ReasonClientRateLimited)
	rateClock.Advance(time.Second)
	if r := s.call(acquireReq(2, &tollgatev1.AcquireRequest{Pool: "db"})); r.GetAcquire() == nil {
		t.Fatalf("acquire after a second = %v", r)
	}
}

func TestMaxRecvMsgSize(t *testing.T) {
	o := startOps(t, Config{Limits: limits.Limits{MaxRecvMsgSize: 4096}}, nil)
	e := o.env()
	_, err := e.adm.CreatePool(e.ctx(), &tollgatev1.CreatePoolRequest{Pool: &tollgatev1.Pool{Name: "db", ConcurrencyLimit: 1, Description: strings.Repeat("x", 8192)}})
	if code := status.Code(err); code != codes.ResourceExhausted {
		t.Fatalf("oversized message: %v, want RESOURCE_EXHAUSTED", err)
	}
}

// Leases stop counting against their client however they end.
func TestClientLeaseAccounting(t *testing.T) {
	o := startOps(t, Config{}, nil)
	e := o.env()
	e.createPool(&tollgatev1.Pool{Name: "db", ConcurrencyLimit: 5})
	key := "client:c"
	count := func() int64 { return o.srv.quotas.ClientLeases(key) }

	l := e.acquire(&tollgatev1.AcquireRequest{Pool: "db", ClientId: "c"})
	if count() != 1 {
		t.Fatalf("count after acquire = %d", count())
	}
	if _, err := e.lim.Release(e.ctx(), &tollgatev1.ReleaseRequest{Pool: "db", LeaseId: l.GetId()}); err != nil {
		t.Fatal(err)
	}
	if count() != 0 {
		t.Fatalf("count after release = %d", count())
	}

	e.acquire(&tollgatev1.AcquireRequest{Pool: "db", ClientId: "c", Ttl: dur(time.Second)})
	o.clock.Advance(2 * time.Second)
	testwait.For(t, "the expiry to stop counting", func() bool { return count() == 0 })

	e.acquire(&tollgatev1.AcquireRequest{Pool: "db", ClientId: "c"})
	if _, err := e.adm.DeletePool(e.ctx(), &tollgatev1.DeletePoolRequest{Name: "db", Force: true}); err != nil {
		t.Fatal(err)
	}
	if count() != 0 {
		t.Fatalf("count after a forced delete = %d", count())
	}

	// An acquire that fails does not count.
	if _, err := e.lim.Acquire(e.ctx(), &tollgatev1.AcquireRequest{Pool: "db", ClientId: "c"}); err == nil {
		t.Fatal("acquire from a deleted pool succeeded")
	}
	if clients, leases := o.srv.quotas.Counted(); len(clients) != 0 || len(leases) != 0 {
		t.Fatalf("quotas keep %v and %v after every lease ended", clients, leases)
	}
}

// A provider's offers count toward its caller's request rate: past it,
// an offer is answered RESOURCE_EXHAUSTED and the stream goes on; its
// keep-alives are exempt.
func TestProviderOffersAreRateLimited(t *testing.T) {
	o := startOps(t, Config{Limits: limits.Limits{ClientRate: 1, ClientBurst: 2}}, nil)
	rateClock := fakeclock.New(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	o.srv.quotas.SetRateClock(rateClock.Now)
	e := o.env()
	if _, err := e.adm.CreatePool(e.ctx(), &tollgatev1.CreatePoolRequest{Pool: &tollgatev1.Pool{Name: "gpu", ResourceKind: tollgatev1.ResourceKind_RESOURCE_KIND_PASSIVE}}); err != nil {
		t.Fatal(err)
	}
	ps, err := e.lim.Provide(e.ctx())
	if err != nil {
		t.Fatal(err)
	}
	send := func(m *tollgatev1.ProvideRequest) *tollgatev1.ProvideResponse {
		t.Helper()
		if err := ps.Send(m); err != nil {
			t.Fatal(err)
		}
		r, err := ps.Recv()
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	send(&tollgatev1.ProvideRequest{Kind: &tollgatev1.ProvideRequest_Register{Register: &tollgatev1.ProvideRegister{Pool: "gpu", ProviderId: "w"}}})
	offer := func(id string) *tollgatev1.ProvideRequest {
		return &tollgatev1.ProvideRequest{Kind: &tollgatev1.ProvideRequest_Offer{Offer: &tollgatev1.ProvideOffer{Resources: wireRes(id)}}}
	}
	var refused *tollgatev1.ProvideResponse
	for i := range 5 {
		if r := send(offer("s" + strconv.Itoa(i))); r.GetError() != nil {
			refused = r
			break
		}
	}
	if refused == nil || refused.GetError().GetCode() != int32(codes.ResourceExhausted) || refused.GetError().GetReason() != "CLIENT_RATE_LIMITED" {
		t.Fatalf("offers past the rate: %v", refused)
	}
	if r := send(&tollgatev1.ProvideRequest{Kind: &tollgatev1.ProvideRequest_KeepAlive{KeepAlive: &tollgatev1.ProvideKeepAlive{}}}); r.GetError() != nil {
		t.Fatalf("a keep-alive was refused: %v", r.GetError())
	}
}
