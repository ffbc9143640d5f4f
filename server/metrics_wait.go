package server

import (
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// durationBuckets are the upper bounds, in seconds, of the wait-time and
// hold-time histogram buckets; +Inf is implied.
var durationBuckets = []float64{.001, .005, .01, .05, .1, .5, 1, 5, 10, 30, 60, 300}

// durationHistograms keeps, per pool, a histogram of durations: how long
// granted acquires waited (0 for those granted at once), or how long
// released leases were held. Observing is a map read and two atomic adds; the histograms of pools that no longer exist are dropped at
// the next scrape (prune), so memory follows the live pools.
type durationHistograms struct {
	m sync.Map // pool name -> *durationHistogram
}

type durationHistogram struct {
	counts [13]atomic.Uint64 // len(durationBuckets)+1; the last is +Inf
	sumNs  atomic.Int64      // total wait in nanoseconds
}

func newDurationHistograms() *durationHistograms { return &durationHistograms{} }

// observe records a duration d in pool's histogram.
func (w *durationHistograms) observe(pool string, d time.Duration) {
	v, ok := w.m.Load(pool)
	if !ok {
		v, _ = w.m.LoadOrStore(pool, &durationHistogram{})
	}
	h := v.(*durationHistogram)
	d = max(d, 0)
	secs := d.Seconds()
	i := sort.SearchFloat64s(durationBuckets, secs) // first bound >= secs
	h.counts[i].Add(1)
	if h.sumNs.Add(int64(d)) < 0 { // saturate rather than wrap (292 years of waiting)
		h.sumNs.Store(math.MaxInt64)
	}
}

// snapshot returns pool's cumulative bucket counts (keyed by upper bound),
// total count and sum in seconds, and whether the pool has a histogram.
func (w *durationHistograms) snapshot(pool string) (map[float64]uint64, uint64, float64, bool) {
	v, ok := w.m.Load(pool)
	if !ok {
		return nil, 0, 0, false
	}
	h := v.(*durationHistogram)
	buckets := make(map[float64]uint64, len(durationBuckets))
	var cum uint64
	for i, ub := range durationBuckets {
		cum += h.counts[i].Load()
		buckets[ub] = cum
	}
	cum += h.counts[len(durationBuckets)].Load()
	return buckets, cum, time.Duration(h.sumNs.Load()).Seconds(), true
}

// prune drops the histograms of pools that are not in live and for which
// exists (asked only about those) reports false: live was read before, and
// a pool created since has a histogram to keep.
func (w *durationHistograms) prune(live map[string]bool, exists func(string) bool) {
	w.m.Range(func(k, _ any) bool {
		if name := k.(string); !live[name] && !exists(name) {
			w.m.Delete(k)
		}
		return true
	})
}
