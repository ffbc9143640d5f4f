// Package clock defines the time source of the Tollgate engine. Every
// decision the engine makes (grants, expiry, token refill, wait timeouts)
// reads time from a Clock, so tests drive it with a fake clock and never
// sleep. See package fakeclock for the fake.
package clock

import "time"

// Clock is a source of time and timers.
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

// System is the Clock of the real world: time.Now and time.AfterFunc.
type System struct{}

// Now returns time.Now().
func (System) Now() time.Time { return time.Now() }

// AfterFunc returns time.AfterFunc(d, f).
func (System) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }
