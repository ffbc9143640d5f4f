package metrics

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// grpcMetrics are the gRPC server metrics under their standard names
// (grpc_server_*, labels grpc_type, grpc_service, grpc_method, grpc_code,
// as go-grpc-middleware's Prometheus provider names them), and, for one
// release, the deprecated tollgate_grpc_server_* ones they replace.
type grpcMetrics struct {
	started, handled, received, sent *prometheus.CounterVec
	handling                         *prometheus.HistogramVec
	oldHandled                       *prometheus.CounterVec   // deprecated
	oldHandling                      *prometheus.HistogramVec // deprecated; unary calls only

	methods sync.Map // full method name -> *methodMetrics
}

// methodMetrics are one method's series, resolved once.
type methodMetrics struct {
	g                          *grpcMetrics
	typ, service, method, full string
	started, received, sent    prometheus.Counter
	handling, oldHandling      prometheus.Observer // oldHandling: nil for streams
	handled                    [codes.Unauthenticated + 1]atomic.Pointer[handledSeries]
}

// handledSeries are the handled counters of one method and code.
type handledSeries struct{ std, old prometheus.Counter }

var handlingBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

func newGRPCMetrics() grpcMetrics {
	labels := []string{"grpc_type", "grpc_service", "grpc_method"}
	counter := func(name, help string, extra ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, append(labels[:3:3], extra...))
	}
	return grpcMetrics{
		started:  counter("grpc_server_started_total", "RPCs started on the server."),
		handled:  counter("grpc_server_handled_total", "RPCs completed on the server, regardless of success or failure; a stream counts once, when it ends.", "grpc_code"),
		received: counter("grpc_server_msg_received_total", "RPC stream messages received on the server."),
		sent:     counter("grpc_server_msg_sent_total", "gRPC stream messages sent by the server."),
		handling: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "grpc_server_handling_seconds",
			Help:    "Time from the start of an RPC to its end on the server, waits included (a stream's whole life).",
			Buckets: handlingBuckets,
		}, labels),
		oldHandled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_grpc_server_handled_total",
			Help: "Deprecated: use grpc_server_handled_total. gRPC calls finished, by full method name and status code; a stream counts once, when it ends.",
		}, []string{"method", "code"}),
		oldHandling: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tollgate_grpc_server_handling_seconds",
			Help:    "Deprecated: use grpc_server_handling_seconds{grpc_type=\"unary\"}. Time to answer a unary gRPC call, waits included, by full method name.",
			Buckets: handlingBuckets,
		}, []string{"method"}),
	}
}

func (g *grpcMetrics) register(reg *prometheus.Registry) {
	reg.MustRegister(g.started, g.handled, g.received, g.sent, g.handling, g.oldHandled, g.oldHandling)
}

// method returns the series of a method (full name "/package.Service/Method").
func (g *grpcMetrics) method(full string, clientStream, serverStream bool) *methodMetrics {
	if mm, ok := g.methods.Load(full); ok {
		return mm.(*methodMetrics)
	}
	typ := "unary"
	switch {
	case clientStream && serverStream:
		typ = "bidi_stream"
	case clientStream:
		typ = "client_stream"
	case serverStream:
		typ = "server_stream"
	}
	service, method, _ := strings.Cut(strings.TrimPrefix(full, "/"), "/")
	mm := &methodMetrics{g: g, typ: typ, service: service, method: method, full: full,
		started:  g.started.WithLabelValues(typ, service, method),
		received: g.received.WithLabelValues(typ, service, method),
		sent:     g.sent.WithLabelValues(typ, service, method),
		handling: g.handling.WithLabelValues(typ, service, method),
	}
	if typ == "unary" {
		mm.oldHandling = g.oldHandling.WithLabelValues(full)
	}
	v, _ := g.methods.LoadOrStore(full, mm)
	return v.(*methodMetrics)
}

// done counts the end of a call that began at start with err.
func (mm *methodMetrics) done(start time.Time, err error) {
	d := time.Since(start).Seconds()
	mm.handling.Observe(d)
	if mm.oldHandling != nil {
		mm.oldHandling.Observe(d)
	}
	code := status.Code(err)
	if int(code) >= len(mm.handled) {
		mm.g.handled.WithLabelValues(mm.typ, mm.service, mm.method, code.String()).Inc()
		mm.g.oldHandled.WithLabelValues(mm.full, code.String()).Inc()
		return
	}
	hs := mm.handled[code].Load()
	if hs == nil {
		hs = &handledSeries{
			std: mm.g.handled.WithLabelValues(mm.typ, mm.service, mm.method, code.String()),
			old: mm.g.oldHandled.WithLabelValues(mm.full, code.String()),
		}
		mm.handled[code].Store(hs)
	}
	hs.std.Inc()
	hs.old.Inc()
}

// Unary counts unary calls by method and code and times them.
func (m *Metrics) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	mm := m.grpc.method(info.FullMethod, false, false)
	mm.started.Inc()
	mm.received.Inc()
	start := time.Now()
	resp, err := handler(ctx, req)
	if err == nil {
		mm.sent.Inc()
	}
	mm.done(start, err)
	return resp, err
}

// Stream counts streams and their messages by method, and their
// final codes and lifetimes.
func (m *Metrics) Stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	mm := m.grpc.method(info.FullMethod, info.IsClientStream, info.IsServerStream)
	mm.started.Inc()
	start := time.Now()
	err := handler(srv, &countedStream{ServerStream: ss, mm: mm})
	mm.done(start, err)
	return err
}

// countedStream counts the messages of a stream.
type countedStream struct {
	grpc.ServerStream
	mm *methodMetrics
}

func (c *countedStream) SendMsg(m any) error {
	err := c.ServerStream.SendMsg(m)
	if err == nil {
		c.mm.sent.Inc()
	}
	return err
}

func (c *countedStream) RecvMsg(m any) error {
	err := c.ServerStream.RecvMsg(m)
	if err == nil {
		c.mm.received.Inc()
	}
	return err
}
