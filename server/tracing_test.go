package server

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	grpccodes "google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/tollgate/tollgate/internal/testwait"
	"github.com/tollgate/tollgate/internal/tracing"
	"github.com/tollgate/tollgate/limiter/fakeclock"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// newTracedEnv starts a server whose spans go to the returned recorder.
func newTracedEnv(t *testing.T) (*env, *tracetest.SpanRecorder) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	fc := fakeclock.New(testStart)
	srv := New(Config{Clock: fc, ShutdownTimeout: 2 * time.Second, TracerProvider: tp})
	return startEnv(t, srv, fc), rec
}

// callerSpan starts a span of a caller's own tracer and returns its context
// and the W3C fields that carry it.
func callerSpan(t *testing.T) (context.Context, trace.SpanContext, map[string]string) {
	t.Helper()
	tp := sdktrace.NewTracerProvider()
	ctx, span := tp.Tracer("caller").Start(context.Background(), "caller")
	t.Cleanup(func() { span.End() })
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	if carrier["traceparent"] == "" {
		t.Fatal("the caller's span has no traceparent")
	}
	return ctx, span.SpanContext(), carrier
}

// spansNamed returns the ended spans called name.
func spansNamed(rec *tracetest.SpanRecorder, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// attrs returns a span's attributes by key.
func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

// TestTracingSessionAcquireUnderCallersTrace: an acquire on a Session
// stream, whose metadata belongs to the stream, is recorded under the trace
// its request's trace_context names, with the pool, weight, outcome and
// fencing token.
func TestTracingSessionAcquireUnderCallersTrace(t *testing.T) {
	e, rec := newTracedEnv(t)
	e.createPool(&tollgatev1.Pool{Name: "db", ConcurrencyLimit: 2})
	_, caller, carrier := callerSpan(t)

	s := e.session()
	r := s.call(acquireReq(1, &tollgatev1.AcquireRequest{Pool: "db", Weight: i64(2), TraceContext: carrier}))
	lease := r.GetAcquire().GetLease()
	if lease == nil {
		t.Fatalf("acquire on the stream: %v", r)
	}
	r = s.call(acquireReq(2, &tollgatev1.AcquireRequest{Pool: "db", NoWait: true, TraceContext: carrier}))
	wantSessionError(t, r, grpccodes.ResourceExhausted, apierr.ReasonNoCapacity)

	spans := spansNamed(rec, "tollgate.Acquire")
	if len(spans) != 2 {
		t.Fatalf("got %d tollgate.Acquire spans, want 2", len(spans))
	}
	for _, sp := range spans {
		if sp.SpanContext().TraceID() != caller.TraceID() || sp.Parent().SpanID() != caller.SpanID() {
			t.Errorf("span %v is not a child of the caller's span %v (parent %v)", sp.SpanContext(), caller, sp.Parent())
		}
		if got := attrs(sp)[tracing.AttrPool].AsString(); got != "db" {
			t.Errorf("tollgate.pool = %q, want db", got)
		}
	}
	granted, refused := attrs(spans[0]), attrs(spans[1])
	if granted[tracing.AttrOutcome].AsString() != "granted" || granted[tracing.AttrWeight].AsInt64() != 2 || granted[tracing.AttrToken].AsInt64() != int64(lease.GetFencingToken()) {
		t.Errorf("granted acquire's attributes: %v", granted)
	}
	if got := refused[tracing.AttrOutcome].AsString(); got != string(apierr.ReasonNoCapacity) {
		t.Errorf("refused acquire's outcome = %q, want %s", got, apierr.ReasonNoCapacity)
	}
	if spans[1].Status().Code != codes.Error {
		t.Errorf("refused acquire's span status = %v, want Error", spans[1].Status())
	}
}

// TestTracingUnaryCalls: unary calls get otelgrpc's RPC span, under the
// trace context of the call's metadata, naming the pool; Take gets its own
// span with its tokens.
func TestTracingUnaryCalls(t *testing.T) {
	e, rec := newTracedEnv(t)
	e.createPool(&tollgatev1.Pool{Name: "api", Rate: 100, Burst: 10})
	_, caller, carrier := callerSpan(t)

	ctx := metadata.NewOutgoingContext(e.ctx(), metadata.New(carrier))
	if _, err := e.lim.Take(ctx, &tollgatev1.TakeRequest{Pool: "api", Tokens: i64(3)}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.adm.GetPool(ctx, &tollgatev1.GetPoolRequest{Name: "api"}); err != nil {
		t.Fatal(err)
	}

	// otelgrpc ends an RPC's span once the answer is on its way, so the
	// caller can have it first.
	testwait.For(t, "the RPCs' spans to end", func() bool {
		return len(spansNamed(rec, "tollgate.v1.LimiterService/Take")) > 0 && len(spansNamed(rec, "tollgate.v1.AdminService/GetPool")) > 0
	})
	rpc := spansNamed(rec, "tollgate.v1.LimiterService/Take")
	take := spansNamed(rec, "tollgate.Take")
	get := spansNamed(rec, "tollgate.v1.AdminService/GetPool")
	if len(rpc) != 1 || len(take) != 1 || len(get) != 1 {
		t.Fatalf("spans: %d Take RPC, %d tollgate.Take, %d GetPool RPC; want one each", len(rpc), len(take), len(get))
	}
	if rpc[0].SpanContext().TraceID() != caller.TraceID() {
		t.Errorf("the Take RPC's span is not in the caller's trace")
	}
	if take[0].Parent().SpanID() != rpc[0].SpanContext().SpanID() {
		t.Errorf("tollgate.Take is not a child of its RPC's span")
	}
	if a := attrs(take[0]); a[tracing.AttrTokens].AsInt64() != 3 || a[tracing.AttrOutcome].AsString() != "granted" {
		t.Errorf("tollgate.Take attributes: %v", a)
	}
	for _, sp := range []sdktrace.ReadOnlySpan{rpc[0], get[0]} {
		if got := attrs(sp)[tracing.AttrPool].AsString(); got != "api" {
			t.Errorf("%s: tollgate.pool = %q, want api", sp.Name(), got)
		}
	}
}

// TestTraceContextBounded: a trace_context past its bounds is refused,
// with or without tracing on.
func TestTraceContextBounded(t *testing.T) {
	e := newEnv(t)
	e.createPool(&tollgatev1.Pool{Name: "db", ConcurrencyLimit: 1, Rate: 10, Burst: 10})
	many := map[string]string{}
	for i := range tracing.MaxContextEntries + 1 {
		many[fmt.Sprint("k", i)] = "v"
	}
	long := map[string]string{"traceparent": string(make([]byte, tracing.MaxContextBytes))}
	for _, tc := range []map[string]string{many, long} {
		_, err := e.lim.Acquire(e.ctx(), &tollgatev1.AcquireRequest{Pool: "db", TraceContext: tc})
		wantStatus(t, err, grpccodes.InvalidArgument, apierr.ReasonInvalidArgument)
		_, err = e.lim.Take(e.ctx(), &tollgatev1.TakeRequest{Pool: "db", TraceContext: tc})
		wantStatus(t, err, grpccodes.InvalidArgument, apierr.ReasonInvalidArgument)
	}
}

// Traced acquires and takes that wait on a Session stream are records like
// untraced ones: no goroutine each. Each span ends with its wait's
// outcome, under the caller's trace: at the grant, or when the stream ends.
func TestTracingSessionWaitsHoldNoGoroutine(t *testing.T) {
	e, rec := newTracedEnv(t)
	e.createPool(&tollgatev1.Pool{Name: "db", ConcurrencyLimit: 1, MaxWaiters: 1000})
	e.createPool(&tollgatev1.Pool{Name: "api", Rate: 10, Burst: 1, MaxWaiters: 1000})
	_, caller, carrier := callerSpan(t)
	s := e.session()
	first := s.call(acquireReq(1, &tollgatev1.AcquireRequest{Pool: "db", TraceContext: carrier})).GetAcquire().GetLease()
	if r := s.call(takeReq(2, &tollgatev1.TakeRequest{Pool: "api", TraceContext: carrier})); r.GetTake() == nil {
		t.Fatalf("first take = %v", r)
	}
	before := runtime.NumGoroutine()
	const n = 200
	for i := range uint64(n) {
		s.send(acquireReq(100+i, &tollgatev1.AcquireRequest{Pool: "db", TraceContext: carrier}))
		s.send(takeReq(1000+i, &tollgatev1.TakeRequest{Pool: "api", MaxWait: dur(time.Hour), TraceContext: carrier}))
	}
	testwait.For(t, "the acquires and takes to wait", func() bool { return e.srv.quotas.Waiters() == 2*n })
	if grew := runtime.NumGoroutine() - before; grew > n/5 {
		t.Fatalf("%d traced waits added %d goroutines", 2*n, grew)
	}
	s.send(releaseReq(3, "db", first.GetId()))
	for got := 0; got < 2; got++ {
		if r := s.next(); r.GetRequestId() != 3 && r.GetAcquire().GetLease() == nil {
			t.Fatalf("got %v, want the release's answer and acquire 100's grant", r)
		}
	}
	granted := 0
	for _, sp := range spansNamed(rec, "tollgate.Acquire") {
		if attrs(sp)[tracing.AttrOutcome].AsString() == "granted" {
			granted++
		}
	}
	if granted != 2 {
		t.Fatalf("%d granted acquire spans ended, want 2 (the first and the first waiter)", granted)
	}
	s.cancel()
	testwait.For(t, "the waits to go", func() bool { return e.srv.quotas.Waiters() == 0 })
	testwait.For(t, "every span to end", func() bool {
		return len(spansNamed(rec, "tollgate.Acquire")) == n+1 && len(spansNamed(rec, "tollgate.Take")) == n+1
	})
	for _, name := range []string{"tollgate.Acquire", "tollgate.Take"} {
		ended := 0
		for _, sp := range spansNamed(rec, name) {
			if sp.SpanContext().TraceID() != caller.TraceID() {
				t.Fatalf("%s span %v is not in the caller's trace", name, sp.SpanContext())
			}
			if attrs(sp)[tracing.AttrOutcome].AsString() != "granted" {
				ended++
				if sp.Status().Code != codes.Error {
					t.Errorf("%s span of a cancelled wait has status %v", name, sp.Status())
				}
			}
		}
		if want := n - 1; name == "tollgate.Take" && ended != n || name == "tollgate.Acquire" && ended != want {
			t.Errorf("%d %s spans ended without a grant", ended, name)
		}
	}
}

// TestTracingKeepsNoRawRequest: refused calls with a 100 KB pool name
// leave spans whose attributes and status messages are bounded (the span
// of each took the raw name: 3,000 refused calls with a 1 MB name grew the
// server by 900 MB while the spans waited for their export).
func TestTracingKeepsNoRawRequest(t *testing.T) {
	e, rec := newTracedEnv(t)
	huge := strings.Repeat("p", 100_000)
	_, err := e.lim.Acquire(e.ctx(), &tollgatev1.AcquireRequest{Pool: huge})
	wantStatus(t, err, grpccodes.InvalidArgument, apierr.ReasonInvalidArgument)
	_, err = e.lim.Take(e.ctx(), &tollgatev1.TakeRequest{Pool: huge})
	wantStatus(t, err, grpccodes.InvalidArgument, apierr.ReasonInvalidArgument)
	_, err = e.adm.GetPool(e.ctx(), &tollgatev1.GetPoolRequest{Name: huge})
	wantStatus(t, err, grpccodes.InvalidArgument, apierr.ReasonInvalidArgument)
	s := e.session()
	s.call(acquireReq(1, &tollgatev1.AcquireRequest{Pool: huge}))
	testwait.For(t, "the spans of the three calls", func() bool { return len(rec.Ended()) >= 3 })
	for _, sp := range rec.Ended() {
		for _, kv := range sp.Attributes() {
			if n := len(kv.Value.String()); n > 256 {
				t.Errorf("span %s: attribute %s is %d bytes", sp.Name(), kv.Key, n)
			}
		}
		if n := len(sp.Status().Description); n > tracing.MaxStatusLen+8 {
			t.Errorf("span %s: status message is %d bytes", sp.Name(), n)
		}
	}
}
