package envoyrls

import (
	"container/heap"
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/tollgate/tollgate/limiter"
)

// table holds the per-value buckets of one pool's rule, at most max of
// them, and the overflow bucket that answers a new value when the table is
// full and none of its buckets can go.
//
// What keeps every value within its bucket's rate whatever other values
// do: a bucket is dropped only when full (a full bucket and a new one
// behave the same), or, when the table shrinks, after the overflow bucket
// was lowered to its level; and a new bucket starts with no more tokens
// than the overflow bucket holds. So the overflow bucket never holds more
// than the bucket of any value that has none, were it kept: the values it
// answers get no more than they would have from their own.
type table struct {
	mu       sync.Mutex
	max      int
	byKey    map[string]*valueBucket
	byFull   fullHeap     // the buckets of byKey, soonest full first
	overflow *valueBucket // in neither byKey nor byFull; made full at the first decision
	epoch    time.Time    // of the first decision; the buckets' times count from it
	last     time.Time    // of the latest decision: the table's clock never goes back
}

// valueBucket is the token bucket of one value (or the overflow bucket).
type valueBucket struct {
	key    string
	lim    *rate.Limiter
	last   int64 // of its latest decision or change, in nanoseconds from the epoch
	fullAt int64 // when it is full again at its rate, in nanoseconds from the epoch
	index  int   // in byFull
}

// maxEvictTries bounds the buckets a new value looks at to find one that
// is full: the soonest full first; after a rate change their order may be
// stale, and each one looked at is put back in its place.
const maxEvictTries = 4

// maxShrinkPerDecision bounds the buckets one decision drops from a table
// left larger than its max by a rule change.
const maxShrinkPerDecision = 2

func newTable(maxBuckets int) *table {
	return &table{max: maxBuckets, byKey: make(map[string]*valueBucket)}
}

// setMax changes the table's bound; a smaller one takes effect over the
// next decisions.
func (t *table) setMax(n int) {
	t.mu.Lock()
	t.max = n
	t.mu.Unlock()
}

// decision is what a table answered for one value.
type decision struct {
	at       time.Time
	ok       bool
	overflow bool // answered from the overflow bucket
	bucket   limiter.BucketState
}

// take takes hits tokens for the value key, from its bucket (made if need
// be) or the overflow bucket. The pool's state, and with it the time of the
// decision, is read under the table's lock, so that decisions are made in
// the order of their times.
func (t *table) take(eng Engine, pool, key string, hits int64) (decision, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	b, err := eng.Bucket(pool)
	if err != nil {
		return decision{}, err
	}
	now := b.At
	if now.Before(t.last) {
		now = t.last
	}
	t.last = now
	if t.overflow == nil {
		t.epoch = now
		t.overflow = &valueBucket{lim: rate.NewLimiter(rate.Limit(b.Rate), int(b.Burst)), index: -1}
	}
	t.shrink(now, b)
	vb := t.byKey[key]
	if vb == nil {
		vb = t.admit(key, now, b)
	}
	t.adapt(vb, now, b)
	ok := vb.lim.AllowN(now, int(hits))
	vb.last = t.ns(now)
	level := vb.lim.TokensAt(now)
	if f := t.fullAt(now, level, b); vb != t.overflow && f != vb.fullAt { // unchanged when nothing was taken
		vb.fullAt = f
		heap.Fix(&t.byFull, vb.index)
	}
	b.Tokens, b.At = level, now
	return decision{at: now, ok: ok, overflow: vb == t.overflow, bucket: b}, nil
}

// admit returns the new bucket of key, or the overflow bucket when the
// table is full and none of its buckets is.
func (t *table) admit(key string, now time.Time, b limiter.BucketState) *valueBucket {
	if len(t.byKey) >= t.max && !t.evictFull(now, b) {
		return t.overflow
	}
	t.adapt(t.overflow, now, b)
	vb := &valueBucket{key: key, lim: rate.NewLimiter(rate.Limit(b.Rate), int(b.Burst)), last: t.ns(now)}
	t.lowerTo(vb, now, t.overflow.lim.TokensAt(now))
	t.byKey[key] = vb
	heap.Push(&t.byFull, vb)
	return vb
}

// evictFull drops a bucket that is full now, if it finds one.
func (t *table) evictFull(now time.Time, b limiter.BucketState) bool {
	for range maxEvictTries {
		if len(t.byFull) == 0 {
			return false
		}
		top := t.byFull[0]
		t.adapt(top, now, b)
		level := top.lim.TokensAt(now)
		if level >= float64(top.lim.Burst()) {
			t.drop(top)
			return true
		}
		was := top.fullAt
		top.fullAt = t.fullAt(now, level, b)
		if top.fullAt == was {
			return false // in its place: no bucket is full
		}
		heap.Fix(&t.byFull, 0)
	}
	return false
}

// shrink drops buckets while the table is over its bound, the fullest
// first, each after lowering the overflow bucket to its level.
func (t *table) shrink(now time.Time, b limiter.BucketState) {
	for i := 0; i < maxShrinkPerDecision && len(t.byKey) > t.max && len(t.byFull) > 0; i++ {
		top := t.byFull[0]
		t.adapt(top, now, b)
		t.adapt(t.overflow, now, b)
		t.lowerTo(t.overflow, now, top.lim.TokensAt(now))
		t.drop(top)
	}
}

func (t *table) drop(vb *valueBucket) {
	heap.Remove(&t.byFull, vb.index)
	delete(t.byKey, vb.key)
}

// adapt gives vb the pool's rate and burst, from when they changed (or
// from vb's latest decision, if later): tokens refilled before then at the
// old rate stay, and no others appear.
func (t *table) adapt(vb *valueBucket, now time.Time, b limiter.BucketState) {
	r, burst := rate.Limit(b.Rate), int(b.Burst)
	if vb.lim.Limit() == r && vb.lim.Burst() == burst {
		return
	}
	at := min(max(t.ns(b.Since), vb.last), t.ns(now))
	vb.lim.SetLimitAt(t.time(at), r)
	vb.lim.SetBurstAt(t.time(at), burst)
	vb.last = at
}

// lowerTo takes tokens from vb until it holds at most level at now; it
// may go below zero (a debt later refills pay) to get there.
func (t *table) lowerTo(vb *valueBucket, now time.Time, level float64) {
	burst := vb.lim.Burst()
	for cur := vb.lim.TokensAt(now); cur > level && burst > 0; {
		n := int(min(math.Ceil(cur-level), float64(burst)))
		vb.lim.ReserveN(now, n) // never refused: n ≤ burst, and it may wait
		cur -= float64(n)
		vb.last = max(vb.last, t.ns(now))
	}
}

// fullAt is when a bucket at level now is full again at the pool's rate.
func (t *table) fullAt(now time.Time, level float64, b limiter.BucketState) int64 {
	missing := float64(b.Burst) - level
	switch {
	case missing <= 0:
		return t.ns(now)
	case b.Rate <= 0:
		return math.MaxInt64
	}
	ns := math.Ceil(missing / b.Rate * float64(time.Second))
	if ns >= float64(math.MaxInt64-t.ns(now)) {
		return math.MaxInt64
	}
	return t.ns(now) + int64(ns)
}

// ns is x in nanoseconds from the table's epoch, by the monotonic clock
// when both have it.
func (t *table) ns(x time.Time) int64 { return int64(x.Sub(t.epoch)) }

// time is the instant ns nanoseconds from the table's epoch.
func (t *table) time(ns int64) time.Time { return t.epoch.Add(time.Duration(ns)) }

// fullHeap orders buckets by the time they are full again.
type fullHeap []*valueBucket

func (h fullHeap) Len() int           { return len(h) }
func (h fullHeap) Less(i, j int) bool { return h[i].fullAt < h[j].fullAt }
func (h fullHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}

func (h *fullHeap) Push(x any) {
	vb := x.(*valueBucket)
	vb.index = len(*h)
	*h = append(*h, vb)
}

func (h *fullHeap) Pop() any {
	old := *h
	vb := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	vb.index = -1
	return vb
}
