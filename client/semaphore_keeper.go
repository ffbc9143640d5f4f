package client

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc/codes"

	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// This file is a Semaphore's keeper: one goroutine per semaphore, running
// while it has a lease or local waiters. It acquires the share's lease
// (weight 1, waiting in the pool's queue like any acquire), tells the
// server how much the share wants, gives weight back, reports drops in
// demand every renew interval, releases the lease after a renew interval
// with no local demand, and drops a lease that was lost. The lease itself
// is renewed like any lease.
//
// Safety: cap, the permits local tasks may hold, never exceeds the weight
// the server holds for the lease. It is lowered before a request giving
// weight back is sent, and raised only from a snapshot of the lease the
// server sent (an answer or a RESIZED event), never while a request giving
// weight back is unanswered (a snapshot made before the server applied it
// could arrive after), and snapshots apply in version order.

// startKeeperLocked makes sure the keeper runs, and wakes it when the
// local demand exceeds what the server was told.
func (s *Semaphore) startKeeperLocked() {
	if s.keeping {
		if min(s.inUse+s.waitW, s.max) > s.sentWant {
			s.kickKeeper()
		}
		return
	}
	s.keeping = true
	if !s.c.goBackground(s.keep) {
		s.keeping = false
		s.failWaitersLocked(ErrClosed)
	}
}

func (s *Semaphore) kickKeeper() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// keep is the keeper's loop; ctx is the Client's.
func (s *Semaphore) keep(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.ctx, cancel)()
	var tick <-chan time.Time
	var ticker *time.Ticker
	defer func() {
		if ticker != nil {
			ticker.Stop()
		}
	}()
	retry, failures := time.Duration(0), 0 // the pause before the next resize after failures in a row
	failed := func(l *Lease, err error) {
		retry = min(retryBackoff.delay(failures, l.deadline()), l.TTL()/10)
		failures++
		s.c.log.Warn("tollgate: could not resize a concurrency share; retrying", "pool", s.pool, "err", err)
	}
	for {
		s.mu.Lock()
		l := s.lease
		if l != nil && l.Err() != nil { // lost: local tasks were told through their contexts
			s.dropLeaseLocked()
			l = nil
		}
		if s.closed || (l == nil && s.waiters.Len() == 0) {
			s.keeping = false
			s.mu.Unlock()
			return
		}
		if l == nil {
			s.mu.Unlock()
			if !s.openLease(ctx) {
				return
			}
			if l := s.Lease(); ticker == nil && l != nil {
				ticker = time.NewTicker(l.TTL() / 3)
				tick = ticker.C
			}
			continue
		}
		weight, want, send := s.planLocked(false)
		s.mu.Unlock()
		if send && retry == 0 {
			switch err := s.resize(ctx, l, weight, want); {
			case err == nil:
				failures = 0
			case ctx.Err() != nil:
				s.quit()
				return
			default:
				failed(l, err)
			}
			continue
		}
		var again <-chan time.Time
		if retry > 0 {
			again = time.After(retry)
		}
		select {
		case <-ctx.Done():
			s.quit()
			return
		case <-s.kick:
		case <-l.Done():
		case <-again:
			retry = 0
		case <-tick:
			s.mu.Lock()
			idle := s.peak == 0 && s.inUse == 0 && s.waiters.Len() == 0
			var weight, want int64
			send := false
			if !idle {
				weight, want, send = s.planLocked(true)
			} else {
				s.dropLeaseLocked()
			}
			s.peak = min(s.inUse+s.waitW, s.max)
			s.mu.Unlock()
			switch {
			case idle:
				_ = l.releaseDetached(ctx)
			case send && retry == 0:
				if err := s.resize(ctx, l, weight, want); err != nil && ctx.Err() == nil {
					failed(l, err)
				}
			}
		}
	}
}

// quit ends the keeper when the semaphore or the Client closed: waiters
// fail.
func (s *Semaphore) quit() {
	s.mu.Lock()
	s.keeping = false
	s.failWaitersLocked(ErrClosed)
	s.mu.Unlock()
}

// openLease acquires the share's lease, for the local waiters. It reports
// false when the keeper should stop (its waiters were failed, or the
// semaphore or the Client closed).
func (s *Semaphore) openLease(ctx context.Context) bool {
	opts := append(s.leaseOpts[:len(s.leaseOpts):len(s.leaseOpts)], WithWeight(1), func(o *acquireOptions) { o.waitTimeout = 0 })
	octx, abandon := context.WithCancel(ctx)
	defer abandon()
	s.mu.Lock()
	s.abandon = abandon
	s.mu.Unlock()
	l, err := s.c.Acquire(octx, s.pool, opts...)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.abandon = nil
	if err != nil && octx.Err() != nil && ctx.Err() == nil {
		return true // no local waiter was left: the loop stops, or opens again for new ones
	}
	if err != nil {
		s.keeping = false
		s.failWaitersLocked(err)
		return false
	}
	if s.closed {
		s.keeping = false
		go func() { _ = l.releaseDetached(context.Background()) }()
		return false
	}
	s.lease, s.cap, s.lastW, s.target, s.version = l, 1, 1, 1, 0
	s.sentWant, s.shrinking = 0, false
	l.share.Store(s)
	s.serveLocked()
	return true
}

// dropLeaseLocked forgets the lease (lost, or released when idle). Local
// tasks still holding permits keep counting in inUse, so a new lease
// hands out only what they leave.
func (s *Semaphore) dropLeaseLocked() {
	if s.lease != nil {
		s.lease.share.Store(nil)
	}
	s.lease, s.cap, s.lastW, s.target, s.version = nil, 0, 0, 0, 0
	s.sentWant, s.shrinking = 0, false
}

// planLocked decides the next resize: the want to report (report: the
// peak demand of the interval that ended, else a demand above what the
// server was told) and the weight to keep (give back down to the share's
// target, never below what local tasks hold). A weight below cap lowers
// cap at once, before the request is sent.
func (s *Semaphore) planLocked(report bool) (weight, want int64, send bool) {
	demand := min(s.inUse+s.waitW, s.max)
	want = s.sentWant
	switch {
	case demand > s.sentWant:
		want = demand
	case report:
		want = max(min(s.peak, s.max), 1)
	}
	want = max(want, 1)
	keep := max(s.inUse, 1, min(s.target, want))
	if keep < s.cap {
		s.cap = keep
		s.lease.weight.Store(keep) // what a restarted server may re-adopt
		s.shrinking = true
	}
	if s.shrinking {
		weight = s.cap
	}
	return weight, want, weight > 0 || want != s.sentWant
}

// resize sends a resize of l (weight 0: keep) and applies the answer.
func (s *Semaphore) resize(ctx context.Context, l *Lease, weight, want int64) error {
	ctx, cancel := context.WithDeadline(ctx, l.deadline())
	defer cancel()
	a, err := s.c.roundTrip(ctx, op{pool: l.pool, build: func(int) (*tollgatev1.SessionRequest, error) {
		r := &tollgatev1.ResizeLeaseRequest{Pool: l.pool, LeaseId: l.id, Want: &want}
		if weight > 0 {
			r.Weight = &weight
		}
		return &tollgatev1.SessionRequest{Kind: &tollgatev1.SessionRequest_ResizeLease{ResizeLease: r}}, nil
	}})
	var e *Error
	switch {
	case errors.As(err, &e) && e.Code == codes.NotFound:
		l.end(lostError(l, err))
		return nil
	case err != nil:
		return err
	}
	s.mu.Lock()
	if s.lease == l {
		s.sentWant = want
	}
	s.mu.Unlock()
	l.noteReceipt(a.resp.GetResizeLease().GetLease())
	s.apply(l, a.resp.GetResizeLease().GetLease(), weight > 0)
	return nil
}

// apply applies a snapshot g of lease l; shrunk says it answers a request
// that gave weight back.
func (s *Semaphore) apply(l *Lease, g *tollgatev1.Lease, shrunk bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lease != l {
		return
	}
	sh := g.GetShare()
	if sh == nil { // a server restarted since, which re-adopted the lease as a plain one
		if s.sentWant > 0 {
			s.sentWant, s.version = 0, 0
			s.kickKeeper()
		}
		return
	}
	if shrunk {
		s.shrinking = false
	}
	if sh.GetVersion() > s.version {
		s.version, s.lastW, s.target = sh.GetVersion(), g.GetWeight(), sh.GetTarget()
	}
	c := s.lastW
	if s.shrinking {
		c = min(c, s.cap)
	}
	if c != s.cap {
		s.cap = c
		l.weight.Store(c)
	}
	s.serveLocked() // the cap or the target may have grown
	if s.cap > max(s.inUse, s.target) {
		s.kickKeeper() // give back what is free above the target
	}
}

// leaseEnded drops l, which ended, at once: no local task may start under
// it from now on. The keeper takes a new lease when tasks wait.
func (s *Semaphore) leaseEnded(l *Lease) {
	s.mu.Lock()
	if s.lease == l {
		s.dropLeaseLocked()
		s.kickKeeper()
	}
	s.mu.Unlock()
}
