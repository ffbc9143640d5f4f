package limiter

import (
	"strings"
	"time"

	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// This file is the operator's calls on the instances of active pools, and
// the listing of any resource pool's instances.

// DefaultRemoveReason is the reason given to holders whose leases a
// RemoveResources without a reason revokes.
const DefaultRemoveReason = "removed by an operator"

// AddResources adds instances to the active pool named pool, free, and
// grants waiters they now fit. Ids must be new to the pool and distinct;
// attributes are copied. With a Persister, the pool's new instances are
// written before they become visible. Errors: apierr.ErrPoolNotFound;
// apierr.ErrNotActive (a free or passive pool); apierr.ErrInvalidArgument (no instances,
// more than MaxResourcesPerCall, a bad id or attribute, an id twice);
// apierr.ErrResourceExists (an id is in the pool already; nothing is added);
// apierr.ErrTooManyResources (the pool would hold more than
// MaxResourcesPerPool); apierr.ErrStorageFailed (nothing was added);
// apierr.ErrShuttingDown.
func (e *Engine) AddResources(pool string, rs []Resource) (PoolInfo, error) {
	p, err := e.lockPool(pool)
	if err != nil {
		return PoolInfo{}, err
	}
	defer p.unlock()
	if err := checkKind(p.name, p.cfg.ResourceKind, ResourceActive, "its instances come from providers (LimiterService.Provide), not from AddResources"); err != nil {
		return PoolInfo{}, err
	}
	add, err := checkResources(rs, "")
	if err != nil {
		return PoolInfo{}, err
	}
	if err := p.res.checkNew(p.name, add); err != nil {
		return PoolInfo{}, err
	}
	now := e.clock.Now()
	if err := p.dur.write(nil, func(sp *SavedPool) { sp.Resources = p.res.recorded(add, nil) }, "change the instances of pool "+quote(p.name)); err != nil {
		return PoolInfo{}, err
	}
	p.res.addAll(add, now)
	p.dispatchLocked(now)
	p.marksLocked() // the capacity grew
	return p.infoLocked(now), nil
}

// RemoveResult reports what RemoveResources or a withdrawal did.
type RemoveResult struct {
	// Removed counts the instances that left the pool at once (free ones,
	// and held ones whose leases were revoked).
	Removed int
	// Removing counts the held instances that leave when their leases end
	// (wait).
	Removing int
	// Revoked counts the leases revoked.
	Revoked int
}

// RemoveResources takes the instances ids out of the active pool named
// pool. A free instance leaves at once. A held one is granted no more; its
// lease is revoked at once with reason (empty: DefaultRemoveReason),
// reported to OnLeaseEnded with EndRevoked and remembered for the holder's
// next renew, unless wait: then the lease runs on and the instance leaves
// when it ends. Revoking a lease frees its other instances too, and
// waiters they fit are granted. Waiters whose weight is now above the
// pool's instances fail with apierr.ErrLimitBelowWeight. With a Persister, the
// pool's remaining instances are written first (an instance removed with
// wait is already gone from what a restarted server knows).
//
// Errors: apierr.ErrPoolNotFound; apierr.ErrNotActive; apierr.ErrInvalidArgument (no ids, too
// many, an id twice, reason longer than MaxRevokeReasonLen);
// apierr.ErrResourceNotFound (an id is not in the pool; nothing is removed);
// apierr.ErrStorageFailed (nothing was removed); apierr.ErrShuttingDown.
func (e *Engine) RemoveResources(pool string, ids []string, wait bool, reason string, opts ...CallOption) (RemoveResult, error) {
	actor := callOptionsOf(opts).actor
	if err := checkResourceIDs(ids); err != nil {
		return RemoveResult{}, err
	}
	if len(reason) > MaxRevokeReasonLen {
		return RemoveResult{}, errorf(apierr.ErrInvalidArgument, "reason is %d bytes; the most is %d", len(reason), MaxRevokeReasonLen)
	}
	if reason == "" {
		reason = DefaultRemoveReason
	}
	p, err := e.lockPool(pool)
	if err != nil {
		return RemoveResult{}, err
	}
	if err := checkKind(p.name, p.cfg.ResourceKind, ResourceActive, "its instances leave with their providers, or by a withdrawal on the provider's stream"); err != nil {
		p.unlock()
		return RemoveResult{}, err
	}
	ins, err := p.res.lookup(p.name, ids, "")
	if err != nil {
		p.unlock()
		return RemoveResult{}, err
	}
	now := e.clock.Now()
	if err := p.dur.write(nil, func(sp *SavedPool) { sp.Resources = p.res.recorded(nil, ids) }, "change the instances of pool "+quote(p.name)); err != nil {
		p.unlock()
		return RemoveResult{}, err
	}
	res, ended := p.removeInstancesLocked(ins, wait, "was removed from pool "+quote(p.name)+": "+reason, actor, now)
	p.endedLocked(ended)
	p.unlock()
	return res, nil
}

// removeInstancesLocked takes ins out of the pool (resourceSet.remove):
// free ones leave at once; held ones leave when their lease ends, and
// unless wait, those leases are revoked now with reason, which follows the
// names of the lease's instances ("was removed ..."). actor is who removed
// them ("" if unknown or not an operator). It then fails the waiters that
// can no longer be granted and grants those that now fit. It returns the
// leases that ended (those past their expiry first), for the caller to
// report. It does not persist.
func (p *pool) removeInstancesLocked(ins []*instance, wait bool, reason, actor string, now time.Time) (RemoveResult, []LeaseEnded) {
	ended := p.expireDueLocked(now) // leases past their expiry expired: say so first
	removed, holders := p.res.remove(ins)
	revoked := 0
	if !wait {
		for _, l := range holders {
			names := p.res.removingOf(l)
			removed += len(names)
			why := "its instance " + strings.Join(names, ", ") + " " + reason
			ended = append(ended, p.revokeLocked(l, why, actor, now)) // unbinds: removing instances leave
			revoked++
		}
	}
	removing := 0
	for _, in := range ins {
		if in.removing {
			removing++
		}
	}
	p.failWaitersLocked(func(w *waiter) error {
		if err := p.checkWeightLocked(w.g.weight); err != nil {
			return errorf(apierr.ErrLimitBelowWeight, "pool %q lost instances while this acquire waited and can no longer grant weight %d: %v", p.name, w.g.weight, err)
		}
		return nil
	})
	p.dispatchLocked(now)
	p.marksLocked() // the capacity shrank
	return RemoveResult{Removed: removed, Removing: removing, Revoked: revoked}, ended
}

// ListResources returns the instances of the active or passive pool named
// pool, in id order, and the live providers of a passive pool, in id
// order. Errors: apierr.ErrPoolNotFound; apierr.ErrNotResourcePool (a free pool);
// apierr.ErrShuttingDown.
func (e *Engine) ListResources(pool string) ([]ResourceState, []ProviderInfo, error) {
	p, err := e.lockPool(pool)
	if err != nil {
		return nil, nil, err
	}
	defer p.unlock()
	if p.res == nil {
		return nil, nil, errorf(apierr.ErrNotResourcePool, "pool %q is a free pool: its permits are counters, not instances; create an active or passive pool to have instances", p.name)
	}
	return p.res.states(), p.res.providerInfos(), nil
}

// checkKind returns apierr.ErrNotActive or apierr.ErrNotPassive for pool, of kind have,
// unless have is want; why says what to do instead.
func checkKind(pool string, have, want ResourceKind, why string) error {
	if have == want {
		return nil
	}
	kindErr := apierr.ErrNotActive
	if want == ResourcePassive {
		kindErr = apierr.ErrNotPassive
	}
	if have == ResourceFree {
		return errorf(kindErr, "pool %q is a free pool (a counter) and has no instances; create a %s pool to have them", pool, want)
	}
	return errorf(kindErr, "pool %q is %s, not %s: %s", pool, have, want, why)
}

// checkSavedResources validates the instances a Persister recorded, in
// calls' worth, and returns the engine's copies.
func checkSavedResources(saved []Resource) ([]Resource, error) {
	if len(saved) > MaxResourcesPerPool {
		return nil, errorf(apierr.ErrInvalidArgument, "%d saved instances; the most a pool holds is %d", len(saved), MaxResourcesPerPool)
	}
	out := make([]Resource, 0, len(saved))
	for i := 0; i < len(saved); i += MaxResourcesPerCall {
		rs, err := checkResources(saved[i:min(i+MaxResourcesPerCall, len(saved))], "")
		if err != nil {
			return nil, err
		}
		out = append(out, rs...)
	}
	seen := make(map[string]struct{}, len(out))
	for _, r := range out {
		if _, dup := seen[r.ID]; dup {
			return nil, errorf(apierr.ErrInvalidArgument, "instance %q is saved twice", r.ID)
		}
		seen[r.ID] = struct{}{}
	}
	return out, nil
}
