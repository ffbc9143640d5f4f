package server

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/tollgate/tollgate/internal/limits"
	"github.com/tollgate/tollgate/internal/testwait"
	"github.com/tollgate/tollgate/limiter/fakeclock"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// Shutdown fails waiting unary acquires and takes at once with
// UNAVAILABLE (SHUTTING_DOWN), not after the shutdown timeout.
func TestShutdownFailsWaitersAtOnce(t *testing.T) {
	e, stop, done := startStoppable(t, time.Minute)
	srv, lim := e.srv, e.lim
	e.createPool(&tollgatev1.Pool{Name: "db", ConcurrencyLimit: 1})
	e.createPool(&tollgatev1.Pool{Name: "api", Rate: 1, Burst: 1})
	e.acquire(&tollgatev1.AcquireRequest{Pool: "db"})
	if _, err := lim.Take(e.ctx(), &tollgatev1.TakeRequest{Pool: "api"}); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 2)
	go func() {
		_, err := lim.Acquire(context.Background(), &tollgatev1.AcquireRequest{Pool: "db"})
		errs <- err
	}()
	go func() {
		_, err := lim.Take(context.Background(), &tollgatev1.TakeRequest{Pool: "api", MaxWait: dur(time.Hour)})
		errs <- err
	}()
	testwait.For(t, "the acquire and take to wait", func() bool { return srv.quotas.Waiters() == 2 })
	stop()
	for range 2 {
		select {
		case err := <-errs:
			wantStatus(t, err, codes.Unavailable, apierr.ReasonShuttingDown)
		case <-time.After(waitLimit):
			t.Fatal("a waiting call was not failed when shutdown started")
		}
	}
	if err := <-done; err != nil {
		t.Fatalf("Serve = %v", err)
	}
}

// rawCodec sends and receives frames as given bytes.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *v.(*[]byte), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*v.(*[]byte) = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

// A request frame that is not protobuf, or that carries a string that is
// not UTF-8, gets INVALID_ARGUMENT naming the method, on unary calls and
// on the Session stream.
func TestMalformedFramesAreInvalidArgument(t *testing.T) {
	e := newEnv(t)
	frames := map[string][2][]byte{ // an Acquire request, a Session request
		"not protobuf":  {{0xff, 0xff, 0xff}, {0xff, 0xff, 0xff}},
		"invalid UTF-8": {{0x0a, 0x01, 0xff}, {0x1a, 0x03, 0x0a, 0x01, 0xff}}, // pool, acquire.pool
	}
	for name, f := range frames {
		unary, stream := f[0], f[1]
		t.Run(name, func(t *testing.T) {
			method := limiterServicePrefix + "Acquire"
			var reply []byte
			err := e.conn.Invoke(e.ctx(), method, &unary, &reply, grpc.ForceCodec(rawCodec{}))
			st := wantStatus(t, err, codes.InvalidArgument, apierr.ReasonInvalidArgument)
			if !strings.Contains(st.Message(), method) {
				t.Errorf("message %q does not name %s", st.Message(), method)
			}
			desc := &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}
			cs, err := e.conn.NewStream(e.ctx(), desc, sessionMethod, grpc.ForceCodec(rawCodec{}))
			if err != nil {
				t.Fatal(err)
			}
			if err := cs.SendMsg(&stream); err != nil {
				t.Fatal(err)
			}
			st = wantStatus(t, cs.RecvMsg(&reply), codes.InvalidArgument, apierr.ReasonInvalidArgument)
			if !strings.Contains(st.Message(), sessionMethod) {
				t.Errorf("message %q does not name %s", st.Message(), sessionMethod)
			}
		})
	}
	// The server still decodes good frames.
	e.createPool(&tollgatev1.Pool{Name: "db", ConcurrencyLimit: 1})
	e.acquire(&tollgatev1.AcquireRequest{Pool: "db"})
}

// Without authentication, per-client limits key on the connection: one
// connection that uses up its Session streams and its request rate leaves
// another connection from the same host unaffected.
func TestUnnamedClientsAreKeyedByConnection(t *testing.T) {
	o := startOps(t, Config{Limits: limits.Limits{MaxClientSessions: 1, ClientRate: 1, ClientBurst: 3}}, nil)
	rateClock := fakeclock.New(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	o.srv.quotas.SetRateClock(rateClock.Now)
	greedy, honest := o.env(), o.env()
	greedy.session().call(&tollgatev1.SessionRequest{RequestId: 1, Kind: &tollgatev1.SessionRequest_Hello{Hello: &tollgatev1.Hello{ClientId: "g"}}})
	wantStatus(t, greedy.session().wantEnd(), codes.ResourceExhausted, ReasonClientSessionLimit)
	_, err := greedy.lim.Take(greedy.ctx(), &tollgatev1.TakeRequest{Pool: "none"})
	wantStatus(t, err, codes.ResourceExhausted, ReasonClientRateLimited)

	s := honest.session()
	r := s.call(&tollgatev1.SessionRequest{RequestId: 1, Kind: &tollgatev1.SessionRequest_Hello{Hello: &tollgatev1.Hello{ClientId: "c"}}})
	if r.GetWelcome() == nil {
		t.Fatalf("the honest connection's hello got %v", r)
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// A call with more metadata than Limits.MaxHeaderListSize is refused; one
// within it is served.
func TestMaxHeaderListSize(t *testing.T) {
	o := startOps(t, Config{Limits: limits.Limits{MaxHeaderListSize: 8 << 10}}, nil)
	e := o.env()
	e.createPool(&tollgatev1.Pool{Name: "db", ConcurrencyLimit: 10})
	big := metadata.AppendToOutgoingContext(e.ctx(), "x-junk", strings.Repeat("a", 16<<10))
	if _, err := e.lim.Acquire(big, &tollgatev1.AcquireRequest{Pool: "db"}); err == nil {
		t.Fatal("a call with 16 KiB of metadata was served with an 8 KiB limit")
	}
	small := metadata.AppendToOutgoingContext(e.ctx(), "x-junk", strings.Repeat("a", 4<<10))
	if _, err := e.lim.Acquire(small, &tollgatev1.AcquireRequest{Pool: "db"}); err != nil {
		t.Fatal(err)
	}
}

// Takes waiting for tokens count toward their client's limit and their
// pool's max_waiters, and a max_wait past Limits.MaxTakeWait is refused
// when the wait would pass that cap.
func TestTakeWaitersAreBounded(t *testing.T) {
	o := startOps(t, Config{Limits: limits.Limits{MaxClientLeases: 2, MaxTakeWait: time.Hour}}, nil)
	a, b := o.env(), o.env()
	a.createPool(&tollgatev1.Pool{Name: "api", Rate: 1, Burst: 1, MaxWaiters: 3})
	a.createPool(&tollgatev1.Pool{Name: "slow", Rate: 1.0 / 7200, Burst: 1})
	take := func(e *env, pool string) <-chan error {
		errc := make(chan error, 1)
		go func() {
			_, err := e.lim.Take(e.ctx(), &tollgatev1.TakeRequest{Pool: pool, MaxWait: dur(24 * time.Hour)})
			errc <- err
		}()
		return errc
	}
	if err := <-take(a, "api"); err != nil {
		t.Fatal(err)
	}
	take(a, "api")
	take(a, "api")
	testwait.For(t, "two takes to wait", func() bool { return o.srv.quotas.Waiters() == 2 })
	wantStatus(t, <-take(a, "api"), codes.ResourceExhausted, ReasonClientLeaseLimit)
	take(b, "api")
	testwait.For(t, "the other client's take to wait", func() bool { return o.srv.quotas.Waiters() == 3 })
	wantStatus(t, <-take(b, "api"), codes.ResourceExhausted, apierr.ReasonQueueFull)

	if err := <-take(b, "slow"); err != nil {
		t.Fatal(err)
	}
	_, err := b.lim.Take(context.Background(), &tollgatev1.TakeRequest{Pool: "slow", MaxWait: dur(24 * time.Hour)})
	st := wantStatus(t, err, codes.ResourceExhausted, apierr.ReasonRateLimited)
	if !strings.Contains(st.Message(), "--max-take-wait") {
		t.Errorf("message %q does not name --max-take-wait", st.Message())
	}
}

// A Session client that sends without reading has its stream ended with
// RESOURCE_EXHAUSTED (SESSION_OVERFLOW) once MaxSessionUnread answers wait
// for it, instead of the server holding a goroutine or a blocked reader
// per request.
func TestSessionUnreadAnswersAreBounded(t *testing.T) {
	// A fixed window: grpc-go's default grows it to megabytes.
	fc := fakeclock.New(testStart)
	srv := New(Config{Clock: fc})
	srv.sessions.MaxUnread = 64
	e := startEnv(t, srv, fc, grpc.WithInitialWindowSize(1<<16), grpc.WithInitialConnWindowSize(1<<16))
	stream, err := e.lim.Session(e.ctx())
	if err != nil {
		t.Fatal(err)
	}
	for i := range uint64(2000) {
		if err := stream.Send(releaseReq(i+1, "db", "not-a-lease-id")); err != nil {
			break // the server ended the stream
		}
	}
	for {
		if _, err = stream.Recv(); err != nil {
			break
		}
	}
	wantStatus(t, err, codes.ResourceExhausted, ReasonSessionOverflow)
}

// ListResources pages like ListLeases: every instance once, in id order,
// the providers on the first page, and a bad token refused.
func TestListResourcesPages(t *testing.T) {
	e := newEnv(t)
	e.createPool(&tollgatev1.Pool{Name: "db", ResourceKind: tollgatev1.ResourceKind_RESOURCE_KIND_ACTIVE})
	var ids []string
	for i := range 25 {
		ids = append(ids, fmt.Sprintf("conn-%02d", i))
	}
	if _, err := e.adm.AddResources(e.ctx(), &tollgatev1.AddResourcesRequest{Pool: "db", Resources: wireRes(ids...)}); err != nil {
		t.Fatal(err)
	}
	var got []string
	req := &tollgatev1.ListResourcesRequest{Pool: "db", PageSize: 10}
	for pages := 1; ; pages++ {
		resp, err := e.adm.ListResources(e.ctx(), req)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.GetResources()) > 10 {
			t.Fatalf("page %d has %d instances, more than page_size 10", pages, len(resp.GetResources()))
		}
		for _, r := range resp.GetResources() {
			got = append(got, r.GetResource().GetId())
		}
		if resp.GetNextPageToken() == "" {
			if pages != 3 {
				t.Errorf("%d pages, want 3", pages)
			}
			break
		}
		req.PageToken = resp.GetNextPageToken()
	}
	if !slices.Equal(got, ids) {
		t.Fatalf("listed %v, want %v", got, ids)
	}
	_, err := e.adm.ListResources(e.ctx(), &tollgatev1.ListResourcesRequest{Pool: "db", PageToken: "garbage"})
	wantStatus(t, err, codes.InvalidArgument, apierr.ReasonInvalidArgument)
}

// An unauthenticated caller that gives each acquire its own client_id
// still cannot wait on more than Limits.MaxClientLeases acquires from one
// connection, so it cannot fill the server's queues.
func TestAcquireWaitsCountPerConnection(t *testing.T) {
	o := startOps(t, Config{Limits: limits.Limits{MaxClientLeases: 2}}, nil)
	greedy, honest := o.env(), o.env()
	greedy.createPool(&tollgatev1.Pool{Name: "db", ConcurrencyLimit: 1})
	greedy.acquire(&tollgatev1.AcquireRequest{Pool: "db", ClientId: "held"})
	for i := range 2 {
		go func() {
			_, _ = greedy.lim.Acquire(greedy.ctx(), &tollgatev1.AcquireRequest{Pool: "db", ClientId: fmt.Sprint("c", i)})
		}() // waits until the test ends
	}
	testwait.For(t, "two acquires to wait", func() bool { return o.srv.quotas.Waiters() == 2 })
	_, err := greedy.lim.Acquire(greedy.ctx(), &tollgatev1.AcquireRequest{Pool: "db", ClientId: "c2"})
	wantStatus(t, err, codes.ResourceExhausted, ReasonClientLeaseLimit)
	go func() { _, _ = honest.lim.Acquire(honest.ctx(), &tollgatev1.AcquireRequest{Pool: "db", ClientId: "h"}) }() // waits until the test ends
	testwait.For(t, "the other connection's acquire to wait", func() bool { return o.srv.quotas.Waiters() == 3 })
}
