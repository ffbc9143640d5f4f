package apiconv

import (
	"maps"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tollgate/tollgate/internal/leaseid"
	"github.com/tollgate/tollgate/limiter"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// Resource instances, providers and the resource settings of pools:
// these convert them between the engine and the wire.

// ResourcesFromProto converts instances from the wire; the engine checks
// them (ids, attributes, counts).
func ResourcesFromProto(rs []*tollgatev1.Resource) []limiter.Resource {
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

// ResourceStateToProto converts an instance as ListResources reports it.
func ResourceStateToProto(ids *leaseid.IDs, pool string, s limiter.ResourceState) *tollgatev1.ResourceState {
	out := &tollgatev1.ResourceState{
		Resource:        resourceToProto(s.Resource),
		ClientId:        s.HolderClientID,
		Removing:        s.Removing,
		AddTime:         Timestamp(s.AddTime),
		LastReleaseTime: Timestamp(s.LastRelease),
	}
	if s.Holder != 0 {
		out.LeaseId = ids.Format(pool, s.Holder)
	}
	return out
}

// ProviderToProto converts a live provider to the wire.
func ProviderToProto(p limiter.ProviderInfo) *tollgatev1.Provider {
	return &tollgatev1.Provider{Id: p.ID, Identity: p.Identity, Address: p.Address, Ttl: durationpb.New(p.TTL), JoinTime: Timestamp(p.JoinTime), Resources: int64(p.Resources)}
}
