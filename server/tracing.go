package server

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"

	"github.com/tollgate/tollgate/limiter"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// Limits on a request's trace_context: W3C Trace Context needs two entries
// of a few hundred bytes at most.
const (
	maxTraceContextEntries = 8
	maxTraceContextBytes   = 1024
)

// Span attribute keys.
const (
	attrPool    = attribute.Key("tollgate.pool")
	attrWeight  = attribute.Key("tollgate.weight")
	attrTokens  = attribute.Key("tollgate.tokens")
	attrWaitMS  = attribute.Key("tollgate.wait_ms")
	attrOutcome = attribute.Key("tollgate.outcome")
	attrToken   = attribute.Key("tollgate.fencing_token")
)

// tracing records OpenTelemetry spans: one per RPC (otelgrpc's stats
// handler, whose parent comes from the call's metadata), and one per
// acquire or take, unary or on a Session stream, whose parent comes from
// the request's trace_context when it has one. A nil *tracing records
// nothing and costs nothing.
type tracing struct {
	provider trace.TracerProvider
	tracer   trace.Tracer
	prop     propagation.TextMapPropagator
}

// newTracing returns the tracing for cfg, or nil when it has no
// TracerProvider.
func newTracing(cfg Config) *tracing {
	if cfg.TracerProvider == nil {
		return nil
	}
	prop := cfg.Propagator
	if prop == nil {
		prop = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	}
	return &tracing{
		provider: cfg.TracerProvider,
		tracer:   cfg.TracerProvider.Tracer("github.com/tollgate/tollgate/server"),
		prop:     prop,
	}
}

// serverOptions are the options that make every RPC a span.
func (t *tracing) serverOptions() []grpc.ServerOption {
	if t == nil {
		return nil
	}
	return []grpc.ServerOption{
		grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithTracerProvider(t.provider), otelgrpc.WithPropagators(t.prop))),
		grpc.ChainUnaryInterceptor(t.poolUnary),
	}
}

// poolUnary names the pool an RPC is about on its span.
func (t *tracing) poolUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if name := poolOf(req); name != "" {
		trace.SpanFromContext(ctx).SetAttributes(attrPool.String(name))
	}
	return handler(ctx, req)
}

// poolOf returns the name of the pool req is about, or "".
func poolOf(req any) string {
	switch r := req.(type) {
	case interface{ GetPool() string }:
		return r.GetPool()
	case interface{ GetName() string }:
		return r.GetName()
	case interface{ GetPool() *tollgatev1.Pool }:
		return r.GetPool().GetName()
	}
	return ""
}

// acquireTraced is acquireCounted in a span under the caller's trace
// context tc (if any).
func (s *Server) acquireTraced(ctx context.Context, ar limiter.AcquireRequest, tc map[string]string) (limiter.Lease, error) {
	if s.tracing == nil {
		return s.acquireCounted(ctx, ar)
	}
	ctx, span := s.tracing.start(ctx, "tollgate.Acquire", tc, attrPool.String(ar.Pool), attrWeight.Int64(ar.Weight))
	start := s.Engine().Clock().Now()
	lease, err := s.acquireCounted(ctx, ar)
	end(span, err, attrWaitMS.Float64(float64(s.Engine().Clock().Now().Sub(start))/1e6), attrToken.Int64(int64(lease.FencingToken)))
	return lease, err
}

// takeTraced is takeCounted in a span under the caller's trace context tc
// (if any).
func (s *Server) takeTraced(ctx context.Context, pool string, tokens int64, maxWait time.Duration, tc map[string]string) (limiter.TakeResult, error) {
	if s.tracing == nil {
		return s.takeCounted(ctx, pool, tokens, maxWait)
	}
	ctx, span := s.tracing.start(ctx, "tollgate.Take", tc, attrPool.String(pool), attrTokens.Int64(tokens))
	res, err := s.takeCounted(ctx, pool, tokens, maxWait)
	end(span, err, attrWaitMS.Float64(float64(res.Waited)/1e6))
	return res, err
}

// start starts the span of an acquire or take named name, under the trace
// context carrier holds (if any) or else under ctx's span.
func (t *tracing) start(ctx context.Context, name string, carrier map[string]string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if len(carrier) > 0 {
		ctx = t.prop.Extract(ctx, propagation.MapCarrier(carrier))
	}
	return t.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
}

// end ends span with the outcome of its call.
func end(span trace.Span, err error, attrs ...attribute.KeyValue) {
	span.SetAttributes(attrs...)
	if err != nil {
		span.SetAttributes(attrOutcome.String(outcomeOf(err)))
		span.SetStatus(codes.Error, err.Error())
	} else {
		span.SetAttributes(attrOutcome.String("granted"))
	}
	span.End()
}

// outcomeOf names how a call that failed with err ended: the engine's
// reason, or "cancelled" or "deadline_exceeded".
func outcomeOf(err error) string {
	var le *limiter.Error
	switch {
	case errors.As(err, &le):
		return string(le.Reason)
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline_exceeded"
	case errors.Is(err, context.Canceled):
		return "cancelled"
	}
	return "error"
}

// checkTraceContext refuses a trace_context past its limits.
func checkTraceContext(tc map[string]string) error {
	if len(tc) > maxTraceContextEntries {
		return invalidArg("trace_context has %d entries; the most is %d (W3C Trace Context needs traceparent and tracestate)", len(tc), maxTraceContextEntries)
	}
	n := 0
	for k, v := range tc {
		n += len(k) + len(v)
	}
	if n > maxTraceContextBytes {
		return invalidArg("trace_context is %d bytes of keys and values; the most is %d", n, maxTraceContextBytes)
	}
	return nil
}
