package limiter

import (
	"slices"
	"time"

	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// This file is concurrency shares: a client process holds one ordinary
// lease and hands its permits to its own tasks locally. The lease's weight
// changes while it lives (ResizeLease):
//   - a holder gives weight back at once (shrink), and the freed permits go
//     to the waiters and to the shares below their fair part;
//   - a lease becomes a share when its holder says how much it wants; the
//     engine then divides the capacity that ordinary leases and waiters
//     leave among the shares (max-min fair: a share that wants less than an
//     equal part gets what it wants, the rest is divided equally among the
//     others) and grows a share toward its part from free capacity only,
//     when no waiter is queued (a queued acquire is never passed);
//   - when a share holds more than its part (others want more, or an
//     acquire waits), the engine says so (its Target is below its Weight)
//     and the holder gives back as its local tasks end.
//
// Growing goes through the same gates as a grant (admitLocked), so the
// held weight never exceeds the effective limit: a share is a lease, and
// invariant 1 is the lease's. Every change to a share that its holder did
// not ask for is reported to Options.OnLeaseResized.

// ConcShare describes a lease that is a concurrency share.
type ConcShare struct {
	// Want is the weight the holder would use now (1 or more).
	Want int64
	// Target is the share's fair part: at most Want and at least 1. A
	// share holding more than its Target should give the difference back
	// as its local tasks end.
	Target int64
	// Version increases with every change to the share's weight or
	// target, so that a holder receiving answers and pushed updates out
	// of order keeps the newest.
	Version uint64
}

// LeaseResize changes a live lease. See Engine.ResizeLease.
type LeaseResize struct {
	Pool  string
	Token uint64
	// Weight is the new weight; 0 keeps it. Below the lease's weight, the
	// difference is given back at once. Above, it is granted only if it
	// fits now and no acquire of the lease's priority or higher waits;
	// otherwise ResizeLease fails with apierr.ErrNoCapacity and nothing changes.
	Weight int64
	// Want, above 0, makes the lease a concurrency share wanting that
	// weight (a want above the pool's concurrency limit counts as the
	// limit); 0 keeps it.
	Want int64
	// Owner, if not nil, replaces the lease's owner (the session updates
	// are pushed to).
	Owner any
}

// LeaseResized reports a change to a concurrency share that its holder
// did not ask for: it grew, or its target changed.
type LeaseResized struct {
	Lease Lease // with Share set
	Owner any
}

// concShare is the engine's record of a concurrency share.
type concShare struct {
	fair   share // want and target in permits, weight 1: for fairTargets
	ver    uint64
	pushed [2]int64 // weight and target as the holder last heard them
}

// concShares are a pool's concurrency shares, by fencing token.
type concShares struct {
	byToken map[uint64]*concShare
	order   []*share // scratch for fairTargets
	tokens  []uint64 // scratch for retarget
	fair    []*share // likewise
	// answering is the lease a ResizeLease answers: its changes are not
	// pushed, the answer carries them.
	answering uint64
}

// ResizeLease changes a live lease's weight and makes it a concurrency
// share, or changes what a share wants (see LeaseResize), then rebalances
// the pool's shares. It returns the lease as it is then (Lease.Share set
// for a share).
//
// Errors: apierr.ErrPoolNotFound; apierr.ErrLeaseExpired, apierr.ErrLeaseRevoked,
// apierr.ErrLeaseNotFound (the holder must stop); apierr.ErrInvalidArgument (a negative
// weight or want, a pool with no concurrency limit, or one with instances;
// a want in a pool with a rate, whose tokens a share would bypass); apierr.ErrNoCapacity (a grow that
// does not fit now).
func (e *Engine) ResizeLease(r LeaseResize) (Lease, error) {
	if r.Weight < 0 || r.Want < 0 {
		return Lease{}, errorf(apierr.ErrInvalidArgument, "weight %d and want %d must not be negative (0 keeps the lease's)", r.Weight, r.Want)
	}
	p, err := e.lockPool(r.Pool)
	if err != nil {
		return Lease{}, err
	}
	defer p.unlock()
	if p.cfg.ConcurrencyLimit == 0 || p.res != nil {
		return Lease{}, errorf(apierr.ErrInvalidArgument, "pool %q has no concurrency limit or has instances; only a lease of a free pool with a concurrency limit can be resized", p.name)
	}
	if r.Want > 0 && p.cfg.Rate > 0 {
		return Lease{}, errorf(apierr.ErrInvalidArgument, "pool %q has a rate: a concurrency share would let its holder start work without taking tokens; use Acquire, or a rate share (AcquireShare) beside a share of a pool without a rate", p.name)
	}
	r.Want = min(r.Want, p.cfg.ConcurrencyLimit) // more could never be granted
	now := e.clock.Now()
	l := p.leases[r.Token]
	if l == nil || !l.ExpireTime.After(now) {
		return Lease{}, p.ended.missingErr(p.name, r.Token, p.lastToken)
	}
	if r.Weight > l.Weight {
		head, queued := p.queue.heap.top()
		if r.Weight > p.cfg.ConcurrencyLimit || (queued && head.g.priority >= l.Priority) || !p.admitLocked(r.Weight-l.Weight, now) {
			return Lease{}, errorf(apierr.ErrNoCapacity, "lease %d of pool %q cannot grow from %d to %d now (%s)", r.Token, p.name, l.Weight, r.Weight, p.busyLocked(now))
		}
		if err := p.reserveLocked(now, l.ExpireTime, r.Weight-l.Weight); err != nil { // within the written held bound, as a grant
			return Lease{}, err
		}
	}
	if r.Owner != nil {
		l.owner = r.Owner
	}
	if p.csh == nil {
		p.csh = &concShares{} // the pool's first
	}
	if r.Want > 0 {
		p.csh.want(r.Token, r.Want)
	}
	if r.Weight > 0 && r.Weight != l.Weight {
		p.setWeightLocked(l, r.Weight)
	}
	p.csh.answering = r.Token
	p.dispatchLocked(now) // serves waiters, then rebalances the shares
	p.csh.answering = 0
	return p.csh.leaseOut(l), nil
}

// setWeightLocked changes a live lease's weight and the pool's held weight.
func (p *pool) setWeightLocked(l *lease, w int64) {
	p.held += w - l.Weight
	l.Weight = w
	p.dur.resized(l.FencingToken, w) // an older receipt, with another weight, is not re-adopted
	if p.held == 0 {
		p.susp.notifyDrained()
	}
	p.marksLocked()
}

// count is the number of shares (none in a nil table: a pool that has
// had no ResizeLease).
func (c *concShares) count() int {
	if c == nil {
		return 0
	}
	return len(c.byToken)
}

// want makes the lease of token a share wanting want, or sets what its
// share wants.
func (c *concShares) want(token uint64, want int64) {
	cs := c.byToken[token]
	if cs == nil {
		if c.byToken == nil {
			c.byToken = make(map[uint64]*concShare)
		}
		cs = &concShare{fair: share{weight: 1}}
		c.byToken[token] = cs
	}
	cs.fair.want = want
}

// leaseOut returns the snapshot of l, with Share set for a share.
func (c *concShares) leaseOut(l *lease) Lease {
	out := l.Lease
	if c == nil {
		return out
	}
	if cs := c.byToken[l.FencingToken]; cs != nil {
		out.Share = &ConcShare{Want: cs.fair.want, Target: cs.fair.target, Version: cs.ver}
	}
	return out
}

// forget drops the share record of a lease that ended.
func (c *concShares) forget(token uint64) {
	if c != nil {
		delete(c.byToken, token)
	}
}

// retarget sets every share's target: its max-min fair part of what
// ordinary leases and waiters leave of the effective limit (of held, the
// shares hold their leases' weights), at least 1. It returns the shares'
// tokens, oldest first (scratch space, valid until the next call).
func (c *concShares) retarget(limit, held, waitingWeight int64, leases map[uint64]*lease) []uint64 {
	tokens, fair := c.tokens[:0], c.fair[:0]
	var shareHeld int64
	for tok := range c.byToken {
		tokens = append(tokens, tok)
	}
	slices.Sort(tokens) // oldest first: growth and reports in a stable order
	for _, tok := range tokens {
		shareHeld += leases[tok].Weight
		fair = append(fair, &c.byToken[tok].fair)
	}
	capacity := max(limit-(held-shareHeld)-waitingWeight, 0)
	c.order = fairTargets(fair, capacity, c.order)
	clear(fair) // drop the pointers
	c.tokens, c.fair = tokens, fair
	for _, tok := range tokens {
		cs := c.byToken[tok]
		cs.fair.target = max(cs.fair.target, 1)
	}
	return tokens
}

// target returns the target of the share of token.
func (c *concShares) target(token uint64) int64 { return c.byToken[token].fair.target }

// heard records that the share of token now has weight and reports
// whether its holder must hear of it: its weight or target changed since
// it last did, and it is not the share a ResizeLease answers.
func (c *concShares) heard(token uint64, weight int64) bool {
	cs := c.byToken[token]
	cur := [2]int64{weight, cs.fair.target}
	if cur == cs.pushed {
		return false
	}
	cs.ver++
	cs.pushed = cur
	return token != c.answering // its holder hears it in the answer
}

// rebalanceConcSharesLocked sets every share's target (concShares.retarget),
// grows shares toward their targets from free capacity when no acquire
// waits, and reports the shares whose weight or target changed to their
// holders. dispatchLocked calls it after serving the queue.
func (p *pool) rebalanceConcSharesLocked(now time.Time) {
	if p.csh.count() == 0 || p.cfg.ConcurrencyLimit == 0 {
		return
	}
	for _, tok := range p.csh.retarget(p.ad.limit, p.held, p.queue.weight, p.leases) {
		l := p.leases[tok]
		if grow := min(p.csh.target(tok)-l.Weight, p.ad.limit-p.held); grow > 0 && p.queue.len() == 0 && p.admitLocked(grow, now) &&
			p.reserveLocked(now, l.ExpireTime, grow) == nil { // a share that cannot write its bound grows later
			p.setWeightLocked(l, l.Weight+grow)
		}
		if p.csh.heard(tok, l.Weight) {
			p.out.resized = append(p.out.resized, LeaseResized{Lease: p.csh.leaseOut(l), Owner: l.owner})
		}
	}
}
