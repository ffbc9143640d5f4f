package limiter

import "time"

// waiter is an Acquire waiting in its pool's queue: only what it needs
// until it is granted (the lease is made at the grant). Its fields are
// guarded by the pool's mutex, except that once out.ready is closed
// (exactly once, when the wait ends) out's lease and err no longer change
// and may be read freely.
type waiter struct {
	p     *pool
	g     grantRequest
	index int32 // in the wait queue; -1 once removed
	done  bool
	// waitTimeout is the request's WaitTimeout, for the timeout's message.
	waitTimeout time.Duration
	seq         uint64    // arrival order, for FIFO within a priority
	rank, mine  rankLinks // in the pool's and its client's rank treaps
	timer       Timer     // wait timeout, if any
	// enqueued is when the acquire joined the queue, by the engine's
	// clock: its grant records now minus this as its wait.
	enqueued time.Time
	then     func(Lease, error) // AcquireWait.Notify's, if any
	// out keeps the outcome for whoever learns it later: made by Await,
	// or when the wait ends before Notify; nil for a notified wait.
	out *waitOutcome
}

// waitOutcome is how a wait ended, for Await (which also waits on ready)
// or for a Notify that comes after the end.
type waitOutcome struct {
	ready chan struct{} // closed when the wait ends; nil unless made by Await
	lease Lease
	err   error
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
