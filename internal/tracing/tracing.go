// Package tracing records the server's OpenTelemetry spans: one per RPC
// (otelgrpc's stats handler, whose parent comes from the call's metadata),
// and one per acquire or take, unary or on a Session stream, whose parent
// comes from the request's trace_context when it has one. It also bounds
// the trace_context a request may carry.
//
// It may import the engine (limiter), for its errors' reasons, the wire
// types (proto/tollgate/v1), to name the pool a request is about, and
// internal/refuse; nothing of the server.
package tracing

import (
	"context"
	"errors"
	"strings"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"

	"github.com/tollgate/tollgate/internal/refuse"
	"github.com/tollgate/tollgate/limiter"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// Limits on a request's trace_context: W3C Trace Context needs two entries
// of a few hundred bytes at most.
const (
	MaxContextEntries = 8
	MaxContextBytes   = 1024
)

// Span attribute keys.
const (
	AttrPool    = attribute.Key("tollgate.pool")
	AttrWeight  = attribute.Key("tollgate.weight")
	AttrTokens  = attribute.Key("tollgate.tokens")
	AttrWaitMS  = attribute.Key("tollgate.wait_ms")
	AttrOutcome = attribute.Key("tollgate.outcome")
	AttrToken   = attribute.Key("tollgate.fencing_token")
)

// Tracing records the spans. A nil *Tracing records nothing and costs
// nothing.
type Tracing struct {
	provider trace.TracerProvider
	tracer   trace.Tracer
	prop     propagation.TextMapPropagator
}

// New returns the tracing that records to provider, or nil when provider
// is nil. A nil prop means W3C Trace Context and Baggage.
func New(provider trace.TracerProvider, prop propagation.TextMapPropagator) *Tracing {
	if provider == nil {
		return nil
	}
	if prop == nil {
		prop = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	}
	return &Tracing{
		provider: provider,
		tracer:   provider.Tracer("github.com/tollgate/tollgate/server"),
		prop:     prop,
	}
}

// ServerOptions are the options that make every RPC a span.
func (t *Tracing) ServerOptions() []grpc.ServerOption {
	if t == nil {
		return nil
	}
	return []grpc.ServerOption{
		grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithTracerProvider(t.provider), otelgrpc.WithPropagators(t.prop))),
		grpc.ChainUnaryInterceptor(t.poolUnary),
	}
}

// poolUnary names the pool an RPC is about on its span.
func (t *Tracing) poolUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if name := poolOf(req); name != "" {
		trace.SpanFromContext(ctx).SetAttributes(Pool(name))
	}
	return handler(ctx, req)
}

// invalidPool stands for a pool name that is not valid in span attributes.
const invalidPool = "(invalid)"

// Pool is the tollgate.pool attribute of a request's pool name: the name
// when it is a valid one (at most limiter.MaxPoolNameLen bytes), and
// "(invalid)" otherwise, so that a span never keeps what a refused
// request sent (a span waiting for its export would keep a megabyte name).
func Pool(name string) attribute.KeyValue {
	if limiter.ValidatePoolName(name) != nil {
		name = invalidPool
	}
	return AttrPool.String(name)
}

// MaxStatusLen bounds the status message of a span, in bytes.
const MaxStatusLen = 512

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

// Start starts the span of an acquire or take named name, under the trace
// context carrier holds (if any) or else under ctx's span.
func (t *Tracing) Start(ctx context.Context, name string, carrier map[string]string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if len(carrier) > 0 {
		ctx = t.prop.Extract(ctx, propagation.MapCarrier(carrier))
	}
	return t.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
}

// End ends span with the outcome of its call.
func End(span trace.Span, err error, attrs ...attribute.KeyValue) {
	span.SetAttributes(attrs...)
	if err != nil {
		span.SetAttributes(AttrOutcome.String(outcomeOf(err)))
		msg := err.Error()
		if len(msg) > MaxStatusLen {
			msg = strings.ToValidUTF8(msg[:MaxStatusLen], "") + "…"
		}
		span.SetStatus(codes.Error, msg)
	} else {
		span.SetAttributes(AttrOutcome.String("granted"))
	}
	span.End()
}

// outcomeOf names how a call that failed with err ended: the engine's
// reason, or "cancelled" or "deadline_exceeded".
func outcomeOf(err error) string {
	var le *apierr.Error
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

// CheckContext refuses a trace_context past its limits.
func CheckContext(tc map[string]string) error {
	if len(tc) > MaxContextEntries {
		return refuse.InvalidArg("trace_context has %d entries; the most is %d (W3C Trace Context needs traceparent and tracestate)", len(tc), MaxContextEntries)
	}
	n := 0
	for k, v := range tc {
		n += len(k) + len(v)
	}
	if n > MaxContextBytes {
		return refuse.InvalidArg("trace_context is %d bytes of keys and values; the most is %d", n, MaxContextBytes)
	}
	return nil
}
