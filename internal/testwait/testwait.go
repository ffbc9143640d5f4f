// Package testwait waits, in tests, for a condition that another goroutine
// or process makes true, where the code under test offers no event to wait
// on. Only tests import it.
package testwait

import (
	"testing"
	"time"
)

// Limit is how long For waits: long enough for a loaded machine, so that a
// test fails only when the condition never comes.
const Limit = 20 * time.Second

// For polls cond until it holds, and fails t, naming what it awaited,
// when it has not held within Limit.
func For(t testing.TB, what string, cond func() bool) {
	t.Helper()
	within(t, Limit, what, cond)
}

// within is For with the bound limit.
func within(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	start := time.Now()
	pause := 50 * time.Microsecond
	for !cond() {
		if time.Since(start) > limit {
			t.Fatalf("timed out after %v waiting for %s", limit, what)
		}
		time.Sleep(pause)
		pause = min(2*pause, 10*time.Millisecond)
	}
}
