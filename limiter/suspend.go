package limiter

import (
	"context"
	"errors"
	"time"

	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// This file is suspend, resume and drain: an operator stopping a pool's
// grants, starting them again, and waiting for its leases to end.

// SuspendPool stops the pool's grants of leases: acquires keep queueing
// (a no-wait acquire fails with apierr.ErrNoCapacity, saying the pool is
// suspended) and nothing is granted until ResumePool. Held leases
// continue and may be renewed and released; with revokeHeld, they are all
// revoked at once, as RevokeLease does, with a reason saying the pool was
// suspended. Exact tokens (Take) and rate shares are not affected. With a
// Persister, the suspension is written before it takes effect and a
// restored pool stays suspended. Suspending a suspended pool changes
// nothing but may revoke. Errors: apierr.ErrPoolNotFound; apierr.ErrStorageFailed
// (nothing was changed); apierr.ErrShuttingDown.
func (e *Engine) SuspendPool(name string, revokeHeld bool, opts ...CallOption) (PoolInfo, error) {
	actor := callOptionsOf(opts).actor
	p, err := e.lockPool(name)
	if err != nil {
		return PoolInfo{}, err
	}
	now := e.clock.Now()
	if !p.susp.on { // written first, then made so
		if err := p.dur.write(nil, func(sp *SavedPool) { sp.Suspended, sp.UpdateTime = true, now }, "suspend or resume pool "+quote(p.name)); err != nil {
			p.unlock()
			return PoolInfo{}, err
		}
		p.susp.on, p.updateTime = true, now.UnixNano()
	}
	var ended []LeaseEnded
	if revokeHeld {
		ended = p.expireDueLocked(now) // past their expiry: expired, not revoked
		reason := "pool " + quote(name) + " was suspended by an operator, revoking its leases"
		for _, l := range leasesByToken(p.leases) {
			ended = append(ended, p.revokeLocked(l, reason, actor, now))
		}
	}
	info := p.infoLocked(now)
	p.endedLocked(ended)
	p.unlock()
	return info, nil
}

// ResumePool lets a suspended pool grant again, at once granting the
// waiters that fit. Resuming a pool that is not suspended changes nothing.
// With a Persister, the change is written first. Errors: apierr.ErrPoolNotFound;
// apierr.ErrStorageFailed (nothing was changed); apierr.ErrShuttingDown.
func (e *Engine) ResumePool(name string) (PoolInfo, error) {
	p, err := e.lockPool(name)
	if err != nil {
		return PoolInfo{}, err
	}
	defer p.unlock()
	now := e.clock.Now()
	if p.susp.on { // written first, then made so
		if err := p.dur.write(nil, func(sp *SavedPool) { sp.Suspended, sp.UpdateTime = false, now }, "suspend or resume pool "+quote(p.name)); err != nil {
			return PoolInfo{}, err
		}
		p.susp.on, p.updateTime = false, now.UnixNano()
	}
	p.dispatchLocked(now)
	return p.infoLocked(now), nil
}

// DrainPool waits until the pool holds no leases (its held weight is 0)
// and returns its info then. It does not stop grants: suspend the pool
// first (SuspendPool) so that the pool stays drained. Leases from before
// a restart that were not re-adopted are not counted. Errors:
// apierr.ErrPoolNotFound; apierr.ErrWaitTimeout (ctx's deadline passed; the message
// says what is still held); apierr.ErrCanceled; apierr.ErrPoolDeleted (the pool was
// deleted while waiting); apierr.ErrShuttingDown.
func (e *Engine) DrainPool(ctx context.Context, name string) (PoolInfo, error) {
	p, err := e.lookup(name)
	if err != nil {
		return PoolInfo{}, err
	}
	for {
		p.mu.Lock()
		if p.deleted {
			p.unlock()
			return PoolInfo{}, errorf(apierr.ErrPoolDeleted, "pool %q was deleted while draining it", name)
		}
		now := e.clock.Now()
		if p.held == 0 {
			info := p.infoLocked(now)
			p.unlock()
			return info, nil
		}
		if p.susp.drained == nil {
			p.susp.drained = make(chan struct{})
		}
		ch := p.susp.drained
		p.unlock()

		select {
		case <-ch:
			continue // look again: a grant may have followed
		case <-e.done:
			return PoolInfo{}, errorf(apierr.ErrShuttingDown, "the server is shutting down")
		case <-ctx.Done():
		}
		p.mu.Lock()
		held, n, suspended := p.held, len(p.leases), p.susp.on
		p.unlock()
		hint := ""
		if !suspended {
			hint = "; the pool is not suspended, so new grants may keep it busy"
		}
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return PoolInfo{}, errorf(apierr.ErrWaitTimeout, "pool %q still holds %d permits in %d leases at the call's deadline%s; wait longer, or suspend it revoking its held leases", name, held, n, hint)
		}
		return PoolInfo{}, errorf(apierr.ErrCanceled, "the drain of pool %q was cancelled with %d permits held in %d leases", name, held, n)
	}
}

// suspension is whether an operator suspended a pool, and who waits for
// it to drain.
type suspension struct {
	on      bool          // no new grants
	drained chan struct{} // closed when held reaches 0; nil until a DrainPool waits
}

// admits holds back every grant while the pool is suspended.
func (su *suspension) admits(_, _ int64, _ time.Time) bool { return !su.on }

// describe says that the pool is suspended.
func (su *suspension) describe(int64, time.Time) string {
	if !su.on {
		return ""
	}
	return "suspended by an operator until it is resumed"
}

// stop does nothing: a suspension has no timer.
func (su *suspension) stop() {}

// status fills in whether the pool is suspended.
func (su *suspension) status(s *PoolStatus, _ time.Time) { s.Suspended = su.on }

// notifyDrained wakes the DrainPool callers, if any: the pool holds
// nothing.
func (su *suspension) notifyDrained() {
	if su.drained != nil {
		close(su.drained)
		su.drained = nil
	}
}
