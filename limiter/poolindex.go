package limiter

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// poolIndex finds pools by name: a plain map under a read-write lock.
// Lookups happen on every call; pools are added and removed only by admin
// calls. It replaced a sync.Map, which profiles showed chasing pointers
// through its hash trie with 10,000 pools; the benchmarks measured no
// difference either way (docs/benchmarks.md), and this one counts its
// pools in O(1) for the max-pools limit.
type poolIndex struct {
	mu sync.RWMutex
	m  map[string]*pool
	// gen counts the changes of pools' configurations: adds, removes
	// and updates (Engine.PoolsGeneration).
	gen atomic.Uint64

	// byName is the pools in name order as of generation byNameGen, for
	// listings: sorted again only after a change, so that listing N pools
	// a page at a time costs one sort, not one per page.
	byNameMu  sync.Mutex
	byName    []*pool
	byNameGen uint64
}

// changed records that a pool was added, removed or updated.
func (x *poolIndex) changed() { x.gen.Add(1) }

// get returns the named pool, or nil.
func (x *poolIndex) get(name string) *pool {
	x.mu.RLock()
	p := x.m[name]
	x.mu.RUnlock()
	return p
}

// add adds p under its name unless the name is taken, and reports whether
// it did.
func (x *poolIndex) add(p *pool) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	if _, taken := x.m[p.name]; taken {
		return false
	}
	if x.m == nil {
		x.m = make(map[string]*pool)
	}
	x.m[p.name] = p
	x.changed()
	return true
}

// remove removes p, if it is still the pool under its name.
func (x *poolIndex) remove(p *pool) {
	x.mu.Lock()
	if x.m[p.name] == p {
		delete(x.m, p.name)
		x.changed()
	}
	x.mu.Unlock()
}

// snapshot returns the pools at this instant, in no order.
func (x *poolIndex) snapshot() []*pool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	ps := make([]*pool, 0, len(x.m))
	for _, p := range x.m {
		ps = append(ps, p)
	}
	return ps
}

// after returns up to limit pools whose names sort after `after`, in
// name order, and whether more follow.
func (x *poolIndex) after(after string, limit int) ([]*pool, bool) {
	x.byNameMu.Lock()
	defer x.byNameMu.Unlock()
	if gen := x.gen.Load(); x.byName == nil || x.byNameGen != gen {
		x.byName = x.snapshot()
		slices.SortFunc(x.byName, func(a, b *pool) int { return strings.Compare(a.name, b.name) })
		x.byNameGen = gen // a change meanwhile moved gen past it: the next call sorts again
	}
	i, _ := slices.BinarySearchFunc(x.byName, after, func(p *pool, name string) int {
		if p.name <= name {
			return -1
		}
		return 1
	})
	ps := x.byName[i:]
	more := len(ps) > limit
	if more {
		ps = ps[:limit]
	}
	return slices.Clone(ps), more
}

// len returns the number of pools.
func (x *poolIndex) len() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return len(x.m)
}
