package limiter

import "time"

// PoolEventType says what changed in a pool by itself.
type PoolEventType uint8

// Pool event types.
const (
	// PoolThrottled: adaptive control cut the pool's effective limits
	// (PoolEvent.Reason says why).
	PoolThrottled PoolEventType = iota + 1
	// PoolRelieved: adaptive control raised the pool's effective limits
	// toward the configured ones.
	PoolRelieved
	// ProviderJoined: a provider registered with a passive pool
	// (PoolEvent.Provider, Owner and Message say which and how).
	ProviderJoined
	// ProviderLeft: a provider left a passive pool, by Leave, by missing
	// its keep-alive, or with its pool's deletion; Message says why.
	ProviderLeft
	// PoolOverload: the acquires waiting rose to or above the pool's
	// overload mark (PoolEvent.Mark; PoolConfig.OverloadMark).
	PoolOverload
	// PoolDrained: the pool became idle (nothing held, nothing waiting)
	// after a spell in which acquires waited.
	PoolDrained
	// PoolNearFull: held / effective concurrency limit rose to or above
	// the pool's near-full mark.
	PoolNearFull
	// PoolLowUtilisation: held / effective concurrency limit stayed below
	// the pool's low-utilisation mark for a whole period.
	PoolLowUtilisation
)

// String returns "throttled", "relieved", "provider joined", "provider left",
// "overload", "drained", "near_full" or "low_utilisation".
func (t PoolEventType) String() string {
	switch t {
	case PoolThrottled:
		return "throttled"
	case PoolRelieved:
		return "relieved"
	case ProviderJoined:
		return "provider joined"
	case ProviderLeft:
		return "provider left"
	case PoolOverload:
		return "overload"
	case PoolDrained:
		return "drained"
	case PoolNearFull:
		return "near_full"
	case PoolLowUtilisation:
		return "low_utilisation"
	}
	return "unknown"
}

// ThrottleReason says why adaptive control cut a pool's limits.
type ThrottleReason uint8

// Throttle reasons.
const (
	// ThrottleNone: the pool is not throttled.
	ThrottleNone ThrottleReason = iota
	// ThrottleErrors: the fraction of errors and timeouts reported in the
	// window exceeded the pool's error threshold.
	ThrottleErrors
	// ThrottleLatency: the mean latency reported in the window exceeded
	// the latency tolerance times the long-term baseline.
	ThrottleLatency
)

// String returns "", "errors" or "latency".
func (r ThrottleReason) String() string {
	switch r {
	case ThrottleErrors:
		return "errors"
	case ThrottleLatency:
		return "latency"
	}
	return ""
}

// PoolEvent reports something that happened in a pool by itself: a change
// of its effective limits by adaptive control (PoolThrottled,
// PoolRelieved), a mark crossed (PoolOverload, PoolDrained, PoolNearFull,
// PoolLowUtilisation), or a provider joining or leaving a
// passive pool (ProviderJoined, ProviderLeft). Operator
// changes are not reported here: their callers know of them.
type PoolEvent struct {
	Pool string
	Type PoolEventType
	// Time of the change, by the engine's clock.
	Time time.Time
	// Reason of a PoolThrottled event.
	Reason ThrottleReason
	// ConcurrencyLimit and Rate are the effective values after the change,
	// PrevConcurrencyLimit and PrevRate before it, and
	// ConfiguredConcurrencyLimit and ConfiguredRate the configured ones; 0
	// for a limit the pool does not have.
	ConcurrencyLimit, PrevConcurrencyLimit, ConfiguredConcurrencyLimit int64
	Rate, PrevRate, ConfiguredRate                                     float64
	// Samples, ErrorRatio and Latency describe the window the decision was
	// made on: its outcomes, the fraction of errors and timeouts among
	// them and their mean latency (0: none reported). Baseline is the
	// long-term latency baseline (0: unknown).
	Samples    int64
	ErrorRatio float64
	Latency    time.Duration
	Baseline   time.Duration
	// Provider, Owner (its ProviderSpec.Owner) and Message (for people)
	// of a ProviderJoined or ProviderLeft event; ProviderExpired is set on
	// a ProviderLeft event when it left by missing its keep-alive.
	Provider        string
	Owner           any
	Message         string
	ProviderExpired bool

	// For mark events (for them ConcurrencyLimit is the effective limit
	// at the time): Held and Waiting are the weight held and the acquires
	// waiting when the mark was crossed; Utilisation is held / effective
	// concurrency limit then (for PoolLowUtilisation, the highest over the
	// period; 0 without a concurrency limit); Mark is the mark crossed
	// (the overload mark as a count, the others as a fraction; 0 for
	// PoolDrained); Period is PoolLowUtilisation's period. Suppressed
	// counts the crossings of this kind that were not reported since the
	// previous event of this kind, as they came within the engine's
	// MarkEventInterval of it.
	Held, Waiting int64
	Utilisation   float64
	Mark          float64
	Period        time.Duration
	Suppressed    int64
}

// outbox holds what a pool reports to the engine's callbacks and to the
// owners of waits, collected under the pool's lock and delivered by
// Engine.deliver after it is released. It is empty unless a wait ended,
// or adaptive control, rate shares or a revocation policy are in use.
type outbox struct {
	waits  delivery // the last wait that ended (with those before it), whose owners learn their outcomes first
	events []PoolEvent
	shares []ShareUpdate
	ended  []LeaseEnded // leases revoked by a revocation policy
	// resized are concurrency shares changed without their holder asking.
	resized []LeaseResized
}

// deliver hands ended waits their outcomes and calls the engine's
// callbacks with what ob holds. Call it without pool locks held.
func (e *Engine) deliver(ob outbox) {
	deliverWaits(ob.waits) // even when frozen: each wait ends once
	if !e.acting() {
		return // frozen: it publishes nothing
	}
	e.notifyEnded(ob.ended)
	if e.onPoolEvent != nil {
		for _, ev := range ob.events {
			e.onPoolEvent(ev)
		}
	}
	if e.onShareUpdate != nil {
		for _, su := range ob.shares {
			e.onShareUpdate(su)
		}
	}
	if e.onResized != nil {
		for _, r := range ob.resized {
			e.onResized(r)
		}
	}
}

// empty reports whether ob holds nothing to deliver.
func (ob *outbox) empty() bool {
	return ob.waits == nil && len(ob.events) == 0 && len(ob.shares) == 0 && len(ob.ended) == 0 && len(ob.resized) == 0
}

// unlock releases p.mu and then delivers what p's outbox holds (mark
// events are put there wherever held or waiting change, and leases ended
// under the lock by endedLocked). It is the one way to release a pool's
// lock where no other engine lock is held.
func (p *pool) unlock() {
	if p.out.empty() {
		p.mu.Unlock()
		return
	}
	ob := p.out
	p.out = outbox{}
	p.mu.Unlock()
	p.e.deliver(ob)
}

// endedLocked puts leases ended under the lock in the outbox, ahead of
// those already there, so that unlock reports a lease's end before the
// pool_drained it caused.
func (p *pool) endedLocked(ended []LeaseEnded) {
	if len(ended) > 0 {
		p.out.ended = append(ended, p.out.ended...)
	}
}
