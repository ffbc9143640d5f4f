package server

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// metrics is the server's Prometheus registry: the gRPC server metrics
// kept by the interceptors below, the per-pool wait- and hold-time
// histograms, and a collector that reads everything else from the engine
// and the server's counters at scrape time (metrics_pools.go), so that the
// engine's hot path updates no metric.
type metrics struct {
	reg      *prometheus.Registry
	grpc     grpcMetrics
	sessReqs [numSessionKinds]prometheus.Counter
	waits    *poolHistograms // how long granted acquires waited
	holds    *poolHistograms // how long released leases were held
}

// durationBuckets are the classic bucket bounds, in seconds, of the wait-
// and hold-time histograms; they are native histograms too, for scrapers
// that ask for them.
var durationBuckets = []float64{.001, .005, .01, .05, .1, .5, 1, 5, 10, 30, 60, 300}

func newMetrics(s *Server) *metrics {
	m := &metrics{
		reg:  prometheus.NewRegistry(),
		grpc: newGRPCMetrics(),
		waits: newPoolHistograms("tollgate_pool_acquire_wait_seconds",
			"How long granted acquires waited in the pool's queue (0 for those granted at once)."),
		holds: newPoolHistograms("tollgate_pool_lease_hold_seconds",
			"How long released leases were held, from grant to release (leases that expired or were revoked are not counted)."),
	}
	sr := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tollgate_grpc_session_requests_total",
		Help: "Requests received on Session streams, by kind.",
	}, []string{"kind"})
	for i, name := range sessionKindNames {
		m.sessReqs[i] = sr.WithLabelValues(name)
	}
	m.reg.MustRegister(sr, newEngineCollector(s, m.waits, m.holds),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.grpc.register(m.reg)
	return m
}

// countSessionRequest counts one Session request of kind k.
func (m *metrics) countSessionRequest(k sessionKindID) { m.sessReqs[k].Inc() }

// poolHistograms is a Prometheus histogram per pool (label "pool"). Each
// pool's series is cached, so that observing is a map read and the
// histogram's atomic adds; the engine collector drops the series of pools
// that no longer exist before it collects them (prune), so memory follows
// the live pools.
type poolHistograms struct {
	vec    *prometheus.HistogramVec
	series sync.Map // pool name -> prometheus.Observer
}

func newPoolHistograms(name, help string) *poolHistograms {
	return &poolHistograms{vec: prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: name, Help: help, Buckets: durationBuckets,
		NativeHistogramBucketFactor:     1.1,
		NativeHistogramMaxBucketNumber:  100,
		NativeHistogramMinResetDuration: time.Hour,
	}, []string{"pool"})}
}

// observe records a duration d (0 if negative) in pool's histogram.
func (h *poolHistograms) observe(pool string, d time.Duration) {
	o, ok := h.series.Load(pool)
	if !ok {
		o, _ = h.series.LoadOrStore(pool, h.vec.WithLabelValues(pool))
	}
	o.(prometheus.Observer).Observe(max(d, 0).Seconds())
}

// prune drops the histograms of pools that are not in live and for which
// exists (asked only about those) reports false: live was read before, and
// a pool created since has a histogram to keep.
func (h *poolHistograms) prune(live map[string]bool, exists func(string) bool) {
	h.series.Range(func(k, _ any) bool {
		if name := k.(string); !live[name] && !exists(name) {
			h.series.Delete(k)
			h.vec.DeleteLabelValues(name)
		}
		return true
	})
}

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

// metricsUnary counts unary calls by method and code and times them.
func (s *Server) metricsUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	mm := s.metrics.grpc.method(info.FullMethod, false, false)
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

// metricsStream counts streams and their messages by method, and their
// final codes and lifetimes.
func (s *Server) metricsStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	mm := s.metrics.grpc.method(info.FullMethod, info.IsClientStream, info.IsServerStream)
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
