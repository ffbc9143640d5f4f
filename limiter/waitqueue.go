package limiter

import "time"

// waiter is an Acquire waiting in its pool's queue. Its fields are guarded
// by the pool's mutex, except that once ready is closed (exactly once, when
// the wait ends) lease and err no longer change and may be read freely.
type waiter struct {
	req   AcquireRequest
	seq   uint64             // arrival order, for FIFO within a priority
	ready chan struct{}      // closed when done; made by Await (nil for a notified wait)
	then  func(Lease, error) // AcquireWait.Notify's, if any
	lease Lease
	err   error
	done  bool
	index int   // in the wait queue; -1 once removed
	timer Timer // wait timeout, if any
	// enqueued is when the acquire joined the queue, by the engine's
	// clock: its grant records now minus this as its wait.
	enqueued time.Time
}

// Waiters live in an indexedHeap ordered by priority (higher first), then
// arrival (FIFO). Only the head may be granted: a large request at the head
// is never passed by smaller ones behind it, so it cannot starve.
func (w *waiter) before(o *waiter) bool {
	if w.req.Priority != o.req.Priority {
		return w.req.Priority > o.req.Priority
	}
	return w.seq < o.seq
}
func (w *waiter) setIndex(i int) { w.index = i }
func (w *waiter) heapIndex() int { return w.index }
