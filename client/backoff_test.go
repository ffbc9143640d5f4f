package client

import (
	"testing"
	"time"
)

// TestBackoffDelay: a pause doubles from base up to max, jittered ±20%;
// with a deadline, it is at most a quarter of the time left (so that
// reconnects keep up with a lease's deadline, however many tries came
// before), but not below minRetry.
func TestBackoffDelay(t *testing.T) {
	b := backoff{base: 50 * time.Millisecond, max: 2 * time.Second}
	within := func(what string, got, want time.Duration) {
		t.Helper()
		lo, hi := time.Duration(float64(want)*(1-jitter)), time.Duration(float64(want)*(1+jitter))
		if got < lo || got > hi {
			t.Fatalf("%s: %v, want %v ±20%%", what, got, want)
		}
	}
	var spread [2]time.Duration
	for i := range 200 {
		within("try 1", b.delay(0, time.Time{}), 50*time.Millisecond)
		within("try 4", b.delay(3, time.Time{}), 400*time.Millisecond)
		within("try 100", b.delay(99, time.Time{}), 2*time.Second)
		// 8s left: the cap (2s) is above the maximum.
		within("try 100, 8s+ left", b.delay(99, time.Now().Add(8*time.Second+100*time.Millisecond)), 2*time.Second)
		// 1.2s left: at most 300ms.
		if d := b.delay(99, time.Now().Add(1200*time.Millisecond)); d > 360*time.Millisecond || d < 230*time.Millisecond {
			t.Fatalf("try 100, 1.2s left: %v, want about 300ms", d)
		}
		// Early tries are not lengthened by the cap.
		within("try 1, 1.2s left", b.delay(0, time.Now().Add(1200*time.Millisecond)), 50*time.Millisecond)
		// Near or past the deadline: minRetry.
		within("try 100, 100ms left", b.delay(99, time.Now().Add(100*time.Millisecond)), minRetry)
		d := b.delay(99, time.Now().Add(-time.Second))
		within("try 100, past the deadline", d, minRetry)
		if i == 0 || d < spread[0] {
			spread[0] = d
		}
		spread[1] = max(spread[1], d)
	}
	if spread[1]-spread[0] < 5*time.Millisecond {
		t.Fatalf("200 pauses all within %v..%v: not jittered", spread[0], spread[1])
	}
}
