// Package groupcommit lets the writes of many callers share one commit
// (one transaction and one fsync): a write waits in a queue, a goroutine
// commits everything queued in one batch, and each writer is told the
// outcome of the batch its write went in.
//
// A write that a caller waits for (Now) is committed at once, with every
// write queued beside it; while a batch is committing, the writes that
// arrive form the next batch. A write that no caller waits for (Later)
// may wait up to the committer's delay for others to share its commit,
// so that the background writes of many pools cost one fsync per delay,
// not one each.
package groupcommit

import (
	"sync"
	"time"
)

// Committer batches writes of type T. Create it with New; its zero value
// is not usable. It starts a goroutine only while writes are queued.
type Committer[T any] struct {
	commit   func([]T) []error
	maxBatch int
	delay    time.Duration

	mu      sync.Mutex
	queue   []*write[T]
	urgent  int         // writes in queue that a caller waits for
	running bool        // a goroutine is committing (or about to)
	timer   *time.Timer // armed while only Later writes are queued and none runs
	batches uint64      // batches committed, for tests and metrics
}

type write[T any] struct {
	item   T
	urgent bool
	queued time.Time
	done   chan error
}

// New returns a Committer whose batches of at most maxBatch writes are
// committed by commit, which returns nil when the whole batch committed,
// or one error per write (nil for a write that committed). A Later write
// waits at most delay for a batch.
func New[T any](commit func([]T) []error, maxBatch int, delay time.Duration) *Committer[T] {
	return &Committer[T]{commit: commit, maxBatch: max(1, maxBatch), delay: delay}
}

// Now queues item, commits it with the writes queued beside it as soon as
// no batch is committing, and returns its outcome.
func (c *Committer[T]) Now(item T) error { return c.add(item, true) }

// Later queues item to be committed within the delay (sooner when a Now
// write or a full batch starts a commit), and returns its outcome.
func (c *Committer[T]) Later(item T) error { return c.add(item, false) }

// Batches returns how many batches were committed so far.
func (c *Committer[T]) Batches() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.batches
}

// Queued returns how many writes wait for a batch (not counting those
// committing).
func (c *Committer[T]) Queued() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.queue)
}

func (c *Committer[T]) add(item T, urgent bool) error {
	w := &write[T]{item: item, urgent: urgent, queued: time.Now(), done: make(chan error, 1)}
	c.mu.Lock()
	c.queue = append(c.queue, w)
	if urgent {
		c.urgent++
	}
	c.startLocked()
	c.mu.Unlock()
	return <-w.done
}

// startLocked starts the committing goroutine when a batch is due.
func (c *Committer[T]) startLocked() {
	if !c.running && c.dueLocked() {
		c.running = true
		go c.run()
	}
}

// dueLocked reports whether a batch should be committed now: a Now write
// or a full batch is queued, or the oldest Later write has waited the
// delay. Otherwise, with writes queued, it arms the timer for the oldest.
func (c *Committer[T]) dueLocked() bool {
	if len(c.queue) == 0 {
		return false
	}
	if c.urgent == 0 && len(c.queue) < c.maxBatch {
		if wait := c.delay - time.Since(c.queue[0].queued); wait > 0 {
			if c.timer == nil {
				c.timer = time.AfterFunc(wait, c.due)
			}
			return false
		}
	}
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
	return true
}

// due is the timer's: the oldest Later write has waited the delay.
func (c *Committer[T]) due() {
	c.mu.Lock()
	c.timer = nil
	c.startLocked()
	c.mu.Unlock()
}

// run commits batches while one is due.
func (c *Committer[T]) run() {
	items := make([]T, 0, c.maxBatch)
	for {
		c.mu.Lock()
		n := min(len(c.queue), c.maxBatch)
		batch := c.queue[:n:n]
		c.queue = c.queue[n:]
		if len(c.queue) == 0 {
			c.queue = nil // let the backing array go
		}
		for _, w := range batch {
			if w.urgent {
				c.urgent--
			}
		}
		c.mu.Unlock()

		items = items[:0]
		for _, w := range batch {
			items = append(items, w.item)
		}
		errs := c.commit(items)
		clear(items)
		c.mu.Lock()
		c.batches++ // before the answers: a writer that has its answer finds its batch counted
		c.mu.Unlock()
		for i, w := range batch {
			var err error
			if errs != nil {
				err = errs[i]
			}
			w.done <- err
		}

		c.mu.Lock()
		if !c.dueLocked() {
			c.running = false
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
	}
}
