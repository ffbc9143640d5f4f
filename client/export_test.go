package client

// SemaphoreWaiters returns how many local acquires wait on s, for tests
// that must order waiters without sleeping.
func SemaphoreWaiters(s *Semaphore) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.waiters.Len()
}

// ReleaseRunning reports whether a Release (or ReleaseAsync) runs on l, and
// whether another waits for it to end, for tests that must order
// releases without sleeping.
func ReleaseRunning(l *Lease) (running, waited bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.relHeld, l.relFree != nil
}

// ClusterAddrs returns the addresses of the cluster c was dialed with (nil
// for one address).
func ClusterAddrs(c *Client) []string { return c.cluster }

// Links returns how many server links (a connection and at most one
// Session stream each) a Client of a sharded cluster keeps.
func Links(c *Client) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.links)
}

// ShardCount returns the shard count c routes by: 0 while it has not
// read the cluster's map.
func ShardCount(c *Client) int {
	if r := c.routes.Load(); r != nil {
		return r.count
	}
	return 0
}
