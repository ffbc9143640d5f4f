package client

import tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"

// Resource is an instance of an active or passive pool that a lease is
// bound to: a database connection, a worker slot. Use its Attributes (an
// address, ...) to reach it; no other live lease holds it while yours does.
type Resource struct {
	// ID is the instance's id, unique within its pool.
	ID string
	// Attributes are what the operator or provider declared with it.
	Attributes map[string]string
	// Provider is the id of the provider that offers it, in a passive
	// pool; empty in an active pool.
	Provider string
}

func resourcesFromProto(rs []*tollgatev1.Resource) []Resource {
	if len(rs) == 0 {
		return nil
	}
	out := make([]Resource, len(rs))
	for i, r := range rs {
		out[i] = Resource{ID: r.GetId(), Attributes: r.GetAttributes(), Provider: r.GetProviderId()}
	}
	return out
}

func resourcesToProto(rs []Resource) []*tollgatev1.Resource {
	out := make([]*tollgatev1.Resource, len(rs))
	for i, r := range rs {
		out[i] = &tollgatev1.Resource{Id: r.ID, Attributes: r.Attributes}
	}
	return out
}

// resourceIDs returns the ids of the lease's instances, sent with every
// renew so that a restarted server re-adopts the lease on them.
func (l *Lease) resourceIDs() []string {
	if len(l.resources) == 0 {
		return nil
	}
	ids := make([]string, len(l.resources))
	for i, r := range l.resources {
		ids[i] = r.ID
	}
	return ids
}
