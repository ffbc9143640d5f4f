package limiter

import (
	"math"
	"math/bits"
	"time"
)

// Wait-time distribution: every grant records the time from its acquire's
// arrival to the grant (0 for a grant made at once) in its pool's
// waitHist, a fixed array of counters, so that recording allocates
// nothing and costs a few nanoseconds under the pool's lock.
//
// Resolution: buckets are log-scale, four per power of two from 1024ns
// up to 2^46ns (about 19.5h; longer waits count in the last bucket), so a
// percentile, reported as its bucket's upper edge (and never above the
// exact maximum), is at most 25% above the true value. Waits under
// 1024ns count as 0.
//
// Window: counts live in WaitSlots slots of WaitSlot each, by the
// engine's clock; a summary covers the slot now and the WaitSlots-1
// before it, so it spans between WaitWindow-WaitSlot and WaitWindow of
// grants.
const (
	// WaitSlot is the length of one slot of the wait-time window.
	WaitSlot = 10 * time.Second
	// WaitSlots is the number of slots in the window.
	WaitSlots = 6
	// WaitWindow is the span of the wait-time window.
	WaitWindow = WaitSlot * WaitSlots

	waitMinShift = 10 // waits under 1<<waitMinShift ns count as 0
	waitSubBits  = 2  // 1<<waitSubBits buckets per power of two
	waitOctaves  = 46 - waitMinShift
	waitBuckets  = 1 + waitOctaves<<waitSubBits
)

// WaitTimes summarizes the waits of the grants in a pool's recent window.
// Percentiles are bucket upper edges: see the resolution above.
type WaitTimes struct {
	// Window is the span the figures cover (WaitWindow).
	Window time.Duration
	// Count is the number of grants in the window.
	Count int64
	// P50, P90 and P99 are percentiles of the waits; Max the longest wait,
	// exact. All 0 when Count is 0.
	P50, P90, P99, Max time.Duration
}

// waitSlot holds the waits of the grants made in one WaitSlot, and the
// rate tokens granted in it.
type waitSlot struct {
	epoch  int64 // now.UnixNano()/WaitSlot of the grants counted; 0: never used
	count  int64
	max    time.Duration
	tokens int64 // rate tokens granted (less those of takes cancelled in the slot)
	counts [waitBuckets]uint32
}

// waitHist is a pool's sliding window of wait times. Guarded by the
// pool's mutex. Its slots (3.7 KB) are allocated at the pool's first
// grant, and let go by a summary that finds them all out of the window,
// so that an idle pool does not keep them.
type waitHist struct {
	slots *[WaitSlots]waitSlot
}

// waitEpoch returns the slot number of now.
func waitEpoch(now time.Time) int64 { return now.UnixNano() / int64(WaitSlot) }

// slot returns now's slot, emptied if it held an older one.
func (h *waitHist) slot(now time.Time) *waitSlot {
	ep := waitEpoch(now)
	if h.slots == nil {
		h.slots = new([WaitSlots]waitSlot)
	}
	s := &h.slots[uint64(ep)%WaitSlots]
	if s.epoch != ep {
		*s = waitSlot{epoch: ep}
	}
	return s
}

// record counts a grant at now that waited d.
func (h *waitHist) record(now time.Time, d time.Duration) {
	s := h.slot(now)
	s.counts[waitBucket(d)]++
	s.count++
	s.max = max(s.max, d)
}

// addTokens counts n rate tokens granted at now (negative: given back by
// a cancelled take).
func (h *waitHist) addTokens(now time.Time, n int64) {
	h.slot(now).tokens += n
}

// tokens returns the rate tokens granted in the window that ends in
// now's slot, and when that window began (the start of its oldest slot).
func (h *waitHist) tokens(now time.Time) (int64, time.Time) {
	ep := waitEpoch(now)
	var n int64
	for i := range h.live() {
		if s := &h.slots[i]; s.epoch != 0 && s.epoch <= ep && s.epoch > ep-WaitSlots {
			n += s.tokens
		}
	}
	return max(n, 0), time.Unix(0, (ep-WaitSlots+1)*int64(WaitSlot))
}

// rateUtilisation returns the rate tokens granted in the window that
// ends in now's slot (or since born, when that is later) over what a
// bucket refilling at rate gives in that time; 0 when rate is 0.
func (h *waitHist) rateUtilisation(now time.Time, rate float64, born time.Time) float64 {
	if rate <= 0 {
		return 0
	}
	tokens, since := h.tokens(now)
	if born.After(since) {
		since = born
	}
	if span := now.Sub(since).Seconds(); span > 0 {
		return float64(tokens) / (rate * span)
	}
	return 0
}

// live returns the number of slots allocated: 0 or WaitSlots.
func (h *waitHist) live() int {
	if h.slots == nil {
		return 0
	}
	return WaitSlots
}

// waitBucket returns the bucket of a wait of d.
func waitBucket(d time.Duration) int {
	if d < 1<<waitMinShift {
		return 0
	}
	ns := uint64(d)
	e := bits.Len64(ns) - 1 // ns is in [2^e, 2^(e+1))
	sub := int(ns>>(e-waitSubBits)) & (1<<waitSubBits - 1)
	return min(1+(e-waitMinShift)<<waitSubBits+sub, waitBuckets-1)
}

// waitBucketUpper returns the upper edge of bucket i.
func waitBucketUpper(i int) time.Duration {
	if i == 0 {
		return 0
	}
	e := waitMinShift + (i-1)>>waitSubBits
	sub := (i - 1) & (1<<waitSubBits - 1)
	return time.Duration(uint64(1)<<e + uint64(sub+1)<<(e-waitSubBits))
}

// summary returns the waits of the window that ends in now's slot.
func (h *waitHist) summary(now time.Time) WaitTimes {
	wt := WaitTimes{Window: WaitWindow}
	ep := waitEpoch(now)
	var counts [waitBuckets]uint64
	inWindow := false
	for i := range h.live() {
		s := &h.slots[i]
		if s.epoch == 0 || s.epoch > ep || s.epoch <= ep-WaitSlots {
			continue
		}
		inWindow = true
		wt.Count += s.count
		wt.Max = max(wt.Max, s.max)
		for b, c := range s.counts {
			counts[b] += uint64(c)
		}
	}
	if !inWindow {
		h.slots = nil // idle for a whole window: nothing to keep
	}
	if wt.Count == 0 {
		return wt
	}
	pct := func(q float64) time.Duration {
		rank := uint64(math.Ceil(q * float64(wt.Count)))
		var seen uint64
		for b, c := range counts {
			if seen += c; seen >= rank {
				return min(waitBucketUpper(b), wt.Max)
			}
		}
		return wt.Max
	}
	wt.P50, wt.P90, wt.P99 = pct(0.50), pct(0.90), pct(0.99)
	return wt
}
