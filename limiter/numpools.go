package limiter

// NumPools returns the number of pools. It takes no pool lock; a pool being
// created or deleted at the same time may or may not be counted.
func (e *Engine) NumPools() int { return e.pools.len() }
