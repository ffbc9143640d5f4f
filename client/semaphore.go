package client

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/codes"

	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// A Semaphore hands out a pool's permits to this process's goroutines
// locally, from a concurrency share: one lease of the pool whose weight
// follows the local demand, up to the share's maximum. Acquire and Release
// need no round trip while the share has room; the share grows when local
// demand exceeds it (the server grows it from free capacity, fairly among
// the pool's share holders) and shrinks as tasks end when the server asks
// for permits back, or when demand drops. See docs/client.md.
//
// Its methods are safe for concurrent use. Make one per pool and process,
// and Close it when done.
type Semaphore struct {
	c         *Client
	pool      string
	max       int64
	leaseOpts []AcquireOption

	mu      sync.Mutex
	lease   *Lease // nil: none yet, or it was lost or released
	cap     int64  // permits the lease lets this process hold: at most its weight on the server
	inUse   int64  // permits held by local tasks (some may be from a lease since lost)
	waiters semQueue
	waitW   int64 // weight the waiters ask for
	seq     uint64
	closed  bool

	// The share as the server last said; guarded by mu.
	lastW     int64  // its weight
	target    int64  // its fair part
	version   uint64 // of the newest snapshot applied
	shrinking bool   // a request giving weight back is unanswered: do not raise cap
	sentWant  int64  // the want the server knows (0: none)
	peak      int64  // the highest local demand since the last report

	keeping bool          // the keeper goroutine runs
	abandon func()        // stops the keeper's acquire of a lease; nil when none runs
	kick    chan struct{} // wakes the keeper
	ctx     context.Context
	stop    context.CancelFunc // ends ctx: Close
}

// SemaphoreOption configures a Semaphore.
type SemaphoreOption func(*Semaphore)

// WithLocalShare sets the most permits the semaphore's share may hold, and so
// the most its goroutines may hold at once (the pool's concurrency limit
// bounds it too). The default, and the least, is 1.
func WithLocalShare(max int64) SemaphoreOption { return func(s *Semaphore) { s.max = max } }

// WithShareLeaseOptions sets the options of the share's lease: WithTTL (and so
// the renew interval, TTL/3, which is also how often the share reports a
// drop in demand), WithPriority (its place in the pool's queue when it first
// waits for a permit) and WithDescription. WithWeight and WithWaitTimeout
// are ignored.
func WithShareLeaseOptions(opts ...AcquireOption) SemaphoreOption {
	return func(s *Semaphore) { s.leaseOpts = append(s.leaseOpts, opts...) }
}

// NewSemaphore returns a Semaphore on pool. It takes no permit until the
// first Acquire. It fails only with ErrClosed.
func (c *Client) NewSemaphore(pool string, opts ...SemaphoreOption) (*Semaphore, error) {
	if err := c.checkOpen(); err != nil {
		return nil, err
	}
	s := &Semaphore{c: c, pool: pool, max: 1, kick: make(chan struct{}, 1)}
	for _, opt := range opts {
		opt(s)
	}
	s.max = max(s.max, 1)
	s.ctx, s.stop = context.WithCancel(context.Background())
	return s, nil
}

// errSemaphoreClosed is what calls on a closed Semaphore return.
var errSemaphoreClosed = fmt.Errorf("tollgate: semaphore closed: %w", ErrClosed)

// Acquire takes n permits, waiting until they are free locally, ctx ends
// (ctx.Err()) or the WithWaitTimeout option passes (an error matching
// apierr.ErrWaitTimeout). Waiters are served by WithPriority (higher first), then in
// arrival order; a large request at the head is not passed by smaller
// ones. n must be at least 1 and at most the WithLocalShare maximum. If the
// share's first lease cannot be had (no such pool, ...), Acquire returns
// the server's error.
func (s *Semaphore) Acquire(ctx context.Context, n int64, opts ...AcquireOption) error {
	_, err := s.acquire(ctx, n, false, opts)
	return err
}

// TryAcquire takes n permits only if the share has them free now, without
// waiting and without a round trip. It never starts a share: on a
// semaphore that holds no lease yet, it fails.
func (s *Semaphore) TryAcquire(n int64) bool {
	_, err := s.acquire(context.Background(), n, true, nil)
	return err == nil
}

// Release gives back n permits taken with Acquire or TryAcquire. They go
// to local waiters first; permits the server asked back are returned to
// the pool as they come.
func (s *Semaphore) Release(n int64) {
	s.mu.Lock()
	s.inUse -= n
	if s.inUse < 0 {
		s.mu.Unlock()
		panic("tollgate: Semaphore.Release of more permits than are held")
	}
	s.serveLocked()
	if s.cap > s.target && s.lease != nil {
		s.kickKeeper() // permits to give back
	}
	s.mu.Unlock()
}

// Lease returns the share's lease (for its fencing token), or nil when the
// semaphore holds none.
func (s *Semaphore) Lease() *Lease {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lease
}

// Close ends waits with an error, stops the share and releases its lease.
// Permits held by local tasks then protect nothing: Close after they end.
func (s *Semaphore) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	s.failWaitersLocked(errSemaphoreClosed)
	l := s.lease
	s.lease, s.cap = nil, 0
	s.mu.Unlock()
	s.stop()
	if l != nil {
		_ = l.releaseDetached(context.Background())
	}
}

// acquire is Acquire and TryAcquire. It returns the lease the permits were
// handed out under.
func (s *Semaphore) acquire(ctx context.Context, n int64, try bool, opts []AcquireOption) (*Lease, error) {
	s.mu.Lock()
	if s.waiters.Len() == 0 && s.inUse+n <= s.roomLocked() && n >= 1 {
		s.inUse += n
		s.peak = max(s.peak, s.inUse)
		l := s.lease
		s.mu.Unlock()
		return l, nil
	}
	switch {
	case s.closed:
		s.mu.Unlock()
		return nil, errSemaphoreClosed
	case n < 1 || n > s.max:
		s.mu.Unlock()
		return nil, &Error{Code: codes.InvalidArgument, Reason: apierr.ErrInvalidArgument.Reason,
			Message: fmt.Sprintf("weight %d is out of range for a semaphore whose share holds at most %d permits (WithLocalShare)", n, s.max)}
	case try:
		s.mu.Unlock()
		return nil, &Error{Code: codes.ResourceExhausted, Reason: apierr.ErrNoCapacity.Reason,
			Message: fmt.Sprintf("the semaphore on pool %q has %d of %d permits held locally and cannot take %d now", s.pool, s.inUse, s.cap, n)}
	}
	o := acquireOptionsOf(opts)
	w := &semWaiter{n: n, prio: o.priority, seq: s.seq, ready: make(chan struct{})}
	s.seq++
	heap.Push(&s.waiters, w)
	s.waitW += n
	s.peak = max(s.peak, min(s.inUse+s.waitW, s.max))
	s.startKeeperLocked()
	s.mu.Unlock()

	var timeout <-chan time.Time
	if o.waitTimeout > 0 {
		t := time.NewTimer(o.waitTimeout)
		defer t.Stop()
		timeout = t.C
	}
	var err error
	select {
	case <-w.ready:
		return w.lease, w.err
	case <-ctx.Done():
		err = ctx.Err()
	case <-timeout:
		err = &Error{Code: codes.DeadlineExceeded, Reason: apierr.ErrWaitTimeout.Reason,
			Message: fmt.Sprintf("waited %v (the wait timeout) for %d permits of the semaphore on pool %q", o.waitTimeout, n, s.pool)}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if w.done { // granted (or failed) meanwhile
		if w.err == nil {
			s.inUse -= n // nobody will hold it
			s.serveLocked()
		}
		return nil, err
	}
	s.removeWaiterLocked(w)
	s.serveLocked() // w may have been the head
	if s.waiters.Len() == 0 && s.abandon != nil {
		s.abandon() // no one waits for the lease the keeper is acquiring
	}
	return nil, err
}

// roomLocked is how many permits local tasks may hold: the lease's weight
// (cap), and no more than the share's target, so that permits the server
// asked back go back rather than to new local tasks.
func (s *Semaphore) roomLocked() int64 { return min(s.cap, s.target) }

// serveLocked grants waiters from the head while they fit.
func (s *Semaphore) serveLocked() {
	for s.waiters.Len() > 0 {
		w := s.waiters[0]
		if s.inUse+w.n > s.roomLocked() {
			return
		}
		s.inUse += w.n
		s.removeWaiterLocked(w)
		w.lease = s.lease
		close(w.ready)
	}
}

func (s *Semaphore) removeWaiterLocked(w *semWaiter) {
	heap.Remove(&s.waiters, w.index)
	s.waitW -= w.n
	w.done = true
}

func (s *Semaphore) failWaitersLocked(err error) {
	for s.waiters.Len() > 0 {
		w := s.waiters[0]
		s.removeWaiterLocked(w)
		w.err = err
		close(w.ready)
	}
}

// Do runs fn under n permits (the WithWeight option; default 1) of the
// semaphore, as Client.Do does under a lease: fn's context ends if the
// share's lease is lost, LeaseFromContext gives fn the lease (for its
// fencing token), and the permits are released when fn returns (also on a
// panic). It returns the acquire's error, fn's error, or, if the lease was
// lost while fn ran, an error matching ErrLeaseLost. How fn ended goes to
// the Client's Observer and, through Report, to the pool's adaptive
// limits, as for Do.
func (s *Semaphore) Do(ctx context.Context, fn func(ctx context.Context) error, opts ...AcquireOption) error {
	start := time.Now()
	n := acquireOptionsOf(opts).weightOr1()
	l, err := s.acquire(ctx, n, false, opts)
	if err != nil {
		return err
	}
	defer s.Release(n)
	if l == nil { // handed out under no lease: cannot happen while cap > 0
		return errors.New("tollgate: semaphore granted permits without a lease")
	}
	granted := time.Now()
	lctx, cancel := l.Context(ctx)
	defer cancel()
	ferr := fn(withLease(lctx, l))
	took := time.Since(granted)
	outcome := s.c.classify(ferr)
	s.c.Report(s.pool, outcome, took)
	lerr := l.Err()
	lost := lerr != nil && lerr != ErrReleased
	s.c.workDone(WorkEvent{Pool: s.pool, Wait: granted.Sub(start), Hold: took, Err: ferr, Outcome: outcome, LeaseLost: lost})
	switch {
	case ferr != nil:
		return ferr
	case lost:
		return fmt.Errorf("tollgate: the work ran under the share lease %s of pool %q, which was lost while it ran, so it may have overlapped another holder: %w", l.id, l.pool, lerr)
	}
	return nil
}

// semWaiter is a local Acquire waiting for permits.
type semWaiter struct {
	n     int64
	prio  int32
	seq   uint64
	index int
	ready chan struct{}
	done  bool   // removed from the queue; guarded by the semaphore's mu
	lease *Lease // set with err before ready is closed
	err   error
}

// semQueue orders waiters by priority (higher first), then arrival.
type semQueue []*semWaiter

func (q semQueue) Len() int { return len(q) }
func (q semQueue) Less(i, j int) bool {
	if q[i].prio != q[j].prio {
		return q[i].prio > q[j].prio
	}
	return q[i].seq < q[j].seq
}
func (q semQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index, q[j].index = i, j
}
func (q *semQueue) Push(x any) {
	w := x.(*semWaiter)
	w.index = len(*q)
	*q = append(*q, w)
}
func (q *semQueue) Pop() any {
	old := *q
	w := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	return w
}

// shareChanged applies a snapshot of l from the server (an answer or a
// RESIZED event) to the semaphore l belongs to, if any.
func (l *Lease) shareChanged(g *tollgatev1.Lease) {
	if g != nil {
		l.noteReceipt(g)
	}
	if s := l.share.Load(); s != nil && g != nil {
		s.apply(l, g, false)
	}
}
