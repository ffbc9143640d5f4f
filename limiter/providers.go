package limiter

import (
	"sort"
	"time"

	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// This file is the providers of passive pools: processes that offer
// instances at run time and keep them alive. A provider that leaves, or
// that the engine hears nothing from for its TTL, takes its instances out
// of the pool, and the leases bound to them are revoked.

// ProviderSpec describes a provider registering with a passive pool.
type ProviderSpec struct {
	// ID is unique among the pool's live providers: 1 to
	// MaxResourceIDLen characters of [A-Za-z0-9._:/-].
	ID string
	// Identity and Address record who registered it (an authenticated
	// name, a network address), for operators; at most MaxClientIDLen
	// bytes each.
	Identity, Address string
	// TTL is the keep-alive: the provider leaves if none of its calls
	// reaches the engine for this long. 0 means DefaultProviderTTL;
	// otherwise MinProviderTTL to MaxProviderTTL.
	TTL time.Duration
	// Owner is an opaque value handed back in the provider's events (the
	// server attaches its stream), so the owner can be told when the
	// provider expires.
	Owner any
}

// ProviderInfo is a live provider as operators see it.
type ProviderInfo struct {
	ID, Identity, Address string
	TTL                   time.Duration
	// JoinTime is when it registered and ExpireTime when it leaves unless
	// it is heard from, by the engine's clock.
	JoinTime, ExpireTime time.Time
	// Resources counts the instances it offers now.
	Resources int
}

// provider is a live provider, guarded by its pool's mutex.
type provider struct {
	ProviderSpec
	joinTime time.Time
	expireAt time.Time
	timer    Timer
	res      map[string]*instance // the instances it offers
	handle   *Provider
}

// Provider is a handle on a registration with a passive pool, returned by
// RegisterProvider. Its methods are safe for concurrent use. Once the
// provider has left (Leave, its TTL passed, or the pool was deleted),
// they fail with apierr.ErrProviderNotFound saying why.
type Provider struct {
	p  *pool
	id string
	// gone says why the provider left; empty while it is live. Guarded by
	// p.mu.
	gone string
}

// RegisterProvider registers a provider with the passive pool named pool
// and offers the instances offer (which may be empty), as Offer does. It
// reports PoolEvent ProviderJoined. Errors: apierr.ErrPoolNotFound; apierr.ErrNotPassive;
// apierr.ErrInvalidArgument (a bad id, TTL, identity, address or instance);
// apierr.ErrProviderExists (a live provider has spec.ID); apierr.ErrTooManyProviders;
// apierr.ErrResourceExists and apierr.ErrTooManyResources (nothing is registered);
// apierr.ErrShuttingDown.
func (e *Engine) RegisterProvider(pool string, spec ProviderSpec, offer []Resource) (*Provider, error) {
	if err := validateResourceID("provider", spec.ID); err != nil {
		return nil, err
	}
	if spec.TTL == 0 {
		spec.TTL = DefaultProviderTTL
	}
	switch {
	case spec.TTL < MinProviderTTL || spec.TTL > MaxProviderTTL:
		return nil, errorf(apierr.ErrInvalidArgument, "provider ttl %v is out of range [%v, %v]", spec.TTL, MinProviderTTL, MaxProviderTTL)
	case len(spec.Identity) > MaxClientIDLen || len(spec.Address) > MaxClientIDLen:
		return nil, errorf(apierr.ErrInvalidArgument, "provider identity or address is longer than %d bytes", MaxClientIDLen)
	}
	var add []Resource
	if len(offer) > 0 {
		var err error
		if add, err = checkResources(offer, spec.ID); err != nil {
			return nil, err
		}
	}
	p, err := e.lockPool(pool)
	if err != nil {
		return nil, err
	}
	if err := checkKind(p.name, p.cfg.ResourceKind, ResourcePassive, "its instances are declared by operators"); err != nil {
		p.unlock()
		return nil, err
	}
	if old := p.res.providers[spec.ID]; old != nil {
		p.unlock()
		return nil, errorf(apierr.ErrProviderExists, "pool %q has a live provider %q (registered from %s at %s); pick another id, or wait for it to leave (at the latest %s)",
			pool, spec.ID, old.Address, old.joinTime.UTC().Format(time.RFC3339), old.expireAt.UTC().Format(time.RFC3339Nano))
	}
	if len(p.res.providers) >= MaxProvidersPerPool {
		p.unlock()
		return nil, errorf(apierr.ErrTooManyProviders, "pool %q has %d live providers, the most it may have", pool, MaxProvidersPerPool)
	}
	if err := p.res.checkNew(p.name, add); err != nil {
		p.unlock()
		return nil, err
	}
	now := e.clock.Now()
	pr := &provider{ProviderSpec: spec, joinTime: now, expireAt: now.Add(spec.TTL), res: make(map[string]*instance)}
	pr.handle = &Provider{p: p, id: spec.ID}
	pr.timer = e.clock.AfterFunc(spec.TTL, pr.handle.onTimer)
	p.res.providers[spec.ID] = pr
	p.out.events = append(p.out.events, PoolEvent{Pool: pool, Type: ProviderJoined, Time: now, Provider: spec.ID, Owner: spec.Owner,
		Message: "provider " + quote(spec.ID) + " joined from " + spec.Address + " with a keep-alive TTL of " + spec.TTL.String()})
	if p.res.offer(pr, add, now) {
		p.dispatchLocked(now)
		p.marksLocked() // the capacity grew
	}
	p.unlock() // delivers the outbox
	return pr.handle, nil
}

// ID returns the provider's id.
func (h *Provider) ID() string { return h.id }

// liveLocked returns the live provider behind h, or apierr.ErrProviderNotFound.
// It keeps the provider alive. The caller holds h.p.mu.
func (h *Provider) liveLocked(now time.Time) (*provider, error) {
	p := h.p
	if h.gone != "" {
		return nil, errorf(apierr.ErrProviderNotFound, "provider %q is no longer in pool %q: %s; register again", h.id, p.name, h.gone)
	}
	if p.deleted {
		return nil, errorf(apierr.ErrProviderNotFound, "provider %q is no longer in pool %q: the pool was deleted", h.id, p.name)
	}
	pr := p.res.providers[h.id]
	if pr == nil || pr.handle != h {
		return nil, errorf(apierr.ErrProviderNotFound, "provider %q is no longer in pool %q; register again", h.id, p.name)
	}
	if !now.Before(pr.expireAt) { // the timer is due but has not run: it is gone
		return nil, errorf(apierr.ErrProviderNotFound, "provider %q of pool %q missed its keep-alive (TTL %v); register again", h.id, p.name, pr.TTL)
	}
	pr.expireAt = now.Add(pr.TTL)
	pr.timer.Reset(pr.TTL)
	return pr, nil
}

// KeepAlive tells the engine the provider is alive: it stays for another
// TTL from now. Every other call on the handle does the same. Errors:
// apierr.ErrProviderNotFound (it left; its instances are gone).
func (h *Provider) KeepAlive() (ProviderInfo, error) {
	p := h.p
	p.mu.Lock()
	defer p.unlock()
	pr, err := h.liveLocked(p.e.clock.Now())
	if err != nil {
		return ProviderInfo{}, err
	}
	return pr.infoLocked(), nil
}

// Offer adds instances to the pool on behalf of the provider, free, and
// grants waiters they now fit. Errors: apierr.ErrProviderNotFound;
// apierr.ErrInvalidArgument; apierr.ErrResourceExists (an id is in the pool, from any
// provider; nothing is added); apierr.ErrTooManyResources.
func (h *Provider) Offer(rs []Resource) (ProviderInfo, error) {
	add, err := checkResources(rs, h.id)
	if err != nil {
		return ProviderInfo{}, err
	}
	p := h.p
	p.mu.Lock()
	defer p.unlock()
	now := p.e.clock.Now()
	pr, err := h.liveLocked(now)
	if err != nil {
		return ProviderInfo{}, err
	}
	if err := p.res.checkNew(p.name, add); err != nil {
		return ProviderInfo{}, err
	}
	if p.res.offer(pr, add, now) {
		p.dispatchLocked(now)
		p.marksLocked() // the capacity grew
	}
	return pr.infoLocked(), nil
}

// offer adds add (checked) as pr's instances, and reports whether there
// were any (the caller then grants waiters they fit). An instance awaited
// by a lease re-adopted after a restart is handed over to pr as it is,
// held.
func (rs *resourceSet) offer(pr *provider, add []Resource, now time.Time) bool {
	fresh := add[:0:0]
	for _, r := range add {
		if in := rs.byID[r.ID]; in != nil && in.awaited {
			in.awaited = false
			in.Resource = r
			pr.res[in.ID] = in
			continue
		}
		fresh = append(fresh, r)
	}
	for _, in := range rs.addAll(fresh, now) {
		pr.res[in.ID] = in
	}
	return len(add) > 0
}

// Withdraw takes instances the provider offered out of the pool, as
// Engine.RemoveResources does for an active pool: free ones at once, held
// ones by revoking their leases (reason: withdrawn by the provider) or,
// with wait, when their leases end. Errors: apierr.ErrProviderNotFound;
// apierr.ErrInvalidArgument; apierr.ErrResourceNotFound (the provider offers no such
// instance; nothing is withdrawn).
func (h *Provider) Withdraw(ids []string, wait bool) (RemoveResult, ProviderInfo, error) {
	if err := checkResourceIDs(ids); err != nil {
		return RemoveResult{}, ProviderInfo{}, err
	}
	p := h.p
	p.mu.Lock()
	now := p.e.clock.Now()
	pr, err := h.liveLocked(now)
	if err != nil {
		p.unlock()
		return RemoveResult{}, ProviderInfo{}, err
	}
	ins, err := p.res.lookup(p.name, ids, h.id)
	if err != nil {
		p.unlock()
		return RemoveResult{}, ProviderInfo{}, err
	}
	res, ended := p.removeInstancesLocked(ins, wait, "was withdrawn from pool "+quote(p.name)+" by its provider "+quote(h.id), "", now)
	info := pr.infoLocked()
	p.endedLocked(ended)
	p.unlock()
	return res, info, nil
}

// Leave takes the provider out of the pool for reason (for people): its
// instances leave, the leases bound to them are revoked with a reason
// naming the provider, and PoolEvent ProviderLeft is reported. Errors:
// apierr.ErrProviderNotFound (it left already).
func (h *Provider) Leave(reason string) error {
	p := h.p
	p.mu.Lock()
	now := p.e.clock.Now()
	if h.gone != "" || p.deleted {
		_, err := h.liveLocked(now)
		p.unlock()
		return err
	}
	h.leaveLocked(reason, false, now)
	p.unlock() // delivers the outbox
	return nil
}

// Info returns the provider as operators see it, without keeping it
// alive. Errors: apierr.ErrProviderNotFound.
func (h *Provider) Info() (ProviderInfo, error) {
	p := h.p
	p.mu.Lock()
	defer p.unlock()
	if h.gone != "" || p.deleted {
		_, err := h.liveLocked(p.e.clock.Now())
		return ProviderInfo{}, err
	}
	return p.res.providers[h.id].infoLocked(), nil
}

// leaveLocked takes the provider, live, out of its pool: its instances
// leave, the leases on them are revoked (reported through the outbox,
// with the ProviderLeft event, which says whether the provider expired),
// and waiters the revoked leases' other instances fit are granted.
func (h *Provider) leaveLocked(reason string, expired bool, now time.Time) {
	p := h.p
	pr := p.res.providers[h.id]
	pr.timer.Stop()
	delete(p.res.providers, pr.ID)
	pr.handle.gone = reason
	ins := make([]*instance, 0, len(pr.res))
	for _, in := range pr.res {
		ins = append(ins, in)
	}
	sort.Slice(ins, func(i, j int) bool { return ins[i].ID < ins[j].ID })
	_, ended := p.removeInstancesLocked(ins, false, "left pool "+quote(p.name)+" with its provider "+quote(pr.ID)+": "+reason, "", now)
	p.out.ended = append(p.out.ended, ended...)
	p.out.events = append(p.out.events, PoolEvent{Pool: p.name, Type: ProviderLeft, Time: now, Provider: pr.ID, Owner: pr.Owner, ProviderExpired: expired,
		Message: "provider " + quote(pr.ID) + " left: " + reason + "; " + itoa(int64(len(ins))) + " instances left with it, " + itoa(int64(len(ended))) + " leases ended"})
}

// onTimer runs when the provider's keep-alive may have run out.
func (h *Provider) onTimer() {
	p := h.p
	p.mu.Lock()
	pr := p.res.providers[h.id]
	if p.deleted || pr == nil || pr.handle != h || !p.e.acting() {
		p.unlock()
		return
	}
	now := p.e.clock.Now()
	if left := pr.expireAt.Sub(now); left > 0 { // kept alive since the timer was set
		pr.timer.Reset(left)
		p.unlock()
		return
	}
	h.leaveLocked("it missed its keep-alive (nothing heard for its TTL of "+pr.TTL.String()+")", true, now)
	p.unlock() // delivers the outbox
}

// stop stops the providers' timers for good (pool deleted, engine
// closed).
func (rs *resourceSet) stop() {
	for _, pr := range rs.providers {
		pr.timer.Stop()
	}
}

// providerInfos returns the live providers, in id order.
func (rs *resourceSet) providerInfos() []ProviderInfo {
	if len(rs.providers) == 0 {
		return nil
	}
	prs := rs.providersByID()
	out := make([]ProviderInfo, len(prs))
	for i, pr := range prs {
		out[i] = pr.infoLocked()
	}
	return out
}

func (pr *provider) infoLocked() ProviderInfo {
	return ProviderInfo{ID: pr.ID, Identity: pr.Identity, Address: pr.Address, TTL: pr.TTL, JoinTime: pr.joinTime, ExpireTime: pr.expireAt, Resources: len(pr.res)}
}

// providersGone marks every provider gone with its deleted pool, and
// returns the ProviderLeft events to report, at now. The instances go
// with the pool.
func (rs *resourceSet) providersGone(pool string, now time.Time) []PoolEvent {
	var evs []PoolEvent
	for _, pr := range rs.providersByID() {
		pr.handle.gone = "the pool was deleted"
		evs = append(evs, PoolEvent{Pool: pool, Type: ProviderLeft, Time: now, Provider: pr.ID, Owner: pr.Owner,
			Message: "provider " + quote(pr.ID) + " left: the pool was deleted"})
	}
	return evs
}

// providersByID returns the live providers, in id order.
func (rs *resourceSet) providersByID() []*provider {
	out := make([]*provider, 0, len(rs.providers))
	for _, pr := range rs.providers {
		out = append(out, pr)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}
