package limiter

// NumPools returns the number of pools. It is read-only and takes no pool
// lock; a pool being created or deleted at the same time may or may not be
// counted. It costs O(pools) pointer reads and no allocation.
func (e *Engine) NumPools() int {
	n := 0
	e.pools.Range(func(_, _ any) bool {
		n++
		return true
	})
	return n
}
