package limiter

import (
	"slices"
	"time"
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
// many acquires wait in all. It costs a scan of the queue for each acquire
// it reports. Errors: ErrInvalidArgument, ErrPoolNotFound.
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
	for _, w := range p.waiters {
		if w.g.clientID != clientID {
			continue
		}
		pos := int64(1)
		for _, o := range p.waiters {
			if o.g.priority > w.g.priority || (o.g.priority == w.g.priority && o.seq < w.seq) {
				pos++
			}
		}
		out = append(out, QueuedAcquire{Position: pos, ClientID: clientID, Weight: w.g.weight, Priority: w.g.priority, Waited: now.Sub(w.enqueued)})
	}
	slices.SortFunc(out, func(a, b QueuedAcquire) int { return int(a.Position - b.Position) })
	if len(out) > MaxQueuePositions {
		out = out[:MaxQueuePositions]
	}
	return out, int64(len(p.waiters)), nil
}

// MaxListWaiters bounds how many acquires ListWaiters returns.
const MaxListWaiters = 100

// ListWaiters returns the first limit acquires waiting in pool's queue, in
// grant order (at most MaxListWaiters), and how many wait in all. It costs
// O(limit log limit) under the pool's lock, whatever the queue's length.
// Errors: ErrInvalidArgument, ErrPoolNotFound.
func (e *Engine) ListWaiters(pool string, limit int) ([]QueuedAcquire, int64, error) {
	if limit < 1 || limit > MaxListWaiters {
		return nil, 0, errorf(ErrInvalidArgument, "limit is %d; give 1 to %d", limit, MaxListWaiters)
	}
	p, err := e.lockPool(pool)
	if err != nil {
		return nil, 0, err
	}
	defer p.unlock()
	now := e.clock.Now()
	first := p.waiters.first(limit)
	out := make([]QueuedAcquire, len(first))
	for i, w := range first {
		out[i] = QueuedAcquire{Position: int64(i + 1), ClientID: w.g.clientID, Weight: w.g.weight, Priority: w.g.priority, Waited: now.Sub(w.enqueued)}
	}
	return out, int64(len(p.waiters)), nil
}
