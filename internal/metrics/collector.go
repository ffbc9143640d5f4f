package metrics

import (
	"math"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate/tollgate/internal/limits"
	"github.com/tollgate/tollgate/limiter"
)

// Source is what the collector reads at scrape time: the engine's pools
// and the server's own counters.
type Source interface {
	ListPools(after string, limit int) ([]limiter.PoolInfo, bool)
	NumPools() int
	GetPool(name string) (limiter.PoolInfo, error)
	// MarkKinds names the engine's mark events as the "kind" label of
	// tollgate_pool_events_suppressed_total does.
	MarkKinds() map[limiter.PoolEventType]string
	Quotas() *limits.Quotas
	Sessions() int64 // Session streams open
	Serving() bool   // false once shutdown has started
}

// engineCollector is a prometheus.Collector that reads, at scrape time,
// the configuration and status of the first maxPools pools in name order
// from the engine (one ListPools: each pool's lock is taken once, briefly)
// and the server's own counters. It also collects the wait- and hold-time
// histograms, after dropping the series of pools that are gone.
type engineCollector struct {
	src      Source
	maxPools int // pools with series; negative: all

	poolGauges   []poolMetric
	poolCounters []poolMetric
	suppressed   *prometheus.Desc
	waits, holds *PoolHistograms

	pools, unexported, waiters, sessions, serving, refusals *prometheus.Desc
}

// poolMetric is one per-pool series and how to read it from a PoolInfo.
type poolMetric struct {
	desc *prometheus.Desc
	get  func(*limiter.PoolInfo) float64
}

func poolDesc(name, help string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, []string{"pool"}, nil)
}

func newEngineCollector(src Source, maxPools int, waits, holds *PoolHistograms) *engineCollector {
	g := func(name, help string, get func(*limiter.PoolInfo) float64) poolMetric {
		return poolMetric{poolDesc(name, help), get}
	}
	return &engineCollector{
		src: src, maxPools: maxPools, waits: waits, holds: holds,
		poolGauges: []poolMetric{
			g("tollgate_pool_held", "Permit weight held by the pool's live leases.", func(i *limiter.PoolInfo) float64 { return float64(i.Status.Held) }),
			g("tollgate_pool_leases", "Live leases of the pool.", func(i *limiter.PoolInfo) float64 { return float64(i.Status.Leases) }),
			g("tollgate_pool_waiting", "Acquires waiting in the pool's queue.", func(i *limiter.PoolInfo) float64 { return float64(i.Status.Waiting) }),
			g("tollgate_pool_waiting_weight", "Total permit weight of the acquires waiting in the pool's queue.", func(i *limiter.PoolInfo) float64 { return float64(i.Status.WaitingWeight) }),
			g("tollgate_pool_concurrency_limit", "Configured concurrency limit of the pool; 0 when it has none.", func(i *limiter.PoolInfo) float64 { return float64(i.Config.ConcurrencyLimit) }),
			g("tollgate_pool_rate_limit", "Configured rate of the pool's token bucket in tokens per second; 0 when it has none.", func(i *limiter.PoolInfo) float64 { return i.Config.Rate }),
			g("tollgate_pool_effective_concurrency_limit", "Concurrency limit in force: the configured one unless adaptive control lowered it; 0 when the pool has none.", func(i *limiter.PoolInfo) float64 { return float64(i.Status.EffectiveConcurrencyLimit) }),
			g("tollgate_pool_effective_rate_limit", "Rate in force in tokens per second: the configured one unless adaptive control lowered it; 0 when the pool has none.", func(i *limiter.PoolInfo) float64 { return i.Status.EffectiveRate }),
			g("tollgate_pool_burst", "Configured burst (bucket size) of the pool in tokens; 0 when it has no rate.", func(i *limiter.PoolInfo) float64 { return float64(i.Config.Burst) }),
			g("tollgate_pool_max_waiters", "Configured bound of the pool's wait queue.", func(i *limiter.PoolInfo) float64 { return float64(i.Config.MaxWaiters) }),
			g("tollgate_pool_tokens_available", "Tokens in the pool's bucket now (negative while takes wait for reserved tokens); 0 when it has no rate.", func(i *limiter.PoolInfo) float64 { return i.Status.TokensAvailable }),
		},
		poolCounters: []poolMetric{
			g("tollgate_pool_grants_total", "Leases granted by the pool.", func(i *limiter.PoolInfo) float64 { return float64(i.Status.Granted) }),
			g("tollgate_pool_releases_total", "Leases released by their holders.", func(i *limiter.PoolInfo) float64 { return float64(i.Status.Released) }),
			g("tollgate_pool_expiries_total", "Leases that expired because their holders did not renew them.", func(i *limiter.PoolInfo) float64 { return float64(i.Status.Expired) }),
			g("tollgate_pool_rejections_total", "Acquires and takes refused at once (queue full, no capacity in try mode, tokens not available in time).", func(i *limiter.PoolInfo) float64 { return float64(i.Status.Rejected) }),
			g("tollgate_pool_wait_timeouts_total", "Waits that ended ungranted at their wait timeout or deadline.", func(i *limiter.PoolInfo) float64 { return float64(i.Status.WaitTimeouts) }),
			g("tollgate_pool_cancellations_total", "Waits abandoned by their callers.", func(i *limiter.PoolInfo) float64 { return float64(i.Status.Canceled) }),
			g("tollgate_pool_tokens_granted_total", "Rate tokens granted by Take and by Acquire in pools with a rate.", func(i *limiter.PoolInfo) float64 { return float64(i.Status.TokensGranted) }),
		},
		suppressed: prometheus.NewDesc("tollgate_pool_events_suppressed_total", "Mark events (kind: pool_overload, pool_drained, pool_near_full, pool_low_utilisation) not recorded because one of their kind from the pool came within --mark-event-interval before.", []string{"pool", "kind"}, nil),

		pools:      prometheus.NewDesc("tollgate_pools", "Pools on the server.", nil, nil),
		unexported: prometheus.NewDesc("tollgate_pools_unexported", "Pools past --metrics-pools in name order, whose gauges and counters /metrics leaves out.", nil, nil),
		waiters:    prometheus.NewDesc("tollgate_waiters", "Acquires and takes in progress across all pools (bounded by --max-waiters).", nil, nil),
		sessions:   prometheus.NewDesc("tollgate_session_streams", "Session streams open.", nil, nil),
		serving:    prometheus.NewDesc("tollgate_serving", "1 while the server serves, 0 once shutdown has started.", nil, nil),
		refusals:   prometheus.NewDesc("tollgate_limit_refusals_total", "Calls refused by a server-wide or per-client limit, by limit (the serve flag that sets it).", []string{"limit"}, nil),
	}
}

// Describe sends every descriptor the collector uses.
func (c *engineCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range c.poolGauges {
		ch <- m.desc
	}
	for _, m := range c.poolCounters {
		ch <- m.desc
	}
	c.waits.vec.Describe(ch)
	c.holds.vec.Describe(ch)
	for _, d := range []*prometheus.Desc{c.suppressed, c.pools, c.unexported, c.waiters, c.sessions, c.serving, c.refusals} {
		ch <- d
	}
}

// Collect reads the engine and the server's counters.
func (c *engineCollector) Collect(ch chan<- prometheus.Metric) {
	src := c.src
	limit := c.maxPools
	if limit < 0 {
		limit = math.MaxInt
	}
	infos, _ := src.ListPools("", limit)
	total := src.NumPools()
	live := make(map[string]bool, len(infos))
	for i := range infos {
		info := &infos[i]
		name := info.Config.Name
		live[name] = true
		for _, m := range c.poolGauges {
			ch <- prometheus.MustNewConstMetric(m.desc, prometheus.GaugeValue, m.get(info), name)
		}
		for _, m := range c.poolCounters {
			ch <- prometheus.MustNewConstMetric(m.desc, prometheus.CounterValue, m.get(info), name)
		}
		for t, kind := range src.MarkKinds() {
			ch <- prometheus.MustNewConstMetric(c.suppressed, prometheus.CounterValue, float64(info.Status.SuppressedMarkEvents.Of(t)), name, kind)
		}
	}
	exists := func(name string) bool {
		_, err := src.GetPool(name)
		return err == nil
	}
	for _, h := range []*PoolHistograms{c.waits, c.holds} {
		h.prune(live, exists)
		h.vec.Collect(ch)
	}

	ch <- prometheus.MustNewConstMetric(c.pools, prometheus.GaugeValue, float64(total))
	ch <- prometheus.MustNewConstMetric(c.unexported, prometheus.GaugeValue, float64(max(0, total-len(infos))))
	ch <- prometheus.MustNewConstMetric(c.waiters, prometheus.GaugeValue, float64(src.Quotas().Waiters()))
	ch <- prometheus.MustNewConstMetric(c.sessions, prometheus.GaugeValue, float64(src.Sessions()))
	serving := 0.0
	if src.Serving() {
		serving = 1
	}
	ch <- prometheus.MustNewConstMetric(c.serving, prometheus.GaugeValue, serving)
	for k, name := range limits.Names {
		ch <- prometheus.MustNewConstMetric(c.refusals, prometheus.CounterValue, float64(src.Quotas().Refused(limits.Kind(k))), name)
	}
}
