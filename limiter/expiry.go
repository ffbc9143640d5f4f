package limiter

// lease is the engine's record of a live lease. It is owned by its pool and
// guarded by the pool's mutex.
type lease struct {
	Lease
	owner any
	index int // in the pool's expiry heap; -1 once removed
	// In an active or passive pool, Lease.Resources names the instances
	// the lease is bound to; the instances point back.
	// No slice of them is kept here, so that a lease record stays in a
	// small allocation size class for free pools.
}

// Leases live in an indexedHeap ordered by ExpireTime: the pool finds its
// next expiry in O(1) and removes or re-times a lease in O(log n), so expiry
// never scans all leases.
func (l *lease) before(o *lease) bool { return l.ExpireTime.Before(o.ExpireTime) }
func (l *lease) setIndex(i int)       { l.index = i }
func (l *lease) heapIndex() int       { return l.index }
