package limiter

import (
	"container/list"
	"sort"
	"strings"
	"time"
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

// bindLocked binds l, just granted, to l.Weight free instances chosen by
// the pool's selection policy (admitLocked checked they are free), and
// records them in the lease.
func (p *pool) bindLocked(l *lease) {
	l.Resources = make([]Resource, l.Weight)
	for i := range l.Resources {
		in := p.res.take(p.cfg.Selection)
		in.holder = l
		l.Resources[i] = in.Resource
	}
}

// bindInstancesLocked binds l to ins, free instances a re-adoption names,
// and records them in the lease.
func (p *pool) bindInstancesLocked(l *lease, ins []*instance) {
	l.Resources = make([]Resource, len(ins))
	for i, in := range ins {
		if in.elem != nil {
			p.res.free.Remove(in.elem)
			in.elem = nil
		}
		in.holder = l
		l.Resources[i] = in.Resource
	}
}

// unbindLocked lets go of l's instances as l ends: each goes to the back
// of the free list (most recently released), or leaves the pool if it was
// being removed.
func (p *pool) unbindLocked(l *lease, now time.Time) {
	for _, r := range l.Resources {
		in := p.res.byID[r.ID] // a held instance never leaves the pool while held
		if in == nil || in.holder != l {
			continue
		}
		in.holder = nil
		in.released = now
		if in.removing || in.awaited {
			p.res.drop(in)
			continue
		}
		in.elem = p.res.free.PushBack(in)
	}
}

// instancesOfLocked returns the instances l is bound to. A held instance
// never leaves the pool while held, so each of l.Resources is there.
func (p *pool) instancesOfLocked(l *lease) []*instance {
	ins := make([]*instance, 0, len(l.Resources))
	for _, r := range l.Resources {
		if in := p.res.byID[r.ID]; in != nil && in.holder == l {
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

// removeInstancesLocked takes ins out of the pool: free ones leave at
// once; held ones are marked removing and leave when their lease ends,
// and unless wait, those leases are revoked now with reason, which
// follows the names of the lease's instances ("was removed ..."; reported
// through the returned slice). It reports how many left at once and how
// many leases were revoked. actor is who removed them ("" if unknown or
// not an operator). It does not dispatch or persist.
func (p *pool) removeInstancesLocked(ins []*instance, wait bool, reason, actor string, now time.Time) (removed, revoked int, ended []LeaseEnded) {
	holders := holdersOf(ins)
	for _, in := range ins {
		if in.holder == nil {
			p.res.drop(in)
			removed++
			continue
		}
		if !in.removing {
			in.removing = true
			p.res.removing++
		}
	}
	if wait {
		return removed, 0, nil
	}
	for _, l := range holders {
		var names []string
		for _, in := range p.instancesOfLocked(l) {
			if in.removing {
				removed++
				names = append(names, quote(in.ID))
			}
		}
		why := "its instance " + strings.Join(names, ", ") + " " + reason
		ended = append(ended, p.revokeLocked(l, why, actor, now)) // unbinds: removing instances leave
		revoked++
	}
	return removed, revoked, ended
}
