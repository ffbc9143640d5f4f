package limiter

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// Acquire grants a lease of req.Weight permits from req.Pool.
//
// It grants at once when no waiter of the same or higher priority is
// queued and the pool has the capacity (and, for a pool with a rate,
// the tokens: each permit of weight costs one token). Otherwise, unless
// req.NoWait, it joins the pool's queue (higher priority first, FIFO within
// a priority; only the head is ever granted) and waits until granted,
// req.WaitTimeout passes by the engine's clock, or ctx is done. A wait that
// ends ungranted never consumes a permit, and neither does a grant that
// races with ctx ending: that grant is undone.
//
// Errors: apierr.ErrPoolNotFound; apierr.ErrInvalidArgument (weight < 1, weight above the
// limit or burst, TTL out of range, client id or description too long);
// apierr.ErrNoCapacity (NoWait); apierr.ErrQueueFull; apierr.ErrWaitTimeout (WaitTimeout passed,
// or ctx's deadline); apierr.ErrCanceled (ctx cancelled); apierr.ErrLimitBelowWeight and
// apierr.ErrPoolDeleted (the pool changed while waiting); apierr.ErrShuttingDown;
// apierr.ErrRecovering (NoWait during the pool's recovery window after a restart,
// see RestorePool; without NoWait the acquire waits for the window to end);
// apierr.ErrStorageFailed (the token or expiry reservation could not be written;
// nothing was granted).
func (e *Engine) Acquire(ctx context.Context, req AcquireRequest) (Lease, error) {
	l, w, err := e.StartAcquire(req)
	if w == nil {
		return l, err
	}
	return w.Await(ctx)
}

// StartAcquire is Acquire in two steps, so that a caller serving many
// requests (a server's stream) needs no goroutine for the grants made at
// once: it grants req at once or fails as Acquire does, returning a nil
// wait, or else queues req and returns the wait, whose outcome Await or
// Notify must then learn, once. The queued request keeps its place in the
// pool's queue, and its WaitTimeout runs, from this call on.
func (e *Engine) StartAcquire(req AcquireRequest) (Lease, *Wait[Lease], error) {
	if err := checkAcquireRequest(&req); err != nil {
		return Lease{}, nil, err
	}
	return e.grantOrEnqueue(&req)
}

// grantOrEnqueue grants req at once when it can and no waiter of the same
// or higher priority is ahead of it, or else queues a waiter for it and
// returns that wait. With no wait, it returns the lease or the error.
func (e *Engine) grantOrEnqueue(req *AcquireRequest) (Lease, *Wait[Lease], error) {
	p, err := e.lockPool(req.Pool)
	if err != nil {
		return Lease{}, nil, err
	}
	defer p.unlock()
	if err := p.checkWeightLocked(req.Weight); err != nil {
		return Lease{}, nil, err
	}
	if req.TTL, err = p.cfg.leaseTTL(req.TTL); err != nil {
		return Lease{}, nil, err
	}
	now := e.clock.Now()
	head, queued := p.queue.heap.top()
	if (!queued || req.Priority > head.g.priority) && p.admitLocked(req.Weight, now) {
		g := grantOf(req)
		l, err := p.grantLocked(&g, now, 0)
		return l, nil, err
	}
	if err := p.refuseWaitLocked(req, now); err != nil {
		p.stats.Rejected++
		return Lease{}, nil, err
	}
	w := &waiter{wait: Wait[Lease]{p: p}, g: grantOf(req), index: -1, enqueued: now}
	w.wait.kind = w
	p.queue.add(w)
	p.marksLocked()
	if req.WaitTimeout > 0 {
		w.timeout = &waitTimer{d: req.WaitTimeout}
		w.timeout.t = e.clock.AfterFunc(req.WaitTimeout, func() { p.timeOutWaiter(w) })
	}
	p.dispatchLocked(now) // a new head may be blocked by tokens only: arm the rate timer
	return Lease{}, &w.wait, nil
}

// refuseWaitLocked returns why req may not wait for capacity, or nil if
// it may: it asked not to, or the queue is full.
func (p *pool) refuseWaitLocked(req *AcquireRequest, now time.Time) error {
	switch {
	case req.NoWait && p.rec.blocks(): // after a restart
		return p.rec.refusal(p.name, p.held, p.ad.limit, now)
	case req.NoWait:
		return errorf(apierr.ErrNoCapacity, "pool %q cannot grant weight %d now (%s), and the acquire does not wait", p.name, req.Weight, p.busyLocked(now))
	case p.e.waitsStopped():
		return errShuttingDown()
	case p.queue.waiting() >= p.cfg.MaxWaiters:
		return errorf(apierr.ErrQueueFull, "pool %q has %d acquires and takes waiting, its max_waiters; retry later with backoff, or raise max_waiters", p.name, p.queue.waiting())
	}
	return nil
}

// quitLocked ends the wait of an acquire given up with cause.
func (w *waiter) quitLocked(cause error) {
	p := w.wait.p
	p.finishWaiterLocked(w, Lease{}, p.abandonErrLocked(cause, w.g.weight))
	p.dispatchLocked(p.e.clock.Now()) // w may have been the head
}

// lateLocked undoes the grant of an acquire whose Await gave up with
// cause after the grant: nobody will hold the lease.
func (w *waiter) lateLocked(out *outcome[Lease], cause error) (Lease, error) {
	if out.err != nil {
		return Lease{}, out.err
	}
	p := w.wait.p
	if l := p.leases[out.val.FencingToken]; l != nil {
		p.removeLeaseLocked(l)
		p.stats.Granted--
		p.dispatchLocked(p.e.clock.Now())
	}
	return Lease{}, p.abandonErrLocked(cause, w.g.weight)
}

// checkAcquireRequest validates what can be checked without the pool.
func checkAcquireRequest(req *AcquireRequest) error {
	switch {
	case req.Weight < 1:
		return errorf(apierr.ErrInvalidArgument, "weight %d is invalid; ask for at least 1 permit", req.Weight)
	case req.TTL < 0:
		return errorf(apierr.ErrInvalidArgument, "ttl %v is negative", req.TTL)
	case req.WaitTimeout < 0:
		return errorf(apierr.ErrInvalidArgument, "wait timeout %v is negative", req.WaitTimeout)
	case len(req.ClientID) > MaxClientIDLen:
		return errorf(apierr.ErrInvalidArgument, "client id is %d bytes; the most is %d", len(req.ClientID), MaxClientIDLen)
	case len(req.Description) > MaxDescriptionLen:
		return errorf(apierr.ErrInvalidArgument, "description is %d bytes; the most is %d", len(req.Description), MaxDescriptionLen)
	}
	return nil
}

// abandonErrLocked counts and explains a wait that its caller ended with
// cause (nil: the engine stopped its waits).
func (p *pool) abandonErrLocked(cause error, weight int64) error {
	if cause == nil {
		return errShuttingDown()
	}
	if errors.Is(cause, context.DeadlineExceeded) {
		p.stats.WaitTimeouts++
		return errorf(apierr.ErrWaitTimeout, "the call's deadline passed while waiting for weight %d in pool %q (%s)", weight, p.name, p.busyLocked(p.e.clock.Now()))
	}
	p.stats.Canceled++
	return errorf(apierr.ErrCanceled, "the acquire of weight %d in pool %q was cancelled while waiting", weight, p.name)
}

// timeOutWaiter ends w's wait when its WaitTimeout passes.
func (p *pool) timeOutWaiter(w *waiter) {
	p.mu.Lock()
	defer p.unlock()
	if w.wait.endedLocked() || !p.e.acting() {
		return
	}
	now := p.e.clock.Now()
	p.stats.WaitTimeouts++
	p.finishWaiterLocked(w, Lease{}, errorf(apierr.ErrWaitTimeout, "waited %v (the wait timeout) for weight %d in pool %q without a grant (%s)", w.timeout.d, w.g.weight, p.name, p.busyLocked(now)))
	p.dispatchLocked(now)
}

// busyLocked describes why the pool cannot grant now, for messages: what
// each gate says, the bucket's tokens, and the queue.
func (p *pool) busyLocked(now time.Time) string {
	var parts []string
	for _, g := range p.gates[:p.ngates] {
		if d := g.describe(p.held, now); d != "" {
			parts = append(parts, d)
		}
	}
	if p.bucket != nil {
		parts = append(parts, "tokens "+ftoa(p.bucket.TokensAt(now))+" of burst "+itoa(p.cfg.Burst))
	}
	return strings.Join(append(parts, itoa(int64(p.queue.len()))+" waiting"), ", ")
}
