package limiter

import (
	"time"

	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

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
	ClientID string // the acquire's client id; "" when it gave none
	// Waited is how long it has waited, by the engine's clock.
	Waited time.Duration
}

// QueuePositions returns where the acquires of client clientID wait in
// pool's queue, in grant order (at most MaxQueuePositions of them), and how
// many acquires wait in all. It costs O(log n) under the pool's lock for
// each acquire it reports, whatever the length of the queue or the number
// of the client's acquires. Errors: apierr.ErrInvalidArgument, apierr.ErrPoolNotFound.
func (e *Engine) QueuePositions(pool, clientID string) ([]QueuedAcquire, int64, error) {
	if clientID == "" || len(clientID) > MaxClientIDLen {
		return nil, 0, errorf(apierr.ErrInvalidArgument, "client id is %d bytes; give the client id the acquires were made with, 1 to %d bytes", len(clientID), MaxClientIDLen)
	}
	p, err := e.lockPool(pool)
	if err != nil {
		return nil, 0, err
	}
	defer p.unlock()
	now := e.clock.Now()
	var out []QueuedAcquire
	rankTree(inClientQueue).first(p.queue.byClient[clientID], func(w *waiter) bool {
		pos := rankTree(inQueue).rank(p.queue.ranked, w) + 1
		out = append(out, QueuedAcquire{Position: pos, ClientID: clientID, Weight: w.g.weight, Priority: w.g.priority, Waited: now.Sub(w.enqueued)})
		return len(out) < MaxQueuePositions
	})
	return out, int64(p.queue.len()), nil
}

// MaxListWaiters bounds how many acquires ListWaiters returns.
const MaxListWaiters = 100

// ListWaiters returns the first limit acquires waiting in pool's queue, in
// grant order (at most MaxListWaiters), and how many wait in all. It costs
// O(log n + limit) under the pool's lock: a walk of the queue's rank tree.
// Errors: apierr.ErrInvalidArgument, apierr.ErrPoolNotFound.
func (e *Engine) ListWaiters(pool string, limit int) ([]QueuedAcquire, int64, error) {
	if limit < 1 || limit > MaxListWaiters {
		return nil, 0, errorf(apierr.ErrInvalidArgument, "limit is %d; give 1 to %d", limit, MaxListWaiters)
	}
	p, err := e.lockPool(pool)
	if err != nil {
		return nil, 0, err
	}
	defer p.unlock()
	now := e.clock.Now()
	out := make([]QueuedAcquire, 0, min(limit, p.queue.len()))
	rankTree(inQueue).first(p.queue.ranked, func(w *waiter) bool {
		out = append(out, QueuedAcquire{Position: int64(len(out) + 1), ClientID: w.g.clientID, Weight: w.g.weight, Priority: w.g.priority, Waited: now.Sub(w.enqueued)})
		return len(out) < limit
	})
	return out, int64(p.queue.len()), nil
}
