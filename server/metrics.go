package server

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// metrics is the server's Prometheus registry: the gRPC server metrics
// kept by the interceptors below, the per-pool wait-time histograms, and
// a collector that reads everything else from the engine and the server's
// counters at scrape time (metrics_pools.go), so that the engine's hot
// path updates no metric.
type metrics struct {
	reg      *prometheus.Registry
	handled  *prometheus.CounterVec   // method, code
	handling *prometheus.HistogramVec // method (unary calls only)
	sessReqs [numSessionKinds]prometheus.Counter
	waits    *durationHistograms // how long granted acquires waited
	holds    *durationHistograms // how long released leases were held
}

func newMetrics(s *Server) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		handled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_grpc_server_handled_total",
			Help: "gRPC calls finished, by full method name and status code; a stream counts once, when it ends.",
		}, []string{"method", "code"}),
		handling: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tollgate_grpc_server_handling_seconds",
			Help:    "Time to answer a unary gRPC call, waits included, by full method name.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"method"}),
		waits: newDurationHistograms(),
		holds: newDurationHistograms(),
	}
	sr := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tollgate_grpc_session_requests_total",
		Help: "Requests received on Session streams, by kind.",
	}, []string{"kind"})
	for i, name := range sessionKindNames {
		m.sessReqs[i] = sr.WithLabelValues(name)
	}
	m.reg.MustRegister(m.handled, m.handling, sr,
		newEngineCollector(s),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// countSessionRequest counts one Session request of kind k.
func (m *metrics) countSessionRequest(k sessionKindID) { m.sessReqs[k].Inc() }

// metricsUnary counts unary calls by method and code and times them.
func (s *Server) metricsUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := handler(ctx, req)
	s.metrics.handling.WithLabelValues(info.FullMethod).Observe(time.Since(start).Seconds())
	s.metrics.handled.WithLabelValues(info.FullMethod, status.Code(err).String()).Inc()
	return resp, err
}

// metricsStream counts streams by method and final code.
func (s *Server) metricsStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	err := handler(srv, ss)
	s.metrics.handled.WithLabelValues(info.FullMethod, status.Code(err).String()).Inc()
	return err
}
