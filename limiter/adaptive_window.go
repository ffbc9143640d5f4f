package limiter

import "time"

// outcomeWindow is a time-based sliding window of reported outcomes: a
// ring of AdaptiveWindowBuckets buckets, each covering width of the
// engine's clock. Its memory is fixed, whatever the report rate.
type outcomeWindow struct {
	width   time.Duration
	buckets [AdaptiveWindowBuckets]outcomeBucket
	head    int       // the bucket now is in
	start   time.Time // when the head bucket began; zero: empty window
}

// outcomeBucket counts the outcomes of one slice of time.
type outcomeBucket struct {
	successes, errors, timeouts int64
	latN                        int64         // outcomes that carried a latency
	latSum                      time.Duration // their sum (saturating)
	latMax                      time.Duration
}

// add adds b's counts to o.
func (o *outcomeBucket) add(b outcomeBucket) {
	o.successes += b.successes
	o.errors += b.errors
	o.timeouts += b.timeouts
	o.latN += b.latN
	o.latSum = satAdd(o.latSum, b.latSum)
	o.latMax = max(o.latMax, b.latMax)
}

func (o *outcomeBucket) total() int64 { return o.successes + o.errors + o.timeouts }

// badRatio is the fraction of errors and timeouts; 0 when empty.
func (o *outcomeBucket) badRatio() float64 {
	n := o.total()
	if n == 0 {
		return 0
	}
	return float64(o.errors+o.timeouts) / float64(n)
}

// latMean is the mean latency; 0 when no outcome carried one.
func (o *outcomeBucket) latMean() time.Duration {
	if o.latN == 0 {
		return 0
	}
	return o.latSum / time.Duration(o.latN)
}

// satAdd adds two non-negative durations, saturating.
func satAdd(a, b time.Duration) time.Duration {
	if s := a + b; s >= a {
		return s
	}
	return 1<<63 - 1
}

// reset empties the window, with buckets of width.
func (w *outcomeWindow) reset(width time.Duration) {
	*w = outcomeWindow{width: width}
}

// rotate moves the window to now, emptying the buckets it leaves behind,
// and calls closed with each bucket that ends (oldest first), for the
// latency baseline. Time that goes backwards is treated as now.
func (w *outcomeWindow) rotate(now time.Time, closed func(outcomeBucket)) {
	if w.start.IsZero() {
		w.start = now
		return
	}
	d := now.Sub(w.start)
	if d < w.width {
		return
	}
	n := int64(d / w.width)
	if n >= AdaptiveWindowBuckets {
		for i := 1; i <= AdaptiveWindowBuckets; i++ { // every bucket closes, oldest first
			closed(w.buckets[(w.head+i)%AdaptiveWindowBuckets])
		}
		w.buckets = [AdaptiveWindowBuckets]outcomeBucket{}
		w.start = w.start.Add(time.Duration(n) * w.width)
		return
	}
	for i := int64(0); i < n; i++ {
		closed(w.buckets[w.head])
		w.head = (w.head + 1) % AdaptiveWindowBuckets
		w.buckets[w.head] = outcomeBucket{}
	}
	w.start = w.start.Add(time.Duration(n) * w.width)
}

// record adds b to the bucket of now (rotate first).
func (w *outcomeWindow) record(b outcomeBucket) {
	w.buckets[w.head].add(b)
}

// totals sums the window's buckets.
func (w *outcomeWindow) totals() outcomeBucket {
	var t outcomeBucket
	for i := range w.buckets {
		t.add(w.buckets[i])
	}
	return t
}
