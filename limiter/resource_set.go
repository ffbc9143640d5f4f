package limiter

import (
	"container/list"
	"sort"
	"time"

	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// instance is one instance of an active or passive pool, guarded by the
// pool's mutex.
type instance struct {
	Resource
	holder   *lease        // the live lease bound to it; nil when not held
	removing bool          // removed or withdrawn with wait: leaves when its lease ends
	awaited  bool          // re-adopted in a passive pool before its provider offered it again
	elem     *list.Element // its place in resourceSet.free; nil unless free
	addTime  time.Time
	released time.Time // when a lease last let it go; zero: never
}

// resourceSet is the instances of an active or passive pool.
//
// Invariants, true whenever the pool's mutex is not held:
//   - an instance is free (in free, holder nil, not removing), held
//     (holder is a live lease of the pool whose res holds it), or removing
//     (held, and leaves byID when its holder lets it go); never two;
//   - an awaited instance (passive pools, during the recovery window after
//     a restart) is held, has no provider yet, and leaves byID when its
//     holder lets it go;
//   - the pool's held weight is the number of held instances, and every
//     live lease holds exactly Weight instances;
//   - free is ordered by when each instance was last released, least
//     recently at the front; instances never used are at the front.
type resourceSet struct {
	byID      map[string]*instance
	free      list.List            // of *instance
	removing  int                  // instances with removing set
	providers map[string]*provider // live providers of a passive pool
}

func newResourceSet() *resourceSet {
	return &resourceSet{byID: make(map[string]*instance), providers: make(map[string]*provider)}
}

// admits lets weight be granted if as many instances are free.
func (rs *resourceSet) admits(_, weight int64, _ time.Time) bool {
	return int64(rs.free.Len()) >= weight
}

// describe gives the instances free of all.
func (rs *resourceSet) describe(int64, time.Time) string {
	return itoa(int64(rs.free.Len())) + " of " + itoa(int64(len(rs.byID))) + " instances free"
}

// status fills in the instances, those free, and the providers.
func (rs *resourceSet) status(s *PoolStatus, _ time.Time) {
	s.Resources, s.ResourcesFree, s.Providers = int64(len(rs.byID)), int64(rs.free.Len()), int64(len(rs.providers))
}

// usable is the number of instances that can be granted once free: all
// but those being removed.
func (rs *resourceSet) usable() int { return len(rs.byID) - rs.removing }

// addAll puts new free instances in the set, never used, so at the front
// of the free list, in the order given (the first is granted first under
// SelectSpread); their ids must be new. It returns them in that order.
func (rs *resourceSet) addAll(add []Resource, now time.Time) []*instance {
	out := make([]*instance, len(add))
	for i := len(add) - 1; i >= 0; i-- {
		in := &instance{Resource: add[i], addTime: now}
		rs.byID[in.ID] = in
		in.elem = rs.free.PushFront(in)
		out[i] = in
	}
	return out
}

// take removes a free instance from the free list, chosen by policy, and
// returns it; the caller has checked that one is free.
func (rs *resourceSet) take(policy SelectionPolicy) *instance {
	e := rs.free.Back() // reuse: the most recently released
	if policy == SelectSpread {
		e = rs.free.Front() // the least recently used
	}
	in := rs.free.Remove(e).(*instance)
	in.elem = nil
	return in
}

// drop removes in from the set, whatever its state.
func (rs *resourceSet) drop(in *instance) {
	if in.elem != nil {
		rs.free.Remove(in.elem)
		in.elem = nil
	}
	if in.removing {
		rs.removing--
		in.removing = false
	}
	if pr := rs.providers[in.Provider]; pr != nil && in.Provider != "" {
		delete(pr.res, in.ID)
	}
	delete(rs.byID, in.ID)
}

// states returns every instance's state, in id order.
func (rs *resourceSet) states() []ResourceState {
	out := make([]ResourceState, 0, len(rs.byID))
	for _, in := range rs.byID {
		s := ResourceState{Resource: in.Resource, Removing: in.removing, AddTime: in.addTime, LastRelease: in.released}
		if in.holder != nil {
			s.Holder, s.HolderClientID = in.holder.FencingToken, in.holder.ClientID
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// bind binds l, just granted, to l.Weight free instances chosen by
// policy (the caller checked they are free: admits), and records them in
// the lease.
func (rs *resourceSet) bind(l *lease, policy SelectionPolicy) {
	l.Resources = make([]Resource, l.Weight)
	for i := range l.Resources {
		in := rs.take(policy)
		in.holder = l
		l.Resources[i] = in.Resource
	}
}

// bindTo binds l to ins, free instances a re-adoption names, and records
// them in the lease.
func (rs *resourceSet) bindTo(l *lease, ins []*instance) {
	l.Resources = make([]Resource, len(ins))
	for i, in := range ins {
		if in.elem != nil {
			rs.free.Remove(in.elem)
			in.elem = nil
		}
		in.holder = l
		l.Resources[i] = in.Resource
	}
}

// unbind lets go of l's instances as l ends at now: each goes to the back
// of the free list (most recently released), or leaves the pool if it was
// being removed.
func (rs *resourceSet) unbind(l *lease, now time.Time) {
	for _, r := range l.Resources {
		in := rs.byID[r.ID] // a held instance never leaves the pool while held
		if in == nil || in.holder != l {
			continue
		}
		in.holder = nil
		in.released = now
		if in.removing || in.awaited {
			rs.drop(in)
			continue
		}
		in.elem = rs.free.PushBack(in)
	}
}

// instancesOf returns the instances l is bound to. A held instance never
// leaves the pool while held, so each of l.Resources is there.
func (rs *resourceSet) instancesOf(l *lease) []*instance {
	ins := make([]*instance, 0, len(l.Resources))
	for _, r := range l.Resources {
		if in := rs.byID[r.ID]; in != nil && in.holder == l {
			ins = append(ins, in)
		}
	}
	return ins
}

// holdersOf returns the distinct live leases holding any of ins, in
// fencing-token order.
func holdersOf(ins []*instance) []*lease {
	seen := make(map[*lease]struct{})
	var out []*lease
	for _, in := range ins {
		if in.holder == nil {
			continue
		}
		if _, ok := seen[in.holder]; !ok {
			seen[in.holder] = struct{}{}
			out = append(out, in.holder)
		}
	}
	sortLeasesByToken(out)
	return out
}

// remove takes ins out of the set: free ones leave at once; held ones
// are marked removing and leave when their lease ends. It returns how
// many left at once, and the leases holding the others, in fencing-token
// order.
func (rs *resourceSet) remove(ins []*instance) (removed int, holders []*lease) {
	holders = holdersOf(ins)
	for _, in := range ins {
		if in.holder == nil {
			rs.drop(in)
			removed++
			continue
		}
		if !in.removing {
			in.removing = true
			rs.removing++
		}
	}
	return removed, holders
}

// removingOf returns the ids of l's instances being removed, quoted.
func (rs *resourceSet) removingOf(l *lease) []string {
	var names []string
	for _, in := range rs.instancesOf(l) {
		if in.removing {
			names = append(names, quote(in.ID))
		}
	}
	return names
}

// awaitedHolders returns the leases re-adopted on instances whose
// providers have not offered them again (awaited), in fencing-token order.
func (rs *resourceSet) awaitedHolders() []*lease {
	var gone []*instance
	for _, in := range rs.byID {
		if in.awaited {
			gone = append(gone, in)
		}
	}
	return holdersOf(gone)
}

// recorded returns what an active pool records of its instances once add
// are added and the ids remove removed: every instance not being removed,
// in id order.
func (rs *resourceSet) recorded(add []Resource, remove []string) []Resource {
	gone := make(map[string]struct{}, len(remove))
	for _, id := range remove {
		gone[id] = struct{}{}
	}
	out := make([]Resource, 0, len(rs.byID)+len(add))
	for id, in := range rs.byID {
		if _, g := gone[id]; !g && !in.removing {
			out = append(out, in.Resource)
		}
	}
	out = append(out, add...)
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// checkNew refuses instances of pool whose ids are taken or that would
// take it over MaxResourcesPerPool.
func (rs *resourceSet) checkNew(pool string, add []Resource) error {
	for _, r := range add {
		if in := rs.byID[r.ID]; in != nil && (!in.awaited || r.Provider == "") {
			if in.Provider != "" {
				return errorf(apierr.ErrResourceExists, "pool %q already has an instance %q, offered by provider %q; pick another id", pool, r.ID, in.Provider)
			}
			return errorf(apierr.ErrResourceExists, "pool %q already has an instance %q; pick another id, or remove it first", pool, r.ID)
		}
	}
	if n := len(rs.byID) + len(add); n > MaxResourcesPerPool {
		return errorf(apierr.ErrTooManyResources, "pool %q would hold %d instances; the most is %d", pool, n, MaxResourcesPerPool)
	}
	return nil
}

// lookup returns the instances ids of pool, each of which must be in the
// set and, with a non-empty provider, offered by it.
func (rs *resourceSet) lookup(pool string, ids []string, provider string) ([]*instance, error) {
	ins := make([]*instance, 0, len(ids))
	for _, id := range ids {
		in := rs.byID[id]
		if in == nil || in.Provider != provider {
			if provider != "" {
				return nil, errorf(apierr.ErrResourceNotFound, "provider %q offers no instance %q in pool %q; nothing was withdrawn", provider, id, pool)
			}
			return nil, errorf(apierr.ErrResourceNotFound, "pool %q has no instance %q; nothing was removed", pool, id)
		}
		ins = append(ins, in)
	}
	return ins, nil
}

// readoptInstances returns the instances a lease token of pool to
// re-adopt names (since says when the server restarted, for messages):
// exactly ra.Weight distinct ones, each in the set and free. In a passive
// pool, an instance not in the set is taken as one whose provider has not
// offered it again since the restart: it is held for the lease, *awaited*,
// until its provider offers it (offer then hands it over), or revoked with
// the lease when the recovery window ends without it.
func (rs *resourceSet) readoptInstances(pool string, passive bool, token uint64, ra *Readopt, since string, now time.Time) ([]*instance, error) {
	if int64(len(ra.Resources)) != ra.Weight {
		return nil, errorf(apierr.ErrLeaseNotReadopted, "lease %d of pool %q cannot be re-adopted%s: it names %d instances for weight %d; stop the work it protects and acquire a new lease", token, pool, since, len(ra.Resources), ra.Weight)
	}
	ins := make([]*instance, 0, len(ra.Resources))
	var awaited []string
	for _, id := range ra.Resources {
		in := rs.byID[id]
		if in == nil && passive && validateResourceID("instance", id) == nil {
			// Its provider has not offered it again yet: hold it for the
			// lease until the provider does, or the window ends.
			awaited = append(awaited, id)
			continue
		}
		if in == nil || in.elem == nil {
			why := "is held by another lease"
			if in == nil {
				why = "is not in the pool (removed, or its provider has not offered it again)"
			}
			return nil, errorf(apierr.ErrLeaseNotReadopted, "lease %d of pool %q cannot be re-adopted%s: its instance %q %s; stop the work it protects and acquire a new lease", token, pool, since, id, why)
		}
		for _, other := range ins {
			if other == in {
				return nil, errorf(apierr.ErrLeaseNotReadopted, "lease %d of pool %q cannot be re-adopted%s: it names instance %q twice", token, pool, since, id)
			}
		}
		ins = append(ins, in)
	}
	for i, id := range awaited {
		for _, other := range awaited[:i] {
			if other == id {
				return nil, errorf(apierr.ErrLeaseNotReadopted, "lease %d of pool %q cannot be re-adopted%s: it names instance %q twice", token, pool, since, id)
			}
		}
	}
	if len(rs.byID)+len(awaited) > MaxResourcesPerPool {
		return nil, errorf(apierr.ErrLeaseNotReadopted, "lease %d of pool %q cannot be re-adopted%s: the pool would hold more than %d instances", token, pool, since, MaxResourcesPerPool)
	}
	for _, id := range awaited {
		in := &instance{Resource: Resource{ID: id}, awaited: true, addTime: now}
		rs.byID[id] = in
		ins = append(ins, in)
	}
	return ins, nil
}
