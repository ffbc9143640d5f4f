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

	// The pool's name, safe rate, configured rate and burst (configure),
	// and its effective rate (setRate), which the shares divide.
	pool     string
	safeRate float64
	confRate float64
	burst    int64
	rate     float64

	clock   Clock
	timers  timerHost // told when the expiry timer or the recovery window ends
	timer   Timer
	timerAt int64 // Unix ns; 0 when not armed

	rec *shareRecovery // after a restart; nil outside the window
}

// init sets up the table of a new pool of cfg and effective rate rate;
// timers is told when the expiry timer goes off, and when the recovery
// window ends.
func (t *shareTable) init(cfg PoolConfig, rate float64, clock Clock, timers timerHost) {
	t.clock, t.timers = clock, timers
	t.configure(cfg)
	t.rate = rate
}

// configure takes the pool's configuration (at creation and on every
// update, before setRate).
func (t *shareTable) configure(cfg PoolConfig) {
	t.pool, t.safeRate, t.confRate, t.burst = cfg.Name, cfg.SafeRate, cfg.Rate, cfg.Burst
}

// snapshot returns s as its holder sees it.
func (t *shareTable) snapshot(s *share) Share {
	out := Share{
		Pool: t.pool, ID: s.id, ClientID: s.clientID,
		Want: fromShareUnits(s.want), Weight: s.weight,
		Rate:     fromShareUnits(s.granted),
		SafeRate: t.safeRate,
		TTL:      s.ttl, RefreshInterval: s.ttl / 3,
		GrantTime: s.grantAt, ExpireTime: s.expire, Version: s.version,
	}
	if s.granted > 0 && t.confRate > 0 {
		out.Burst = max(1, int64(math.Ceil(out.Rate*float64(t.burst)/t.confRate)))
	}
	return out
}

// capacity is the rate shares divide, in share units: the effective
// rate. After a restart, the rate shares from before it may still be
// spending (phantom) is not part of it.
func (t *shareTable) capacity() int64 {
	return max(0, toShareUnits(t.rate)-t.rec.spending())
}

// sharedRate is the rate granted as shares, in tokens per second.
func (t *shareTable) sharedRate() float64 { return fromShareUnits(t.granted) }

// exactRate is the rate the pool's bucket refills at: the effective rate
// minus the rate granted as shares (and, after a restart, minus what
// shares from before it may still be spending).
func (t *shareTable) exactRate() float64 {
	r := t.rate - t.sharedRate() - fromShareUnits(t.rec.spending())
	if t.granted+t.rec.spending() > 0 && r < 1.0/shareUnits {
		return 0 // shares hold the whole rate; what is left is rounding
	}
	return max(0, r)
}

// targets recomputes the fair targets if they are stale.
func (t *shareTable) targets() {
	if !t.dirty {
		return
	}
	t.order = fairTargets(t.list, t.capacity(), t.order)
	t.dirty = false
}

// setGrant sets s's granted rate to g (share units).
func (t *shareTable) setGrant(s *share, g int64) {
	t.granted += g - s.granted
	s.granted = g
	s.version++
}

// grantable is the most s may be granted now: its target, within what
// the others leave of the capacity.
func (t *shareTable) grantable(s *share) int64 {
	free := t.capacity() - (t.granted - s.granted)
	return max(0, min(s.target, free))
}

// grow gives the rate no share holds to the shares below their targets,
// oldest first, and pushes each grown share to its holder.
func (t *shareTable) grow(ob *outbox) {
	free := t.capacity() - t.granted
	for _, s := range t.list {
		if free <= 0 {
			return
		}
		if s.granted >= s.target {
			continue
		}
		add := min(s.target-s.granted, free)
		t.setGrant(s, s.granted+add)
		free -= add
		t.push(ob, ShareChanged, s)
	}
}

// setRate brings the shares in line with a new effective rate: with none,
// every share is revoked; otherwise shares above their new targets are
// shrunk at once (and pushed), and rate left free goes to shares below
// their targets. The caller adjusts the bucket (applyRateLocked).
func (t *shareTable) setRate(rate float64, ob *outbox) {
	t.rate = rate
	if len(t.list) == 0 {
		return
	}
	if rate == 0 {
		t.endAll(ShareRevoked, ob)
		return
	}
	t.dirty = true
	t.targets()
	for _, s := range t.list {
		if s.granted > s.target {
			t.setGrant(s, s.target)
			t.push(ob, ShareChanged, s)
		}
	}
	t.grow(ob)
}

// push puts an update of s in the outbox, for Options.OnShareUpdate.
func (t *shareTable) push(ob *outbox, kind ShareUpdateKind, s *share) {
	ob.shares = append(ob.shares, ShareUpdate{Kind: kind, Share: t.snapshot(s), Owner: s.owner})
}

// add puts a new share in the table, with nothing granted yet, and
// recomputes the targets.
func (t *shareTable) add(s *share) {
	if t.byID == nil {
		t.byID = make(map[uint64]*share)
	}
	t.byID[s.id] = s
	t.list = append(t.list, s)
	t.expiry.push(s)
	t.dirty = true
	t.targets()
}

// remove takes s out of the table, freeing its rate (the caller grows the
// others and adjusts the bucket).
func (t *shareTable) remove(s *share) {
	t.setGrant(s, 0)
	delete(t.byID, s.id)
	if s.index >= 0 {
		t.expiry.remove(s)
	}
	if i := slices.Index(t.list, s); i >= 0 {
		t.list = slices.Delete(t.list, i, i+1)
	}
	t.dirty = true
}

// endAll ends every share, pushing kind to their holders.
func (t *shareTable) endAll(kind ShareUpdateKind, ob *outbox) {
	for _, s := range slices.Clone(t.list) {
		t.remove(s)
		t.push(ob, kind, s)
	}
}
