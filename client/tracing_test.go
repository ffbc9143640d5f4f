package client_test

import (
	"context"
	"net"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/limiter/fakeclock"
	"github.com/tollgate/tollgate/server"
)

// TestTraceContextPropagated: an acquire and a take made under the caller's
// span, on the client's Session stream, are recorded by a tracing server
// as children of that span.
func TestTraceContextPropagated(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	srv := server.New(server.Config{
		Clock:          fakeclock.New(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)),
		TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)),
	})
	if _, err := srv.Engine().CreatePool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: 1, Rate: 100, Burst: 10}); err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := srv.GRPCServer()
	go func() { _ = gs.Serve(lis) }() // it returns when Stop is called
	t.Cleanup(func() { gs.Stop(); srv.Close() })
	c := dialTarget(t, lis.Addr().String())

	tctx, caller := sdktrace.NewTracerProvider().Tracer("caller").Start(ctx(t), "caller")
	defer caller.End()
	l, err := c.Acquire(tctx, "db")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := l.Release(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	if err := c.Take(tctx, "db", 2); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"tollgate.Acquire", "tollgate.Take"} {
		found := false
		for _, s := range rec.Ended() {
			if s.Name() != name {
				continue
			}
			found = true
			if s.Parent().SpanID() != caller.SpanContext().SpanID() || s.SpanContext().TraceID() != caller.SpanContext().TraceID() {
				t.Errorf("%s is not a child of the caller's span", name)
			}
		}
		if !found {
			t.Errorf("no %s span was recorded", name)
		}
	}
}
