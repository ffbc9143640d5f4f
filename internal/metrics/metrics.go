package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metrics is the server's Prometheus registry: the gRPC server metrics
// its interceptors (Unary, Stream) keep, the per-pool wait- and hold-time
// histograms, and a collector that reads everything else from the engine
// and the server's counters at scrape time, so that the engine's hot path
// updates no metric.
type Metrics struct {
	reg      *prometheus.Registry
	grpc     grpcMetrics
	sessReqs []prometheus.Counter
	Waits    *PoolHistograms // how long granted acquires waited
	Holds    *PoolHistograms // how long released leases were held
}

// durationBuckets are the classic bucket bounds, in seconds, of the wait-
// and hold-time histograms; they are native histograms too, for scrapers
// that ask for them.
var durationBuckets = []float64{.001, .005, .01, .05, .1, .5, 1, 5, 10, 30, 60, 300}

// New returns the metrics of a server whose engine and counters src
// reads; sessionKinds are the values of the "kind" label of
// tollgate_grpc_session_requests_total, indexed as CountSessionRequest
// counts them.
func New(src Source, sessionKinds []string) *Metrics {
	m := &Metrics{
		reg:  prometheus.NewRegistry(),
		grpc: newGRPCMetrics(),
		Waits: newPoolHistograms("tollgate_pool_acquire_wait_seconds",
			"How long granted acquires waited in the pool's queue (0 for those granted at once)."),
		Holds: newPoolHistograms("tollgate_pool_lease_hold_seconds",
			"How long released leases were held, from grant to release (leases that expired or were revoked are not counted)."),
	}
	sr := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tollgate_grpc_session_requests_total",
		Help: "Requests received on Session streams, by kind.",
	}, []string{"kind"})
	m.sessReqs = make([]prometheus.Counter, len(sessionKinds))
	for i, name := range sessionKinds {
		m.sessReqs[i] = sr.WithLabelValues(name)
	}
	m.reg.MustRegister(sr, newEngineCollector(src, m.Waits, m.Holds),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.grpc.register(m.reg)
	return m
}

// Registry is the registry to serve.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// CountSessionRequest counts one Session request of kind k, an index of
// New's sessionKinds.
func (m *Metrics) CountSessionRequest(k int) { m.sessReqs[k].Inc() }

// PoolHistograms is a Prometheus histogram per pool (label "pool"). Each
// pool's series is cached, so that observing is a map read and the
// histogram's atomic adds; the engine collector drops the series of pools
// that no longer exist before it collects them (prune), so memory follows
// the live pools.
type PoolHistograms struct {
	vec    *prometheus.HistogramVec
	series sync.Map // pool name -> prometheus.Observer
}

func newPoolHistograms(name, help string) *PoolHistograms {
	return &PoolHistograms{vec: prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: name, Help: help, Buckets: durationBuckets,
		NativeHistogramBucketFactor:     1.1,
		NativeHistogramMaxBucketNumber:  100,
		NativeHistogramMinResetDuration: time.Hour,
	}, []string{"pool"})}
}

// Observe records a duration d (0 if negative) in pool's histogram.
func (h *PoolHistograms) Observe(pool string, d time.Duration) {
	o, ok := h.series.Load(pool)
	if !ok {
		o, _ = h.series.LoadOrStore(pool, h.vec.WithLabelValues(pool))
	}
	o.(prometheus.Observer).Observe(max(d, 0).Seconds())
}

// Cached reports whether pool's series is cached.
func (h *PoolHistograms) Cached(pool string) bool {
	_, ok := h.series.Load(pool)
	return ok
}

// prune drops the histograms of pools that are not in live and for which
// exists (asked only about those) reports false: live was read before, and
// a pool created since has a histogram to keep.
func (h *PoolHistograms) prune(live map[string]bool, exists func(string) bool) {
	h.series.Range(func(k, _ any) bool {
		if name := k.(string); !live[name] && !exists(name) {
			h.series.Delete(k)
			h.vec.DeleteLabelValues(name)
		}
		return true
	})
}
