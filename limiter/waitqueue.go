package limiter

import "time"

// waiter is an Acquire waiting in its pool's queue: only what it needs
// until it is granted (the lease is made at the grant). Its fields are
// guarded by the pool's mutex.
type waiter struct {
	wait       Wait[Lease] // what StartAcquire returns
	g          grantRequest
	index      int32      // in the wait queue; -1 once removed
	seq        uint64     // arrival order, for FIFO within a priority
	rank, mine rankLinks  // in the pool's and its client's rank treaps
	timeout    *waitTimer // the request's WaitTimeout, if any
	// enqueued is when the acquire joined the queue, by the engine's
	// clock: its grant records now minus this as its wait.
	enqueued time.Time
}

// waitTimer ends an acquire's wait when its WaitTimeout passes: apart from
// the waiter, which most acquires make without one.
type waitTimer struct {
	t Timer
	d time.Duration // the WaitTimeout, for the timeout's message
}

// grantRequest is what a grant needs of an AcquireRequest.
type grantRequest struct {
	weight                int64
	ttl                   time.Duration
	clientID, description string
	owner                 any
	priority              int32
}

// grantOf returns what a grant of req needs.
func grantOf(req *AcquireRequest) grantRequest {
	return grantRequest{weight: req.Weight, ttl: req.TTL, clientID: req.ClientID, description: req.Description, owner: req.Owner, priority: req.Priority}
}

// Waiters live in an indexedHeap ordered by priority (higher first), then
// arrival (FIFO). Only the head may be granted: a large request at the head
// is never passed by smaller ones behind it, so it cannot starve.
func (w *waiter) before(o *waiter) bool {
	if w.g.priority != o.g.priority {
		return w.g.priority > o.g.priority
	}
	return w.seq < o.seq
}
func (w *waiter) setIndex(i int) { w.index = int32(i) }
func (w *waiter) heapIndex() int { return int(w.index) }
