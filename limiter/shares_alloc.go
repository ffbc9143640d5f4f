package limiter

import (
	"math"
	"sort"
)

// shareUnits is how many units a token per second is divided into for
// share accounting: shares are counted in integer micro-tokens per second,
// so that the sum of granted shares is exact and can be checked against
// the pool's rate without rounding error.
const shareUnits = 1_000_000

// toShareUnits converts a rate in tokens per second to share units,
// rounding down (a grant never exceeds the rate it comes from).
func toShareUnits(r float64) int64 {
	if !(r > 0) {
		return 0
	}
	return int64(math.Floor(r * shareUnits))
}

// fromShareUnits converts share units back to tokens per second.
func fromShareUnits(u int64) float64 { return float64(u) / shareUnits }

// fairTargets sets the target of every share: the weighted max-min fair
// (water-filling) division of capacity among their wants. A share that
// wants less than its weighted fair part gets what it wants, and what it
// leaves is divided among the others in proportion to their weights,
// until every share either has what it wants or is at the common level
// (target = level × weight). The targets sum to at most capacity. order
// is scratch space; the (possibly grown) slice is returned for reuse.
//
// It runs in O(n log n) for n shares.
func fairTargets(shares []*share, capacity int64, order []*share) []*share {
	var wantSum int64
	for _, s := range shares {
		wantSum += s.want // at most MaxSharesPerPool × MaxRate × shareUnits: no overflow
	}
	if wantSum <= capacity {
		for _, s := range shares {
			s.target = s.want
		}
		return order
	}
	order = append(order[:0], shares...)
	sort.Slice(order, func(i, j int) bool {
		a, b := order[i], order[j]
		// want/weight ascending, compared without division.
		return float64(a.want)*float64(b.weight) < float64(b.want)*float64(a.weight)
	})
	remaining := float64(capacity)
	var weights float64
	for _, s := range order {
		weights += float64(s.weight)
	}
	for i, s := range order {
		if float64(s.want) <= remaining*float64(s.weight)/weights {
			s.target = s.want
			remaining -= float64(s.want)
			weights -= float64(s.weight)
			continue
		}
		// Every share from here on wants more than its fair part: all
		// are held at the common level.
		level := remaining / weights
		for _, r := range order[i:] {
			r.target = min(r.want, int64(math.Floor(level*float64(r.weight))))
		}
		break
	}
	clear(order) // drop the pointers
	return order[:0]
}
