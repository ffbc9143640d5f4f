package limiter

import (
	"fmt"
	"sort"
	"time"

	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// This file is revocation (the engine taking a live lease back) and the
// read-only views of a pool's live leases that operators use to pick one.

// MaxRevokeReasonLen is the longest reason RevokeLease accepts, in bytes.
const MaxRevokeReasonLen = 512

// DefaultRevokeReason is the reason of a RevokeLease that gives none.
const DefaultRevokeReason = "revoked by an operator"

// RevokeLease ends the live lease token of pool at once, whoever holds it:
// its permits go back to the pool and waiters they now fit are granted;
// the end is reported to OnLeaseEnded with EndRevoked and reason as
// LeaseEnded.Message (the server pushes it to the holder's session); and
// the lease is remembered, so that a later Renew or Release of it fails
// with apierr.ErrLeaseRevoked, whose message holds reason. An empty reason means
// DefaultRevokeReason.
//
// Errors: apierr.ErrPoolNotFound; apierr.ErrInvalidArgument (reason longer than
// MaxRevokeReasonLen); apierr.ErrLeaseNotFound (never issued, released, or ended
// long ago), apierr.ErrLeaseExpired and apierr.ErrLeaseRevoked (it ended already);
// apierr.ErrShuttingDown.
func (e *Engine) RevokeLease(pool string, token uint64, reason string, opts ...CallOption) error {
	actor := callOptionsOf(opts).actor
	if len(reason) > MaxRevokeReasonLen {
		return errorf(apierr.ErrInvalidArgument, "reason is %d bytes; the most is %d", len(reason), MaxRevokeReasonLen)
	}
	if reason == "" {
		reason = DefaultRevokeReason
	}
	p, err := e.lockPool(pool)
	if err != nil {
		return err
	}
	now := e.clock.Now()
	ended := p.expireDueLocked(now) // a lease past its expiry expired: say so
	l := p.leases[token]
	if l == nil {
		if len(ended) > 0 {
			p.dispatchLocked(now)
		}
		err := p.ended.missingErr(p.name, token, p.lastToken)
		p.endedLocked(ended)
		p.unlock()
		return err
	}
	ended = append(ended, p.revokeLocked(l, reason, actor, now))
	p.dispatchLocked(now)
	p.endedLocked(ended)
	p.unlock()
	return nil
}

// revokeLocked ends l as revoked for reason by actor ("" if unknown) and
// returns its report. It does not dispatch.
func (p *pool) revokeLocked(l *lease, reason, actor string, now time.Time) LeaseEnded {
	p.removeLeaseLocked(l)
	p.dur.liveChanged() // not re-adopted after a restart
	p.stats.Revoked++
	p.ended.addMsg(l.FencingToken, EndRevoked, now, RevokeReasonBy(reason, actor))
	return LeaseEnded{Lease: l.Lease, Reason: EndRevoked, Owner: l.owner, Message: reason, Actor: actor}
}

// RevokeReasonBy words a revocation for its holder: reason, followed by
// who revoked the lease when actor is not empty ("stuck job (by alice)").
// The engine uses it in the message of apierr.ErrLeaseRevoked; the server in the
// LeaseEvent it pushes.
func RevokeReasonBy(reason, actor string) string {
	if actor == "" {
		return reason
	}
	return reason + " (by " + actor + ")"
}

// enforceLimitLocked applies a RevocationRevoke policy: while the held
// weight is above the effective concurrency limit, it revokes the lease of
// lowest priority, the newest (highest fencing token) first among equals,
// reporting each through the outbox with a reason naming the new limit;
// then it dispatches, as the last revocation may have freed more than
// needed. Under RevocationWait, or within the limit, it does nothing.
// actor is who lowered the limit ("" if unknown, or adaptive control),
// named in the revocations.
func (p *pool) enforceLimitLocked(now time.Time, actor string) {
	if p.cfg.RevocationPolicy != RevocationRevoke || p.cfg.ConcurrencyLimit == 0 || p.held <= p.ad.limit {
		return
	}
	victims := make([]*lease, 0, len(p.leases))
	for _, l := range p.leases {
		victims = append(victims, l)
	}
	sort.Slice(victims, func(i, j int) bool {
		if victims[i].Priority != victims[j].Priority {
			return victims[i].Priority < victims[j].Priority
		}
		return victims[i].FencingToken > victims[j].FencingToken
	})
	reason := fmt.Sprintf("pool %q's concurrency limit was lowered to %d, under the %d held, and its revocation policy is revoke", p.name, p.ad.limit, p.held)
	for _, l := range victims {
		if p.held <= p.ad.limit {
			break
		}
		p.out.ended = append(p.out.ended, p.revokeLocked(l, reason, actor, now))
	}
	p.dispatchLocked(now)
}

// GetLease returns the live lease token of pool. Errors: apierr.ErrPoolNotFound;
// apierr.ErrLeaseNotFound, apierr.ErrLeaseExpired, apierr.ErrLeaseRevoked (it is not live, and
// the message says why as far as the pool remembers); apierr.ErrShuttingDown.
func (e *Engine) GetLease(pool string, token uint64) (Lease, error) {
	p, err := e.lockPool(pool)
	if err != nil {
		return Lease{}, err
	}
	defer p.unlock()
	if l := p.leases[token]; l != nil {
		return l.Lease, nil
	}
	return Lease{}, p.ended.missingErr(p.name, token, p.lastToken)
}

// MaxListScan bounds the leases of other clients one page of ListLeases
// with a client id passes over: past it the page ends early, with a
// cursor to go on from.
const MaxListScan = 4096

// ListLeases returns up to limit live leases of pool whose fencing tokens
// are above after, in token order (oldest grant first), and the token to
// pass as after for the next page, or 0 when none follow. A non-empty
// clientID keeps only the leases of that client; such a page passes over
// at most MaxListScan leases of other clients, and may then be shorter
// than limit (even empty) with a next token. A limit below 1 means 1.
// Leases from before a restart that were not re-adopted are not listed.
//
// Cost: under the pool's lock, O(log n) to find the first lease and then
// the leases of the page (and those passed over); never the whole pool.
// Errors: apierr.ErrPoolNotFound; apierr.ErrShuttingDown.
func (e *Engine) ListLeases(pool, clientID string, after uint64, limit int) ([]Lease, uint64, error) {
	limit = max(limit, 1)
	p, err := e.lockPool(pool)
	if err != nil {
		return nil, 0, err
	}
	defer p.unlock()
	out := make([]Lease, 0, min(limit, 256))
	var next, last uint64
	skipped := 0
	p.byToken.ascendAfter(after, func(l *lease) bool {
		if clientID != "" && l.ClientID != clientID {
			if skipped++; skipped > MaxListScan {
				next = last
				return false
			}
			last = l.FencingToken
			return true
		}
		if len(out) == limit {
			next = last
			return false
		}
		out = append(out, l.Lease)
		last = l.FencingToken
		return true
	})
	return out, next, nil
}

// leasesByToken returns the leases of m in fencing token order.
func leasesByToken(m map[uint64]*lease) []*lease {
	ls := make([]*lease, 0, len(m))
	for _, l := range m {
		ls = append(ls, l)
	}
	sortLeasesByToken(ls)
	return ls
}

// sortLeasesByToken sorts ls by fencing token, oldest grant first.
func sortLeasesByToken(ls []*lease) {
	sort.Slice(ls, func(i, j int) bool { return ls[i].FencingToken < ls[j].FencingToken })
}

// CallOption qualifies an operator's call that may revoke leases
// (RevokeLease, SuspendPool, UpdatePool, RemoveResources).
type CallOption func(*callOptions)

type callOptions struct {
	actor string
}

// ByActor names who makes the call. The revocations it makes name them
// in LeaseEnded.Actor and, through RevokeReasonBy, in the message of a
// later Renew or Release of a revoked lease. Without it, or with an empty
// actor, the actor is unknown.
func ByActor(actor string) CallOption {
	return func(o *callOptions) { o.actor = actor }
}

func callOptionsOf(opts []CallOption) callOptions {
	var o callOptions
	for _, opt := range opts {
		opt(&o)
	}
	return o
}
