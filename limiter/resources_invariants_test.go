package limiter

import (
	"fmt"
	"time"
)

// checkResourcesLocked verifies the invariants of resourceSet and the
// binding of leases to instances, and DESIGN.md invariant 1 for
// instances: no instance is held by two live leases.
func (p *pool) checkResourcesLocked() error {
	if p.res == nil {
		for tok, l := range p.leases {
			if l.Resources != nil {
				return fmt.Errorf("lease %d of a free pool is bound to instances", tok)
			}
		}
		return nil
	}
	rs := p.res
	holderOf := map[*instance]uint64{}
	var heldInstances int64
	for tok, l := range p.leases {
		ins := p.res.instancesOf(l)
		if int64(len(ins)) != l.Weight || len(l.Resources) != len(ins) {
			return fmt.Errorf("lease %d of weight %d is bound to %d instances (%d reported)", tok, l.Weight, len(ins), len(l.Resources))
		}
		for i, in := range ins {
			if other, dup := holderOf[in]; dup {
				return fmt.Errorf("instance %q is in two live leases, %d and %d", in.ID, other, tok)
			}
			holderOf[in] = tok
			if in.holder != l {
				return fmt.Errorf("lease %d holds instance %q, whose holder is another", tok, in.ID)
			}
			if rs.byID[in.ID] != in {
				return fmt.Errorf("lease %d holds instance %q, which is not in the pool", tok, in.ID)
			}
			if l.Resources[i].ID != in.ID {
				return fmt.Errorf("lease %d reports instance %q for %q", tok, l.Resources[i].ID, in.ID)
			}
			heldInstances++
		}
	}
	if heldInstances != p.held {
		return fmt.Errorf("held weight %d but %d instances are held", p.held, heldInstances)
	}
	free, removing := 0, 0
	for id, in := range rs.byID {
		if in.ID != id {
			return fmt.Errorf("instance %q filed under %q", in.ID, id)
		}
		switch {
		case in.holder == nil && (in.elem == nil || in.removing):
			return fmt.Errorf("instance %q is not held but not free (removing=%v)", id, in.removing)
		case in.holder != nil && in.elem != nil:
			return fmt.Errorf("instance %q is held and free", id)
		case in.holder != nil && p.leases[in.holder.FencingToken] != in.holder:
			return fmt.Errorf("instance %q is held by lease %d, which is not live", id, in.holder.FencingToken)
		}
		if in.elem != nil {
			free++
		}
		if in.removing {
			removing++
		}
		if p.cfg.ResourceKind == ResourceActive && in.Provider != "" {
			return fmt.Errorf("instance %q of an active pool has provider %q", id, in.Provider)
		}
		if in.awaited && (in.holder == nil || in.Provider != "" || p.cfg.ResourceKind != ResourcePassive || !p.rec.active()) {
			return fmt.Errorf("awaited instance %q: holder %v, provider %q, kind %v, recovering %v", id, in.holder != nil, in.Provider, p.cfg.ResourceKind, p.rec.active())
		}
		if p.cfg.ResourceKind == ResourcePassive && !in.awaited {
			pr := rs.providers[in.Provider]
			if pr == nil || pr.res[id] != in {
				return fmt.Errorf("instance %q of provider %q, which is not live or does not list it", id, in.Provider)
			}
		}
	}
	if free != rs.free.Len() || removing != rs.removing {
		return fmt.Errorf("%d free and %d removing instances, counted %d and %d", rs.free.Len(), rs.removing, free, removing)
	}
	var last time.Time
	for e := rs.free.Front(); e != nil; e = e.Next() {
		in := e.Value.(*instance)
		if in.elem != e {
			return fmt.Errorf("instance %q is at the wrong place in the free list", in.ID)
		}
		if in.released.Before(last) {
			return fmt.Errorf("free list out of order at %q: released %v before %v", in.ID, in.released, last)
		}
		last = in.released
	}
	for id, pr := range rs.providers {
		if pr.ID != id || pr.handle.gone != "" {
			return fmt.Errorf("provider %q filed under %q (gone %q)", pr.ID, id, pr.handle.gone)
		}
		for rid, in := range pr.res {
			if rs.byID[rid] != in || in.Provider != id {
				return fmt.Errorf("provider %q lists instance %q, which is not its own in the pool", id, rid)
			}
		}
	}
	return nil
}
