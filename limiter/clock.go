package limiter

import "time"

// Clock is the engine's source of time. Every decision the engine makes
// (grants, expiry, token refill, wait timeouts) reads time from its Clock, so
// tests drive the engine with a fake clock and never sleep.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// AfterFunc calls f in its own goroutine once d has passed, unless the
	// returned Timer is stopped first.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending call made by Clock.AfterFunc.
type Timer interface {
	// Stop prevents the call if it has not started; it reports whether it
	// did so.
	Stop() bool
	// Reset schedules the call again, d from now, whether or not it has run
	// or was stopped. It reports whether the timer was pending.
	Reset(d time.Duration) bool
}

// SystemClock is the Clock of the real world: time.Now and time.AfterFunc.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// AfterFunc returns time.AfterFunc(d, f).
func (SystemClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }
