package limiter

import (
	"errors"
	"time"

	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// Release ends a live lease, returns its permits to the pool at once,
// granting waiters they now fit, and returns the lease as it was when
// released (the zero Lease when it returns an error, and for a lease from
// before a restart that was never re-adopted, which the engine does not
// know). During the pool's recovery window after a restart, releasing a
// lease from before the restart that was not re-adopted succeeds (see
// RestorePool). See WithOutcome for reporting how the work went.
//
// Errors: apierr.ErrPoolNotFound; apierr.ErrLeaseExpired (it expired before the
// release, so the work ran unprotected at the end; reported once the
// expiry has been processed); apierr.ErrLeaseNotFound (released already, or never
// issued); apierr.ErrInvalidArgument for a bad outcome (then nothing is
// released).
func (e *Engine) Release(pool string, token uint64, opts ...ReleaseOption) (Lease, error) {
	o := releaseOptionsOf(opts)
	if o.outcome != nil {
		if err := checkOutcome(o.outcome.Outcome, o.outcome.Latency); err != nil {
			return Lease{}, err
		}
	}
	p, err := e.lockPool(pool)
	if err != nil {
		return Lease{}, err
	}
	defer p.unlock()
	var released Lease
	l := p.leases[token]
	switch {
	case l == nil && p.rec.mayName(token) && p.dur.releaseUnknown(token):
		// A lease from before a restart, not re-adopted, was held safely
		// until now, since nothing was granted over it.
		p.stats.Released++
	case l == nil:
		err = p.ended.missingErr(p.name, token, p.lastToken)
	default:
		// A lease still in the map is released even if its expiry instant
		// has just passed and the expiry timer has not run yet: the permits
		// go back either way, and not reading the clock keeps Release cheap.
		// (Renew, by contrast, refuses: extending such a lease would be
		// wrong.)
		p.removeLeaseLocked(l)
		p.dur.liveChanged() // not re-adopted after a restart
		p.stats.Released++
		if p.queue.len() > 0 || p.csh.count() > 0 {
			p.dispatchLocked(e.clock.Now())
		}
		released = l.Lease
	}
	if o.outcome != nil && (err == nil || errors.Is(err, apierr.ErrLeaseExpired)) {
		p.recordOutcomesLocked(outcomeBucketOf(o.outcome.Outcome, o.outcome.Latency), e.clock.Now())
	}
	return released, err
}

// ReleaseOption qualifies a Release.
type ReleaseOption func(*releaseOptions)

type releaseOptions struct {
	outcome *ReleaseOutcome
}

func releaseOptionsOf(opts []ReleaseOption) releaseOptions {
	if len(opts) == 0 {
		return releaseOptions{} // no allocation on the common path
	}
	var o releaseOptions
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// WithOutcome makes a Release count how the work done under the lease
// ended (latency 0: not measured), as RecordOutcome would, under the same
// lock. The outcome is counted when the release succeeds or the lease had
// expired (the work ran either way, and how it went tells about the
// protected system), not for a lease the pool does not know, so a retried
// release counts once.
func WithOutcome(o Outcome, latency time.Duration) ReleaseOption {
	return func(ro *releaseOptions) { ro.outcome = &ReleaseOutcome{Outcome: o, Latency: latency} }
}

// ReleaseOutcome is how the work done under a released lease ended, as
// RecordOutcome takes it: an Outcome and its latency (0: not measured).
type ReleaseOutcome struct {
	Outcome Outcome
	Latency time.Duration
}

// Renew extends a live lease to ttl from now (0: the TTL it has, capped at
// the pool's current MaxLeaseTTL) and returns
// it; a non-nil owner replaces the lease's Owner. It never makes the
// expiry earlier: a renew with a TTL shorter than what is left keeps the
// expiry the lease has (and takes ttl as its TTL for the next renew). A lease whose ExpireTime
// has passed cannot be renewed, even if the expiry timer has not run yet.
// It never re-adopts a lease from before a restart; RenewOrReadopt does.
// Errors: apierr.ErrPoolNotFound; apierr.ErrLeaseExpired (the holder must stop);
// apierr.ErrLeaseNotFound; apierr.ErrInvalidArgument (ttl out of range);
// apierr.ErrStorageFailed (the new expiry could not be reserved; the lease keeps
// its old one).
func (e *Engine) Renew(pool string, token uint64, ttl time.Duration, owner any) (Lease, error) {
	return e.renew(pool, token, ttl, owner, nil)
}

// renew is Renew and, with a non-nil ra, RenewOrReadopt.
func (e *Engine) renew(pool string, token uint64, ttl time.Duration, owner any, ra *Readopt) (Lease, error) {
	if ttl < 0 {
		return Lease{}, errorf(apierr.ErrInvalidArgument, "ttl %v is negative", ttl)
	}
	p, err := e.lockPool(pool)
	if err != nil {
		return Lease{}, err
	}
	defer p.unlock()
	now := e.clock.Now()
	l := p.leases[token]
	if l == nil && ra != nil { // a lease from before a restart is re-adopted
		nl, err := p.readoptLocked(token, ttl, ra, owner, now)
		if err != nil || nl != nil {
			var out Lease
			if nl != nil {
				out = nl.Lease
			}
			return out, err
		}
	}
	if l == nil || !l.ExpireTime.After(now) {
		ended := p.expireDueLocked(now)
		if len(ended) > 0 {
			p.dispatchLocked(now)
		}
		err := p.ended.missingErr(p.name, token, p.lastToken)
		p.endedLocked(ended)
		return Lease{}, err
	}
	if ttl == 0 {
		// Keep the lease's TTL, but within the pool's maximum as it is now:
		// an operator lowering max_lease_ttl must not make every holder's
		// keep-alive fail.
		ttl = min(l.TTL, p.cfg.MaxLeaseTTL)
	}
	if ttl, err = p.cfg.leaseTTL(ttl); err != nil {
		return Lease{}, err
	}
	// A renew never moves the expiry earlier than one already signed: the
	// lease then stays live until the latest expiry any of its receipts
	// shows, so that no receipt outlives it (docs/recovery.md).
	expiry := now.Add(ttl)
	if expiry.After(l.ExpireTime) {
		if err := p.reserveLocked(now, expiry, 0); err != nil { // durable horizon first
			return Lease{}, err
		}
		l.ExpireTime = expiry
		p.expiry.fix(l.index)
	}
	l.TTL = ttl
	if owner != nil {
		l.owner = owner
	}
	return p.csh.leaseOut(l), nil
}
