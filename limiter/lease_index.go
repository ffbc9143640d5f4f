package limiter

import "github.com/google/btree"

// leaseIndex keeps a pool's live leases in fencing token order, so that a
// page of them (ListLeases) costs the page and not the pool's size. The
// zero value is empty.
type leaseIndex struct {
	t *btree.BTreeG[*lease]
}

func leaseBefore(a, b *lease) bool { return a.FencingToken < b.FencingToken }

// add indexes l.
func (x *leaseIndex) add(l *lease) {
	if x.t == nil {
		x.t = btree.NewG(32, leaseBefore)
	}
	x.t.ReplaceOrInsert(l)
}

// remove forgets l.
func (x *leaseIndex) remove(l *lease) {
	if x.t != nil {
		x.t.Delete(l)
	}
}

// ascendAfter calls f on the leases whose tokens are above after, in token
// order, until f returns false.
func (x *leaseIndex) ascendAfter(after uint64, f func(*lease) bool) {
	if x.t == nil || after == ^uint64(0) {
		return
	}
	x.t.AscendGreaterOrEqual(&lease{Lease: Lease{FencingToken: after + 1}}, f)
}
