package limiter

import (
	"time"

	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// This file declares what active and passive pools are made of: resource
// instances, the kinds of pool, how a free instance is chosen, and the
// limits on them.

// Limits on resource instances and providers.
const (
	// MaxResourcesPerPool is the most instances an active or passive pool
	// holds (including those being removed). Every instance of an active
	// pool is written with the pool on each change, so this also bounds
	// the size of that write.
	MaxResourcesPerPool = 4096
	// MaxResourcesPerCall is the most instances one AddResources,
	// RemoveResources, offer or withdrawal names.
	MaxResourcesPerCall = 1024
	// MaxResourceIDLen is the longest instance or provider id.
	MaxResourceIDLen = 128
	// MaxAttributes is the most attributes an instance has, MaxAttrKeyLen
	// the longest key and MaxAttrValueLen the longest value, in bytes.
	MaxAttributes   = 16
	MaxAttrKeyLen   = 64
	MaxAttrValueLen = 1024
	// MaxProvidersPerPool is the most live providers a passive pool has.
	MaxProvidersPerPool = 1024
	// MinProviderTTL and MaxProviderTTL bound a provider's keep-alive TTL;
	// DefaultProviderTTL is the TTL of a registration that names none.
	MinProviderTTL     = time.Second
	MaxProviderTTL     = 5 * time.Minute
	DefaultProviderTTL = 10 * time.Second
)

// ResourceKind says what a pool's permits are.
type ResourceKind uint8

// Resource kinds.
const (
	// ResourceFree: the pool is a counter; a lease names no instance.
	ResourceFree ResourceKind = iota
	// ResourceActive: an operator declares the pool's instances
	// (AddResources); they are durable with the pool.
	ResourceActive
	// ResourcePassive: providers offer the pool's instances at run time
	// (RegisterProvider, Offer); they leave with their provider.
	ResourcePassive
)

// String returns "free", "active" or "passive".
func (k ResourceKind) String() string {
	switch k {
	case ResourceFree:
		return "free"
	case ResourceActive:
		return "active"
	case ResourcePassive:
		return "passive"
	}
	return "unknown"
}

// ParseResourceKind returns the kind named s ("" means free). Errors:
// apierr.ErrInvalidArgument.
func ParseResourceKind(s string) (ResourceKind, error) {
	switch s {
	case "", "free":
		return ResourceFree, nil
	case "active":
		return ResourceActive, nil
	case "passive":
		return ResourcePassive, nil
	}
	return 0, errorf(apierr.ErrInvalidArgument, "resource kind %q is not one; use free, active or passive", s)
}

// SelectionPolicy says which free instance an active or passive pool
// grants first.
type SelectionPolicy uint8

// Selection policies.
const (
	// SelectReuse grants the most recently released instance first, so
	// few instances stay warm (open connections, filled caches).
	SelectReuse SelectionPolicy = iota
	// SelectSpread grants the least recently used instance first, so the
	// work is spread over every instance.
	SelectSpread
)

// String returns "reuse" or "spread".
func (s SelectionPolicy) String() string {
	switch s {
	case SelectReuse:
		return "reuse"
	case SelectSpread:
		return "spread"
	}
	return "unknown"
}

// ParseSelectionPolicy returns the policy named s ("" means reuse).
// Errors: apierr.ErrInvalidArgument.
func ParseSelectionPolicy(s string) (SelectionPolicy, error) {
	switch s {
	case "", "reuse":
		return SelectReuse, nil
	case "spread":
		return SelectSpread, nil
	}
	return 0, errorf(apierr.ErrInvalidArgument, "selection policy %q is not one; use reuse or spread", s)
}

// Resource is one instance of an active or passive pool.
type Resource struct {
	// ID is unique within the pool: 1 to MaxResourceIDLen characters of
	// [A-Za-z0-9._:/-].
	ID string
	// Attributes tell holders how to use the instance (an address, ...).
	// The engine copies them on the way in and never changes them after:
	// callers must not change the maps it hands out.
	Attributes map[string]string
	// Provider is the id of the provider that offers the instance, in a
	// passive pool; empty in an active pool.
	Provider string
}

// ResourceState is an instance as ListResources reports it.
type ResourceState struct {
	Resource
	// Holder is the live lease the instance is bound to (its fencing
	// token and client id); 0 when it is free.
	Holder         uint64
	HolderClientID string
	// Removing: the instance was removed or withdrawn with wait; it is
	// granted no more and leaves the pool when its lease ends.
	Removing bool
	// AddTime is when it joined the pool; LastRelease when a lease last
	// let it go (zero: never), both by the engine's clock.
	AddTime     time.Time
	LastRelease time.Time
}

// validateResourceID returns apierr.ErrInvalidArgument unless id is a valid
// instance or provider id; what names the kind of id for the message.
func validateResourceID(what, id string) error {
	if id == "" || len(id) > MaxResourceIDLen {
		return errorf(apierr.ErrInvalidArgument, "%s id %q is invalid: use 1 to %d characters of [A-Za-z0-9._:/-]", what, id, MaxResourceIDLen)
	}
	for i := 0; i < len(id); i++ {
		if !poolNameByte(id[i]) {
			return errorf(apierr.ErrInvalidArgument, "%s id %q has %q at position %d; use only [A-Za-z0-9._:/-]", what, id, rune(id[i]), i)
		}
	}
	return nil
}

// checkResources validates instances to add (at most
// MaxResourcesPerCall, valid distinct ids, bounded attributes) and returns
// copies of them whose maps the engine owns, with Provider set to
// provider.
func checkResources(rs []Resource, provider string) ([]Resource, error) {
	if len(rs) == 0 {
		return nil, errorf(apierr.ErrInvalidArgument, "no instances given; name at least one")
	}
	if len(rs) > MaxResourcesPerCall {
		return nil, errorf(apierr.ErrInvalidArgument, "%d instances given in one call; the most is %d: split the call", len(rs), MaxResourcesPerCall)
	}
	out := make([]Resource, len(rs))
	seen := make(map[string]struct{}, len(rs))
	for i, r := range rs {
		if err := validateResourceID("instance", r.ID); err != nil {
			return nil, err
		}
		if _, dup := seen[r.ID]; dup {
			return nil, errorf(apierr.ErrInvalidArgument, "instance %q is named twice in one call", r.ID)
		}
		seen[r.ID] = struct{}{}
		if len(r.Attributes) > MaxAttributes {
			return nil, errorf(apierr.ErrInvalidArgument, "instance %q has %d attributes; the most is %d", r.ID, len(r.Attributes), MaxAttributes)
		}
		var attrs map[string]string
		if len(r.Attributes) > 0 {
			attrs = make(map[string]string, len(r.Attributes))
		}
		for k, v := range r.Attributes {
			if k == "" || len(k) > MaxAttrKeyLen {
				return nil, errorf(apierr.ErrInvalidArgument, "instance %q has an attribute key of %d bytes; keys are 1 to %d bytes", r.ID, len(k), MaxAttrKeyLen)
			}
			if len(v) > MaxAttrValueLen {
				return nil, errorf(apierr.ErrInvalidArgument, "instance %q's attribute %q is %d bytes; the most is %d", r.ID, k, len(v), MaxAttrValueLen)
			}
			attrs[k] = v
		}
		out[i] = Resource{ID: r.ID, Attributes: attrs, Provider: provider}
	}
	return out, nil
}

// checkResourceIDs validates ids to remove or withdraw: 1 to
// MaxResourcesPerCall distinct ids.
func checkResourceIDs(ids []string) error {
	if len(ids) == 0 {
		return errorf(apierr.ErrInvalidArgument, "no instance ids given; name at least one")
	}
	if len(ids) > MaxResourcesPerCall {
		return errorf(apierr.ErrInvalidArgument, "%d instance ids given in one call; the most is %d: split the call", len(ids), MaxResourcesPerCall)
	}
	seen := make(map[string]struct{}, len(ids))
	for _, id := range ids {
		if _, dup := seen[id]; dup {
			return errorf(apierr.ErrInvalidArgument, "instance %q is named twice in one call", id)
		}
		seen[id] = struct{}{}
	}
	return nil
}
