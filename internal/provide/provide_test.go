package provide

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/limits"
	"github.com/tollgate/tollgate/internal/term"
	"github.com/tollgate/tollgate/internal/testwait"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/limiter/fakeclock"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// fakeHost is a Host of one term; its drain and its term end when the
// test closes or ends them.
type fakeHost struct {
	draining chan struct{}
	term     *term.Term
}

func (h *fakeHost) Draining() <-chan struct{}       { return h.draining }
func (h *fakeHost) Term(string) (*term.Term, error) { return h.term, nil }
func (h *fakeHost) NotLeader(string) error          { return status.Error(codes.Unavailable, "not the leader") }

// fakeStream is a Provide stream: the test sends the provider's messages
// on in (closing it is the provider's CloseSend), reads the answers from
// out, and cancels ctx to lose the connection.
type fakeStream struct {
	grpc.ServerStream
	ctx context.Context
	in  chan *tollgatev1.ProvideRequest
	out chan *tollgatev1.ProvideResponse
}

func (s *fakeStream) Context() context.Context { return s.ctx }

func (s *fakeStream) Recv() (*tollgatev1.ProvideRequest, error) {
	select {
	case m, ok := <-s.in:
		if !ok {
			return nil, io.EOF
		}
		return m, nil
	case <-s.ctx.Done():
		return nil, s.ctx.Err()
	}
}

func (s *fakeStream) Send(m *tollgatev1.ProvideResponse) error {
	select {
	case s.out <- m:
		return nil
	case <-s.ctx.Done():
		return s.ctx.Err()
	}
}

type fixture struct {
	t      *testing.T
	clk    *fakeclock.Clock
	engine *limiter.Engine
	host   *fakeHost
	s      *Streams
}

func newFixture(t *testing.T, clientRate float64) *fixture {
	t.Helper()
	f := &fixture{t: t, clk: fakeclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)),
		host: &fakeHost{draining: make(chan struct{})}}
	f.engine = limiter.New(limiter.Options{Clock: f.clk, OnPoolEvent: ProviderLeft})
	t.Cleanup(f.engine.Close)
	tm, err := term.New(0, nil, func(func() bool) (*limiter.Engine, error) { return f.engine, nil })
	if err != nil {
		t.Fatal(err)
	}
	tm.Begin()
	f.host.term = tm
	if _, err := f.engine.CreatePool(limiter.PoolConfig{Name: "gpu", ResourceKind: limiter.ResourcePassive}); err != nil {
		t.Fatal(err)
	}
	a := auth.New(nil)
	f.s = &Streams{Host: f.host, Auth: func() *auth.Authorizer { return a },
		Quotas: limits.New(limits.Limits{ClientRate: clientRate, ClientBurst: 1}), Log: slog.New(slog.DiscardHandler)}
	return f
}

// open starts serving a stream and returns it and the channel of Serve's
// result.
func (f *fixture) open() (*fakeStream, context.CancelFunc, <-chan error) {
	ctx, cancel := context.WithCancel(context.Background())
	f.t.Cleanup(cancel)
	st := &fakeStream{ctx: ctx, in: make(chan *tollgatev1.ProvideRequest), out: make(chan *tollgatev1.ProvideResponse)}
	done := make(chan error, 1)
	go func() { done <- f.s.Serve(st) }()
	return st, cancel, done
}

func register(id string, ttl time.Duration, slots ...string) *tollgatev1.ProvideRequest {
	return &tollgatev1.ProvideRequest{RequestId: 1, Kind: &tollgatev1.ProvideRequest_Register{Register: &tollgatev1.ProvideRegister{
		Pool: "gpu", ProviderId: id, Ttl: durationpb.New(ttl), Resources: resources(slots...)}}}
}

func resources(ids ...string) []*tollgatev1.Resource {
	rs := make([]*tollgatev1.Resource, len(ids))
	for i, id := range ids {
		rs[i] = &tollgatev1.Resource{Id: id}
	}
	return rs
}

func (f *fixture) call(st *fakeStream, m *tollgatev1.ProvideRequest) *tollgatev1.ProvideResponse {
	f.t.Helper()
	select {
	case st.in <- m:
	case <-time.After(testwait.Limit):
		f.t.Fatalf("the stream did not read %v", m)
	}
	select {
	case r := <-st.out:
		return r
	case <-time.After(testwait.Limit):
		f.t.Fatalf("no answer to %v", m)
	}
	return nil
}

func (f *fixture) ended(done <-chan error) error {
	f.t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(testwait.Limit):
		f.t.Fatal("the stream did not end")
	}
	return nil
}

func (f *fixture) providers() int64 {
	info, err := f.engine.GetPool("gpu")
	if err != nil {
		f.t.Fatal(err)
	}
	return info.Status.Providers
}

func wantCode(t *testing.T, err error, code codes.Code) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("stream ended with %v; want %v", err, code)
	}
}

func TestProviderLivesAsLongAsItsStream(t *testing.T) {
	f := newFixture(t, 0)
	st, _, done := f.open()
	r := f.call(st, register("w1", time.Minute, "s1", "s2"))
	if r.GetRequestId() != 1 || r.GetProvider().GetId() != "w1" || r.GetProvider().GetResources() != 2 {
		t.Fatalf("answer to register: %v", r)
	}
	r = f.call(st, &tollgatev1.ProvideRequest{RequestId: 2, Kind: &tollgatev1.ProvideRequest_Offer{Offer: &tollgatev1.ProvideOffer{Resources: resources("s3")}}})
	if r.GetRequestId() != 2 || r.GetError() != nil || r.GetProvider().GetResources() != 3 {
		t.Fatalf("answer to offer: %v", r)
	}
	r = f.call(st, &tollgatev1.ProvideRequest{RequestId: 3, Kind: &tollgatev1.ProvideRequest_Withdraw{Withdraw: &tollgatev1.ProvideWithdraw{Ids: []string{"s1"}}}})
	if r.GetRemoved() != 1 || r.GetProvider().GetResources() != 2 {
		t.Fatalf("answer to withdraw: %v", r)
	}
	// Mistakes are answered on the stream, which goes on.
	for _, m := range []*tollgatev1.ProvideRequest{register("w2", time.Minute), {RequestId: 4}} {
		r = f.call(st, m)
		if r.GetError().GetCode() != int32(codes.InvalidArgument) || r.GetError().GetMessage() == "" || r.GetProvider().GetId() != "w1" {
			t.Fatalf("answer to %v: %v", m, r)
		}
	}
	if r = f.call(st, &tollgatev1.ProvideRequest{Kind: &tollgatev1.ProvideRequest_KeepAlive{KeepAlive: &tollgatev1.ProvideKeepAlive{}}}); r.GetError() != nil {
		t.Fatalf("answer to keep-alive: %v", r)
	}
	if n := f.providers(); n != 1 {
		t.Fatalf("%d providers while the stream is open", n)
	}
	close(st.in)
	if err := f.ended(done); err != nil {
		t.Fatalf("a stream the provider closed ended with %v", err)
	}
	if n := f.providers(); n != 0 {
		t.Fatalf("%d providers after the stream closed; want it gone with its stream", n)
	}
}

func TestFirstMessageMustRegister(t *testing.T) {
	f := newFixture(t, 0)
	st, _, done := f.open()
	st.in <- &tollgatev1.ProvideRequest{Kind: &tollgatev1.ProvideRequest_KeepAlive{KeepAlive: &tollgatev1.ProvideKeepAlive{}}}
	wantCode(t, f.ended(done), codes.InvalidArgument)

	st, _, done = f.open()
	st.in <- &tollgatev1.ProvideRequest{Kind: &tollgatev1.ProvideRequest_Register{Register: &tollgatev1.ProvideRegister{Pool: "nope", ProviderId: "w1"}}}
	wantCode(t, f.ended(done), codes.NotFound)

	st, _, done = f.open()
	close(st.in)
	if err := f.ended(done); err != nil {
		t.Fatalf("a stream closed before registering ended with %v", err)
	}
}

func TestLostConnectionTakesTheProviderAway(t *testing.T) {
	f := newFixture(t, 0)
	st, cancel, done := f.open()
	f.call(st, register("w1", time.Minute, "s1"))
	cancel()
	if err := f.ended(done); !errors.Is(err, context.Canceled) {
		t.Fatalf("stream ended with %v; want the connection's end", err)
	}
	if n := f.providers(); n != 0 {
		t.Fatalf("%d providers after the connection was lost", n)
	}
}

func TestShutdownAndTermEndKeepTheProvider(t *testing.T) {
	for name, end := range map[string]func(*fakeHost){
		"drain":    func(h *fakeHost) { close(h.draining) },
		"term end": func(h *fakeHost) { h.term.End() },
	} {
		f := newFixture(t, 0)
		st, _, done := f.open()
		f.call(st, register("w1", time.Minute, "s1"))
		end(f.host)
		wantCode(t, f.ended(done), codes.Unavailable)
		if n := f.providers(); n != 1 {
			t.Fatalf("%s: %d providers; want the provider kept for the leases on its instances", name, n)
		}
	}
}

func TestExpiredProviderEndsItsStream(t *testing.T) {
	f := newFixture(t, 0)
	st, _, done := f.open()
	f.call(st, register("w1", time.Second, "s1"))
	f.clk.Advance(2 * time.Second)
	wantCode(t, f.ended(done), codes.DeadlineExceeded)
}

func TestOffersCountTowardTheRateButKeepAlivesDoNot(t *testing.T) {
	f := newFixture(t, 1) // one request per second, burst 1
	f.s.Quotas.SetRateClock(f.clk.Now)
	st, _, _ := f.open()
	f.call(st, register("w1", time.Minute))
	offer := func(id string) *tollgatev1.ProvideResponse {
		return f.call(st, &tollgatev1.ProvideRequest{Kind: &tollgatev1.ProvideRequest_Offer{Offer: &tollgatev1.ProvideOffer{Resources: resources(id)}}})
	}
	if r := offer("s1"); r.GetError() != nil {
		t.Fatalf("first offer: %v", r.GetError())
	}
	r := offer("s2")
	if r.GetError().GetCode() != int32(codes.ResourceExhausted) || r.GetError().GetReason() != string(apierr.ReasonClientRateLimited) || r.GetProvider().GetResources() != 1 {
		t.Fatalf("second offer within the second: %v", r)
	}
	for range 3 {
		if r := f.call(st, &tollgatev1.ProvideRequest{Kind: &tollgatev1.ProvideRequest_KeepAlive{KeepAlive: &tollgatev1.ProvideKeepAlive{}}}); r.GetError() != nil {
			t.Fatalf("keep-alive refused: %v", r.GetError())
		}
	}
}
