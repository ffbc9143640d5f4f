package client

import "time"

// Observer receives client-side measurements, for metrics: how long
// acquires waited, and how long work held its lease and how it ended. Set
// it in Dialer.Observer. Its methods are called synchronously on the
// goroutine that made the call, so they must be quick and safe for
// concurrent use; they must not call the Client.
//
// The events are structs so that fields can be added without breaking
// implementations.
type Observer interface {
	// AcquireDone is called when an acquire made by Acquire, TryAcquire or
	// Do (and so Group, Map and Wrap) ends, granted or not.
	AcquireDone(AcquireEvent)
	// WorkDone is called when the work run by Do (and so Group, Map and
	// Wrap) has returned and its lease has been released (or the release
	// given up). It is not called when the acquire failed (AcquireDone
	// says so), nor when the work panicked. Leases held by hand with
	// Acquire report no WorkDone.
	WorkDone(WorkEvent)
}

// AcquireEvent describes one acquire.
type AcquireEvent struct {
	// Pool is the pool asked.
	Pool string
	// Wait is the time from the call to the grant or the failure,
	// including time spent connecting to the server.
	Wait time.Duration
	// Try is set for TryAcquire.
	Try bool
	// Err is nil when the lease was granted; otherwise the call's error
	// (apierr.ErrWaitTimeout, ErrUnavailable, ctx.Err(), ...).
	Err error
}

// WorkEvent describes one run of work by Do.
type WorkEvent struct {
	// Pool is the pool the work ran under.
	Pool string
	// Wait is the time from the call to Do until the work started: the
	// acquire, or, for a LocalOnly run, the failed acquire plus the wait
	// for the local limit.
	Wait time.Duration
	// Hold is the time from the grant until the lease was released (for a
	// LocalOnly run, until the local permit was returned).
	Hold time.Duration
	// Outcome is the Client's Classifier applied to Err.
	Outcome Outcome
	// Err is the error the work returned.
	Err error
	// LeaseLost is set when the lease was lost while the work held it (the
	// work may have overlapped another holder's; Do's error says so).
	LeaseLost bool
	// LocalOnly is set when the work ran under LocalLimitOnly's local
	// limit, without a lease, because the server could not be reached: it
	// was NOT globally limited.
	LocalOnly bool
}

// acquireDone reports an acquire to the Observer.
func (c *Client) acquireDone(pool string, try bool, start time.Time, err error) {
	if c.settings.observer != nil {
		c.settings.observer.AcquireDone(AcquireEvent{Pool: pool, Wait: time.Since(start), Try: try, Err: err})
	}
}

// workDone classifies a run of work, reports it to the Observer and logs
// it at debug level.
func (c *Client) workDone(ev WorkEvent) {
	if ev.Outcome == 0 { // Do classified it already, for its release
		ev.Outcome = c.classify(ev.Err)
	}
	if c.settings.observer != nil {
		c.settings.observer.WorkDone(ev)
	}
	c.log.Debug("tollgate: work done", "pool", ev.Pool, "wait", ev.Wait, "hold", ev.Hold,
		"outcome", ev.Outcome.String(), "err", ev.Err, "lease_lost", ev.LeaseLost, "local_only", ev.LocalOnly)
}
