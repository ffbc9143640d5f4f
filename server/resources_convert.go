package server

import (
	"maps"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tollgate/tollgate/limiter"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// This file converts resource instances, providers and the resource
// settings of pools between the engine and the wire.

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
		out.LeaseId = srv.ids.Format(pool, s.Holder)
	}
	return out
}

// providerToProto converts a live provider to the wire.
func providerToProto(p limiter.ProviderInfo) *tollgatev1.Provider {
	return &tollgatev1.Provider{Id: p.ID, Identity: p.Identity, Address: p.Address, Ttl: durationpb.New(p.TTL), JoinTime: timestamp(p.JoinTime), Resources: int64(p.Resources)}
}
