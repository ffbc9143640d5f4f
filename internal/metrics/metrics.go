package metrics

import (
	"sync"
	"sync/atomic"
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
// counts them. At most maxPools pools have per-pool series (negative: no
// bound; see limits.Limits.MetricsPools).
func New(src Source, sessionKinds []string, maxPools int) *Metrics {
	m := &Metrics{
		reg:  prometheus.NewRegistry(),
		grpc: newGRPCMetrics(),
		Waits: newPoolHistograms("tollgate_pool_acquire_wait_seconds",
			"How long granted acquires waited in the pool's queue (0 for those granted at once).", maxPools),
		Holds: newPoolHistograms("tollgate_pool_lease_hold_seconds",
			"How long released leases were held, from grant to release (leases that expired or were revoked are not counted).", maxPools),
	}
	sr := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tollgate_grpc_session_requests_total",
		Help: "Requests received on Session streams, by kind.",
	}, []string{"kind"})
	m.sessReqs = make([]prometheus.Counter, len(sessionKinds))
	for i, name := range sessionKinds {
		m.sessReqs[i] = sr.WithLabelValues(name)
	}
	m.reg.MustRegister(sr, newEngineCollector(src, maxPools, m.Waits, m.Holds),
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

// PoolHistograms is a Prometheus histogram per pool (label "pool"), for
// at most max pools: the first to observe one; the others' observations
// are dropped. Each pool's series is cached, so that observing is a map
// read and the histogram's atomic adds; the engine collector drops the
// series of pools that no longer exist before it collects them (prune), so
// memory follows the live pools.
type PoolHistograms struct {
	vec    *prometheus.HistogramVec
	series sync.Map // pool name -> prometheus.Observer
	max    int64    // negative: no bound
	n      atomic.Int64
}

func newPoolHistograms(name, help string, maxPools int) *PoolHistograms {
	return &PoolHistograms{max: int64(maxPools), vec: prometheus.NewHistogramVec(prometheus.HistogramOpts{
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
		if h.max >= 0 && h.n.Add(1) > h.max {
			h.n.Add(-1)
			return
		}
		var loaded bool
		if o, loaded = h.series.LoadOrStore(pool, h.vec.WithLabelValues(pool)); loaded {
			h.n.Add(-1)
		}
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
			h.n.Add(-1)
		}
		return true
	})
}
