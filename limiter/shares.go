package limiter

import (
	"math"
	"slices"
	"time"
)

// This file is rate shares: a client asks for a share of a pool's rate
// ("I want 300/s") and spends it locally with its own token bucket; the
// engine divides the pool's effective rate among the share holders (fair
// share: weighted max-min, see fairTargets) and keeps the sum of the
// granted shares within it at every instant:
//   - a new share gets at most what is not granted to anyone (its target,
//     if that much is free); others give up what they hold above their
//     targets when they refresh, and what they give up goes at once to the
//     shares below their targets (a grown share is pushed to its holder
//     through Options.OnShareUpdate);
//   - when the effective rate is lowered (by an operator or by adaptive
//     control), shares above their new targets are shrunk at once in the
//     engine's table and pushed to their holders, who apply it when the
//     push arrives or at their next refresh, whichever comes first;
//   - a share that is not refreshed expires at its ExpireTime and its rate
//     goes to the others.
//
// The pool's token bucket (Take, and Acquire in a pool with a rate)
// refills at the effective rate minus the rate granted as shares, so
// exact tokens and shares together stay within the pool's rate.

// Bounds of rate shares.
const (
	// MaxSharesPerPool bounds the live shares of one pool; past it,
	// AcquireShare fails with apierr.ErrTooManyShares.
	MaxSharesPerPool = 1000
	// MaxShareWeight bounds ShareRequest.Weight.
	MaxShareWeight = 1000
)

// ShareRequest asks for a share of a pool's rate. See Engine.AcquireShare.
type ShareRequest struct {
	// Pool to take a share of; it must have a rate.
	Pool string
	// Want is the rate the client would use, in tokens per second: above
	// 0 and at most MaxRate.
	Want float64
	// Weight of the share in the fair division (1 to MaxShareWeight; 0
	// means 1): a share of weight 3 gets three times the rate of a share
	// of weight 1 when both want more than they can have.
	Weight int64
	// TTL of the share: it expires unless refreshed within it. 0 means
	// the pool's DefaultLeaseTTL; at least MinLeaseTTL and at most the
	// pool's MaxLeaseTTL.
	TTL time.Duration
	// ClientID names the holder for operators (at most MaxClientIDLen
	// bytes).
	ClientID string
	// Owner is an opaque value handed back in ShareUpdate (the server
	// attaches the session stream to push updates to).
	Owner any
}

// ShareRefresh refreshes a share. See Engine.RefreshShare.
type ShareRefresh struct {
	Pool string
	ID   uint64
	// Want, Weight and TTL replace the share's; 0 keeps them.
	Want   float64
	Weight int64
	TTL    time.Duration
	// Owner, if not nil, replaces the share's Owner.
	Owner any
	// Granted is the rate, in tokens per second, the holder was last
	// granted. A restarted engine re-adopts a share it does not know,
	// during the share recovery window, with at most this rate; 0 means unknown: not re-adopted.
	Granted float64
}

// Share is a snapshot of a granted share of a pool's rate.
type Share struct {
	Pool string
	// ID names the share within its pool. It is random, so that it
	// cannot be guessed and does not repeat after a restart.
	ID       uint64
	ClientID string
	Want     float64
	Weight   int64
	// Rate is the granted rate in tokens per second: what the holder may
	// spend until ExpireTime. It may be less than Want, and 0.
	Rate float64
	// Burst is the bucket size the holder should spend Rate with: the
	// pool's burst in proportion to the share (the same seconds of
	// tokens), at least 1 when Rate is above 0.
	Burst int64
	// SafeRate is the pool's safe rate: what the holder may use once the
	// share has expired because it could not reach the server (0: stop).
	SafeRate float64
	// TTL the share was granted or last refreshed with, and
	// RefreshInterval, how often the holder should refresh (TTL/3).
	TTL             time.Duration
	RefreshInterval time.Duration
	// GrantTime is when the share was granted, ExpireTime when it expires
	// unless refreshed, by the engine's clock.
	GrantTime  time.Time
	ExpireTime time.Time
	// Version increases with every change to the share (grant, refresh,
	// pushed update), so that a holder that gets answers and updates out
	// of order keeps the newest.
	Version uint64
}

// ShareUpdateKind says what happened to a share without its holder
// asking.
type ShareUpdateKind uint8

// Share update kinds.
const (
	// ShareChanged: the engine changed the granted rate (grown from rate
	// others gave back, or shrunk because the pool's effective rate was
	// lowered). The holder should use Share.Rate from now on.
	ShareChanged ShareUpdateKind = iota + 1
	// ShareExpired: the share was not refreshed in time; its rate went to
	// others.
	ShareExpired
	// ShareRevoked: the pool was deleted or lost its rate; the holder must
	// stop.
	ShareRevoked
)

// String returns "changed", "expired" or "revoked".
func (k ShareUpdateKind) String() string {
	switch k {
	case ShareChanged:
		return "changed"
	case ShareExpired:
		return "expired"
	case ShareRevoked:
		return "revoked"
	}
	return "unknown"
}

// ShareUpdate reports a change to a share that its holder did not ask
// for, to Options.OnShareUpdate.
type ShareUpdate struct {
	Kind  ShareUpdateKind
	Share Share
	// Owner is the last non-nil Owner given to AcquireShare or
	// RefreshShare.
	Owner any
}

// share is the engine's record of a live share, guarded by its pool's
// mutex. Rates are in share units.
type share struct {
	id       uint64
	clientID string
	want     int64
	weight   int64
	granted  int64
	target   int64 // fair part, recomputed when dirty
	ttl      time.Duration
	grantAt  time.Time
	expire   time.Time
	owner    any
	index    int    // in the expiry heap; -1 once removed
	version  uint64 // Share.Version
}

// Shares live in an indexedHeap by expiry, like leases.
func (s *share) before(o *share) bool { return s.expire.Before(o.expire) }
func (s *share) setIndex(i int)       { s.index = i }
func (s *share) heapIndex() int       { return s.index }

// shareTable is a pool's shares, guarded by the pool's mutex. Its size is
// bounded by MaxSharesPerPool.
type shareTable struct {
	list    []*share // in grant order: deterministic iteration
	byID    map[uint64]*share
	expiry  indexedHeap[*share]
	granted int64 // sum of granted, in share units
	dirty   bool  // targets must be recomputed
	order   []*share
	ended   tombstones // recently expired or revoked shares, for messages

	timer   Timer
	timerAt time.Time // zero when not armed

	rec shareRecovery // after a restart
}

// snapshotLocked returns s as its holder sees it.
func (p *pool) shareSnapshotLocked(s *share) Share {
	out := Share{
		Pool: p.name, ID: s.id, ClientID: s.clientID,
		Want: fromShareUnits(s.want), Weight: s.weight,
		Rate:     fromShareUnits(s.granted),
		SafeRate: p.cfg.SafeRate,
		TTL:      s.ttl, RefreshInterval: s.ttl / 3,
		GrantTime: s.grantAt, ExpireTime: s.expire, Version: s.version,
	}
	if s.granted > 0 && p.cfg.Rate > 0 {
		out.Burst = max(1, int64(math.Ceil(out.Rate*float64(p.cfg.Burst)/p.cfg.Rate)))
	}
	return out
}

// capacityLocked is the rate shares divide, in share units: the effective
// rate.
// After a restart, the rate shares from before it may still be spending
// (phantom) is not part of it.
func (p *pool) shareCapacityLocked() int64 {
	return max(0, toShareUnits(p.ad.rate)-p.shr.rec.phantom)
}

// sharedRateLocked is the rate granted as shares, in tokens per second.
func (p *pool) sharedRateLocked() float64 { return fromShareUnits(p.shr.granted) }

// exactRateLocked is the rate the pool's bucket refills at: the effective
// rate minus the rate granted as shares (and, after a restart, minus what
// shares from before it may still be spending).
func (p *pool) exactRateLocked() float64 {
	r := p.ad.rate - p.sharedRateLocked() - fromShareUnits(p.shr.rec.phantom)
	if p.shr.granted+p.shr.rec.phantom > 0 && r < 1.0/shareUnits {
		return 0 // shares hold the whole rate; what is left is rounding
	}
	return max(0, r)
}

// targetsLocked recomputes the fair targets if they are stale.
func (p *pool) targetsLocked() {
	t := &p.shr
	if !t.dirty {
		return
	}
	t.order = fairTargets(t.list, p.shareCapacityLocked(), t.order)
	t.dirty = false
}

// setGrantLocked sets s's granted rate to g (share units).
func (p *pool) setGrantLocked(s *share, g int64) {
	p.shr.granted += g - s.granted
	s.granted = g
	s.version++
}

// grantableLocked is the most s may be granted now: its target, within
// what the others leave of the capacity.
func (p *pool) grantableLocked(s *share) int64 {
	free := p.shareCapacityLocked() - (p.shr.granted - s.granted)
	return max(0, min(s.target, free))
}

// growSharesLocked gives the rate no share holds to the shares below
// their targets, oldest first, and pushes each grown share to its holder.
func (p *pool) growSharesLocked() {
	free := p.shareCapacityLocked() - p.shr.granted
	for _, s := range p.shr.list {
		if free <= 0 {
			return
		}
		if s.granted >= s.target {
			continue
		}
		add := min(s.target-s.granted, free)
		p.setGrantLocked(s, s.granted+add)
		free -= add
		p.pushShareLocked(ShareChanged, s)
	}
}

// rebalanceSharesLocked brings the shares in line with a new effective
// rate: with none, every share is revoked; otherwise shares above their
// new targets are shrunk at once (and pushed), and rate left free goes to
// shares below their targets. The caller adjusts the bucket
// (applyRateLocked).
func (p *pool) rebalanceSharesLocked(now time.Time) {
	if len(p.shr.list) == 0 {
		return
	}
	if p.ad.rate == 0 {
		p.endAllSharesLocked(ShareRevoked)
		return
	}
	p.shr.dirty = true
	p.targetsLocked()
	for _, s := range p.shr.list {
		if s.granted > s.target {
			p.setGrantLocked(s, s.target)
			p.pushShareLocked(ShareChanged, s)
		}
	}
	p.growSharesLocked()
}

// pushShareLocked queues an update of s for Options.OnShareUpdate.
func (p *pool) pushShareLocked(kind ShareUpdateKind, s *share) {
	p.out.shares = append(p.out.shares, ShareUpdate{Kind: kind, Share: p.shareSnapshotLocked(s), Owner: s.owner})
}

// removeShareLocked takes s out of the table, freeing its rate (the
// caller grows the others and adjusts the bucket).
func (p *pool) removeShareLocked(s *share) {
	t := &p.shr
	p.setGrantLocked(s, 0)
	delete(t.byID, s.id)
	if s.index >= 0 {
		t.expiry.remove(s)
	}
	if i := slices.Index(t.list, s); i >= 0 {
		t.list = slices.Delete(t.list, i, i+1)
	}
	t.dirty = true
}

// endAllSharesLocked ends every share, pushing kind to their holders.
func (p *pool) endAllSharesLocked(kind ShareUpdateKind) {
	for _, s := range slices.Clone(p.shr.list) {
		p.removeShareLocked(s)
		p.pushShareLocked(kind, s)
	}
}
