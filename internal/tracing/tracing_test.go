package tracing

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/tollgate/tollgate/limiter"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

func newRecorded(t *testing.T) (*Tracing, *tracetest.SpanRecorder) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return New(tp, nil), rec
}

func attr(s sdktrace.ReadOnlySpan, k attribute.Key) (attribute.Value, bool) {
	for _, kv := range s.Attributes() {
		if kv.Key == k {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

func onlySpan(t *testing.T, rec *tracetest.SpanRecorder) sdktrace.ReadOnlySpan {
	t.Helper()
	ended := rec.Ended()
	if len(ended) != 1 {
		t.Fatalf("%d spans ended; want 1", len(ended))
	}
	return ended[0]
}

func TestNilTracingRecordsNothing(t *testing.T) {
	tr := New(nil, nil)
	if tr != nil || tr.ServerOptions() != nil {
		t.Fatalf("New(nil) = %v with options %v; want nil and none", tr, tr.ServerOptions())
	}
}

func TestStartTakesItsParentFromTheCarrier(t *testing.T) {
	tr, rec := newRecorded(t)
	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	carrier := map[string]string{"traceparent": "00-" + traceID + "-" + parentID + "-01"}
	_, span := tr.Start(context.Background(), "tollgate.Acquire", carrier, AttrWeight.Int64(3))
	End(span, nil, AttrToken.Int64(9))

	s := onlySpan(t, rec)
	if got := s.SpanContext().TraceID().String(); got != traceID {
		t.Fatalf("trace id %s; want the carrier's %s", got, traceID)
	}
	if got := s.Parent().SpanID().String(); got != parentID {
		t.Fatalf("parent span %s; want the carrier's %s", got, parentID)
	}
	if s.SpanKind() != trace.SpanKindInternal || s.Name() != "tollgate.Acquire" {
		t.Fatalf("span %q of kind %v; want internal tollgate.Acquire", s.Name(), s.SpanKind())
	}
	for k, want := range map[attribute.Key]string{AttrWeight: "3", AttrToken: "9", AttrOutcome: "granted"} {
		if v, ok := attr(s, k); !ok || v.String() != want {
			t.Fatalf("attribute %s = %v (set %v); want %s", k, v.String(), ok, want)
		}
	}
	if s.Status().Code == codes.Error {
		t.Fatalf("a granted call's span has status %v", s.Status())
	}
}

func TestStartWithoutCarrierIsAChildOfTheContextSpan(t *testing.T) {
	tr, rec := newRecorded(t)
	ctx, parent := tr.tracer.Start(context.Background(), "rpc")
	_, span := tr.Start(ctx, "tollgate.Take", nil)
	span.End()
	parent.End()
	if got := rec.Ended()[0].Parent().SpanID(); got != parent.SpanContext().SpanID() {
		t.Fatalf("parent %s; want the context's span %s", got, parent.SpanContext().SpanID())
	}
}

func TestEndNamesTheOutcomeAndBoundsTheStatus(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&apierr.Error{Code: apierr.CodeResourceExhausted, Reason: apierr.ReasonQueueFull, Message: "full"}, string(apierr.ReasonQueueFull)},
		{fmt.Errorf("waiting: %w", context.DeadlineExceeded), "deadline_exceeded"},
		{context.Canceled, "cancelled"},
		{errors.New(strings.Repeat("é", MaxStatusLen)), "error"},
	} {
		tr, rec := newRecorded(t)
		_, span := tr.Start(context.Background(), "tollgate.Acquire", nil)
		End(span, tc.err)
		s := onlySpan(t, rec)
		if v, _ := attr(s, AttrOutcome); v.AsString() != tc.want {
			t.Errorf("%v: outcome %q; want %q", tc.err, v.AsString(), tc.want)
		}
		st := s.Status()
		if st.Code != codes.Error || len(st.Description) > MaxStatusLen+len("…") || !strings.HasPrefix(tc.err.Error(), strings.TrimSuffix(st.Description, "…")) {
			t.Errorf("%v: status %v %d bytes; want an error status of at most %d bytes, a prefix of the error", tc.err, st.Code, len(st.Description), MaxStatusLen)
		}
	}
}

func TestPoolAttributeKeepsNoInvalidName(t *testing.T) {
	if got := Pool("db").Value.AsString(); got != "db" {
		t.Fatalf("Pool(db) = %q", got)
	}
	long := strings.Repeat("p", limiter.MaxPoolNameLen+1)
	for _, name := range []string{long, "has space", ""} {
		if got := Pool(name).Value.AsString(); got != invalidPool {
			t.Errorf("Pool(%.20q) = %.20q; want %q", name, got, invalidPool)
		}
	}
}

func TestPoolUnaryNamesThePoolOfTheRequest(t *testing.T) {
	tr, rec := newRecorded(t)
	for _, req := range []any{
		&tollgatev1.AcquireRequest{Pool: "a"},
		&tollgatev1.GetPoolRequest{Name: "a"},
		&tollgatev1.CreatePoolRequest{Pool: &tollgatev1.Pool{Name: "a"}},
		&tollgatev1.ListPoolsRequest{},
	} {
		ctx, span := tr.tracer.Start(context.Background(), "rpc")
		resp, err := tr.poolUnary(ctx, req, nil, func(context.Context, any) (any, error) { return "ok", nil })
		span.End()
		if resp != "ok" || err != nil {
			t.Fatalf("poolUnary did not return the handler's answer: %v, %v", resp, err)
		}
	}
	ended := rec.Ended()
	for i, s := range ended[:3] {
		if v, ok := attr(s, AttrPool); !ok || v.AsString() != "a" {
			t.Errorf("span %d: pool %v (set %v); want a", i, v.AsString(), ok)
		}
	}
	if _, ok := attr(ended[3], AttrPool); ok {
		t.Errorf("a request about no pool has a pool attribute")
	}
}

func TestCheckContextBounds(t *testing.T) {
	if err := CheckContext(map[string]string{"traceparent": "00-x-y-01", "tracestate": "a=b"}); err != nil {
		t.Fatalf("W3C context refused: %v", err)
	}
	many := map[string]string{}
	for i := range MaxContextEntries + 1 {
		many[fmt.Sprint(i)] = ""
	}
	big := map[string]string{"traceparent": strings.Repeat("x", MaxContextBytes)}
	for name, tc := range map[string]map[string]string{"entries": many, "bytes": big} {
		var le *apierr.Error
		if err := CheckContext(tc); !errors.As(err, &le) || le.Code != apierr.CodeInvalidArgument {
			t.Errorf("too many %s: %v; want an invalid argument", name, err)
		}
	}
}
