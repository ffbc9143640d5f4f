package limiter

import "time"

// MaxQueuePositions bounds how many acquires QueuePositions reports.
const MaxQueuePositions = 16

// QueuedAcquire is an acquire waiting in a pool's queue, as QueuePositions
// reports it.
type QueuedAcquire struct {
	// Position is 1 for the acquire granted next (when the pool can),
	// 2 for the one after it, and so on: higher priority first, then
	// arrival order.
	Position int64
	Weight   int64
	Priority int32
	// Waited is how long it has waited, by the engine's clock.
	Waited time.Duration
}

// QueuePositions returns where the acquires of client clientID wait in
// pool's queue, in grant order (at most MaxQueuePositions of them), and how
// many acquires wait in all. It costs O(log n) under the pool's lock for
// each acquire it reports, whatever the length of the queue or the number
// of the client's acquires. Errors: ErrInvalidArgument, ErrPoolNotFound.
func (e *Engine) QueuePositions(pool, clientID string) ([]QueuedAcquire, int64, error) {
	if clientID == "" || len(clientID) > MaxClientIDLen {
		return nil, 0, errorf(ErrInvalidArgument, "client id is %d bytes; give the client id the acquires were made with, 1 to %d bytes", len(clientID), MaxClientIDLen)
	}
	p, err := e.lockPool(pool)
	if err != nil {
		return nil, 0, err
	}
	defer p.unlock()
	now := e.clock.Now()
	var out []QueuedAcquire
	rankTree(inClientQueue).first(p.clientQueues[clientID], func(w *waiter) bool {
		pos := rankTree(inQueue).rank(p.ranked, w) + 1
		out = append(out, QueuedAcquire{Position: pos, Weight: w.g.weight, Priority: w.g.priority, Waited: now.Sub(w.enqueued)})
		return len(out) < MaxQueuePositions
	})
	return out, int64(len(p.waiters)), nil
}
