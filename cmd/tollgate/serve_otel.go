package main

import (
	"context"
	"fmt"
	"os"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// otlpConfigured reports whether the standard OpenTelemetry variables name
// an OTLP endpoint for traces.
func otlpConfigured() bool {
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// newTracerProvider returns the provider that exports serve's spans over
// OTLP/gRPC, configured by the standard OTEL_EXPORTER_OTLP_* variables
// (endpoint, headers, TLS; by default localhost:4317), with the service
// name "tollgate" unless OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES say
// otherwise. Its Shutdown flushes what is left.
func newTracerProvider(ctx context.Context) (*sdktrace.TracerProvider, error) {
	exp, err := otlptracegrpc.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("--otel: the OTLP trace exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "tollgate")),
		resource.WithFromEnv(),
		resource.WithTelemetrySDK(),
		resource.WithHost(),
	)
	if err != nil {
		return nil, fmt.Errorf("--otel: the resource: %w", err)
	}
	// Attributes come only from validated values; the limit bounds
	// whatever else a span may carry.
	limits := sdktrace.NewSpanLimits()
	limits.AttributeValueLengthLimit = 256
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res), sdktrace.WithRawSpanLimits(limits)), nil
}
