package limiter

import "time"

// Lease is a snapshot of a granted lease, as returned to its holder.
type Lease struct {
	// Pool is the name of the pool the lease is from.
	Pool string
	// FencingToken is strictly increasing per pool across all grants. It is
	// also the lease's identifier within its pool: Release and Renew take it.
	FencingToken uint64
	// Weight is the permit weight held (1 or more).
	Weight int64
	// Priority the lease was acquired with.
	Priority int32
	// ClientID and Description are the holder's, as given to Acquire.
	ClientID    string
	Description string
	// TTL the lease was granted or last renewed with.
	TTL time.Duration
	// AcquireTime is when it was granted and ExpireTime when it expires
	// unless renewed, both by the engine's clock.
	AcquireTime time.Time
	ExpireTime  time.Time
	// Resources are the instances the lease is bound to, in an active or
	// passive pool (Weight of them); nil in a free pool.
	// The slice and the attribute maps are shared: do not change them.
	Resources []Resource
	// Share is set when the lease is a concurrency share (ResizeLease), in
	// the snapshots the engine returns and reports.
	Share *ConcShare
}

// AcquireRequest asks for a lease. See Engine.Acquire.
type AcquireRequest struct {
	// Pool to acquire from.
	Pool string
	// Weight of permits to hold: at least 1, and no more than the pool's
	// concurrency limit (and burst, for a pool with a rate).
	Weight int64
	// TTL of the lease; 0 means the pool's DefaultLeaseTTL. At least
	// MinLeaseTTL and at most the pool's MaxLeaseTTL.
	TTL time.Duration
	// Priority in the wait queue: higher is granted first; FIFO within a
	// priority.
	Priority int32
	// WaitTimeout bounds the wait, by the engine's clock; 0 means wait until
	// ctx is done.
	WaitTimeout time.Duration
	// NoWait makes Acquire fail with apierr.ErrNoCapacity rather than wait.
	NoWait bool
	// ClientID (at most MaxClientIDLen bytes) and Description (at most
	// MaxDescriptionLen bytes) are recorded on the lease.
	ClientID    string
	Description string
	// Owner is an opaque value the caller attaches to the lease (the server
	// attaches the session stream that acquired it). It is handed back in
	// LeaseEnded so the owner can be told when the lease ends by itself.
	Owner any
}

// EndReason says why a lease ended without being released.
type EndReason uint8

// End reasons.
const (
	// EndExpired: the lease was not renewed before its expiry.
	EndExpired EndReason = iota + 1
	// EndPoolDeleted: the pool was deleted with force.
	EndPoolDeleted
	// EndRevoked: the lease was revoked (Engine.RevokeLease);
	// LeaseEnded.Message says why.
	EndRevoked
)

// String returns a lower-case name for the reason.
func (r EndReason) String() string {
	switch r {
	case EndExpired:
		return "expired"
	case EndPoolDeleted:
		return "pool deleted"
	case EndRevoked:
		return "revoked"
	}
	return "unknown"
}

// LeaseEnded reports a lease that ended without its holder's release.
type LeaseEnded struct {
	Lease  Lease
	Reason EndReason
	// Owner is the last non-nil Owner given to Acquire or Renew.
	Owner any
	// Message says why, for people: the reason given to RevokeLease for
	// EndRevoked; empty for the other reasons.
	Message string
	// Actor is who revoked the lease, as the caller of RevokeLease,
	// SuspendPool, UpdatePool or RemoveResources named it with ByActor;
	// empty when unknown, for
	// revocations by adaptive control, and for the other reasons.
	Actor string
}

// TakeResult reports a successful Take.
type TakeResult struct {
	// Tokens granted: all that were asked for.
	Tokens int64
	// Waited is how long the engine waited for them, by its clock.
	Waited time.Duration
}

// PoolInfo is a pool's configuration and live status.
type PoolInfo struct {
	// Config with defaults filled in.
	Config PoolConfig
	// CreateTime and UpdateTime by the engine's clock.
	CreateTime time.Time
	UpdateTime time.Time
	Status     PoolStatus
}

// PoolStatus is a pool's live state; counters count since the pool was
// created in this engine.
type PoolStatus struct {
	Held          int64 // permit weight held by live leases
	Leases        int64 // live leases
	Waiting       int64 // acquires waiting
	WaitingWeight int64 // total weight of the acquires waiting
	Granted       int64 // leases granted
	Released      int64 // leases released by their holders
	Expired       int64 // leases that expired
	Revoked       int64 // leases revoked (RevokeLease)
	Rejected      int64 // acquires refused at once (queue full, or NoWait without capacity) and takes refused
	WaitTimeouts  int64 // waits that ended at their timeout or deadline
	Canceled      int64 // waits abandoned by their callers
	TokensGranted int64 // rate tokens granted by Take and by Acquire in pools with a rate
	// TokensAvailable is the bucket's level now; negative while takes wait
	// on reserved tokens; 0 for a pool without a rate.
	TokensAvailable float64
	// LastFencingToken is the highest fencing token issued in the pool
	// (after a restart, the highest that may have been issued before it).
	LastFencingToken uint64
	// Readopted counts leases from before a restart that their holders
	// renewed during the recovery window and the engine took back.
	Readopted int64
	// RecoveringUntil is when the pool's recovery window after a restart
	// ends; the zero time when it is not recovering. See RestorePool.
	RecoveringUntil time.Time
	// Suspended: an operator suspended the pool; it grants no leases until
	// resumed. See SuspendPool.
	Suspended bool
	// Resources counts the instances of an active or passive pool
	// (including those being removed while held), ResourcesFree those free
	// to grant now, and Providers the live providers of a passive pool.
	Resources, ResourcesFree, Providers int64
	// Utilisation is Held / EffectiveConcurrencyLimit now (above 1 while
	// a lowered limit is still over-held); in an active or passive pool,
	// Held / its instances when they are fewer (or it has no limit); 0
	// with neither.
	Utilisation float64
	// SuppressedMarkEvents counts, by type, the mark events not reported
	// because one of their type came within the engine's
	// MarkEventInterval before.
	SuppressedMarkEvents MarkEventCounts

	// Adaptive limits and rate shares.
	AdaptiveStatus
}

// AdaptiveStatus is the part of a pool's status about adaptive limits,
// reported outcomes and rate shares.
type AdaptiveStatus struct {
	// EffectiveConcurrencyLimit and EffectiveRate are the limits grants
	// are checked against now: the configured ones, unless adaptive
	// control lowered them. 0 for a limit the pool does not have.
	EffectiveConcurrencyLimit int64
	EffectiveRate             float64
	// ThrottleReason says why the effective limits are below the
	// configured ones (ThrottleNone when they are not).
	ThrottleReason ThrottleReason
	// LastAdaptiveChange is when adaptive control last cut or raised the
	// effective limits; zero if never.
	LastAdaptiveChange time.Time
	// Outcomes reported (on release and in batches) since the pool was
	// created, whether or not adaptive control is on.
	SuccessesReported, ErrorsReported, TimeoutsReported int64
	// WindowSamples, WindowErrorRatio and WindowLatency describe the
	// adaptive window now: its outcomes, the fraction of errors and
	// timeouts among them, and their mean latency. LatencyBaseline is the
	// long-term mean latency (0: unknown). All 0 without adaptive control.
	WindowSamples    int64
	WindowErrorRatio float64
	WindowLatency    time.Duration
	LatencyBaseline  time.Duration
	// ShareHolders is the number of live rate shares, and SharesGranted
	// the rate they are granted in all, in tokens per second (at most
	// EffectiveRate); the bucket refills at the rest.
	ShareHolders  int64
	SharesGranted float64
}
