package client

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// traceContext returns the trace context of ctx's span as the fields of a
// request's trace_context, so that a server with tracing on records the
// acquire or take under the caller's trace; nil when ctx has no span. It
// uses the global propagator (otel.SetTextMapPropagator), or W3C Trace
// Context when the global one writes nothing, since that is what the
// server reads by default.
func traceContext(ctx context.Context) map[string]string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	c := propagation.MapCarrier{}
	otel.GetTextMapPropagator().Inject(ctx, c)
	if len(c) == 0 {
		propagation.TraceContext{}.Inject(ctx, c)
	}
	return c
}
