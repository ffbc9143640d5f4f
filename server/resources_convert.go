package server

import (
	"maps"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tollgate/tollgate/limiter"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// This file converts resource instances, providers and the resource
// settings of pools between the engine and the wire.

// resourceKindFromProto converts a pool's resource_kind; unset means free.
func resourceKindFromProto(k tollgatev1.ResourceKind) (limiter.ResourceKind, error) {
	switch k {
	case tollgatev1.ResourceKind_RESOURCE_KIND_UNSPECIFIED, tollgatev1.ResourceKind_RESOURCE_KIND_FREE:
		return limiter.ResourceFree, nil
	case tollgatev1.ResourceKind_RESOURCE_KIND_ACTIVE:
		return limiter.ResourceActive, nil
	case tollgatev1.ResourceKind_RESOURCE_KIND_PASSIVE:
		return limiter.ResourcePassive, nil
	}
	return 0, invalidArg("pool.resource_kind %d is not a resource kind; use RESOURCE_KIND_FREE, RESOURCE_KIND_ACTIVE or RESOURCE_KIND_PASSIVE", int32(k))
}

// resourceKindToProto converts a pool's resource kind to the wire.
func resourceKindToProto(k limiter.ResourceKind) tollgatev1.ResourceKind {
	switch k {
	case limiter.ResourceActive:
		return tollgatev1.ResourceKind_RESOURCE_KIND_ACTIVE
	case limiter.ResourcePassive:
		return tollgatev1.ResourceKind_RESOURCE_KIND_PASSIVE
	}
	return tollgatev1.ResourceKind_RESOURCE_KIND_FREE
}

// resourceKindName is "free", "active" or "passive" for events.
func resourceKindName(k tollgatev1.ResourceKind) string {
	kind, err := resourceKindFromProto(k)
	if err != nil {
		return "unknown"
	}
	return kind.String()
}

// selectionFromProto converts a pool's selection_policy; unset means reuse.
func selectionFromProto(s tollgatev1.SelectionPolicy) (limiter.SelectionPolicy, error) {
	switch s {
	case tollgatev1.SelectionPolicy_SELECTION_POLICY_UNSPECIFIED, tollgatev1.SelectionPolicy_SELECTION_POLICY_REUSE:
		return limiter.SelectReuse, nil
	case tollgatev1.SelectionPolicy_SELECTION_POLICY_SPREAD:
		return limiter.SelectSpread, nil
	}
	return 0, invalidArg("pool.selection_policy %d is not a selection policy; use SELECTION_POLICY_REUSE or SELECTION_POLICY_SPREAD", int32(s))
}

// selectionToProto converts a pool's selection policy to the wire.
func selectionToProto(s limiter.SelectionPolicy) tollgatev1.SelectionPolicy {
	if s == limiter.SelectSpread {
		return tollgatev1.SelectionPolicy_SELECTION_POLICY_SPREAD
	}
	return tollgatev1.SelectionPolicy_SELECTION_POLICY_REUSE
}

// selectionFromProtoName is "reuse" or "spread" for events.
func selectionFromProtoName(s tollgatev1.SelectionPolicy) string {
	sel, err := selectionFromProto(s)
	if err != nil {
		return "unknown"
	}
	return sel.String()
}

// resourcesFromProto converts instances from the wire; the engine checks
// them (ids, attributes, counts).
func resourcesFromProto(rs []*tollgatev1.Resource) []limiter.Resource {
	out := make([]limiter.Resource, len(rs))
	for i, r := range rs {
		out[i] = limiter.Resource{ID: r.GetId(), Attributes: r.GetAttributes()}
	}
	return out
}

// resourcesToProto converts a lease's instances to the wire; nil for none.
func resourcesToProto(rs []limiter.Resource) []*tollgatev1.Resource {
	if len(rs) == 0 {
		return nil
	}
	out := make([]*tollgatev1.Resource, len(rs))
	for i, r := range rs {
		out[i] = resourceToProto(r)
	}
	return out
}

func resourceToProto(r limiter.Resource) *tollgatev1.Resource {
	return &tollgatev1.Resource{Id: r.ID, Attributes: maps.Clone(r.Attributes), ProviderId: r.Provider}
}

// resourceStateToProto converts an instance as ListResources reports it.
func (srv *Server) resourceStateToProto(pool string, s limiter.ResourceState) *tollgatev1.ResourceState {
	out := &tollgatev1.ResourceState{
		Resource:        resourceToProto(s.Resource),
		ClientId:        s.HolderClientID,
		Removing:        s.Removing,
		AddTime:         timestamp(s.AddTime),
		LastReleaseTime: timestamp(s.LastRelease),
	}
	if s.Holder != 0 {
		out.LeaseId = srv.ids.format(pool, s.Holder)
	}
	return out
}

// providerToProto converts a live provider to the wire.
func providerToProto(p limiter.ProviderInfo) *tollgatev1.Provider {
	return &tollgatev1.Provider{Id: p.ID, Identity: p.Identity, Address: p.Address, Ttl: durationpb.New(p.TTL), JoinTime: timestamp(p.JoinTime), Resources: int64(p.Resources)}
}
