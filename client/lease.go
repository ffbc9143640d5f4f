package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"

	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// leaseState is where a lease is in its life. Its transitions:
//
//	held ──Release──▶ releasing ──server confirms──────────────▶ released
//	  │                   │  └──────no word from the server────▶ unconfirmed
//	  │                   └──server: NOT_FOUND (expired, ...)──▶ lost
//	  └──renew refused, local deadline, server event, Close────▶ lost
//	unconfirmed ──Release again, server confirms (or says
//	               LEASE_NOT_FOUND: the first one got there)────▶ released
//
// held: renewed in the background. releasing: a Release is running on the
// live lease; renewals pause, the local deadline is still watched (a loss
// then wins). unconfirmed, released and lost are ended: Done is closed and
// Err says ErrReleased (the first two) or why it was lost. unconfirmed means
// a release may have reached the server without its answer reaching us;
// Release may be called again to retry. released and lost are final.
type leaseState uint8

const (
	leaseHeld leaseState = iota
	leaseReleasing
	leaseUnconfirmed
	leaseReleased
	leaseLost
)

// ended reports whether st is past the lease's end (Done is closed).
func (st leaseState) ended() bool { return st >= leaseUnconfirmed }

// releaseTimeout bounds the releases the client makes on its own (leases
// granted after their caller went away, and Do's release when the caller's
// context is already done).
const releaseTimeout = 5 * time.Second

// renewRetryMax bounds the pause between a failed renew and the next: a
// lease whose server cannot be reached is tried again at least this
// often until its local deadline, so that it is renewed soon after its
// shard's new owner is known.
const renewRetryMax = 250 * time.Millisecond

// defaultTTL is assumed for a lease whose grant does not say its TTL.
const defaultTTL = 15 * time.Second

// Lease is a grant of permits from a pool, renewed in the background until
// it is released or lost. Its methods are safe for concurrent use.
//
// The holder must stop relying on the lease once Done is closed. Err then
// says why: ErrReleased after Release, or an error matching ErrLeaseLost.
type Lease struct {
	c      *Client
	id     string
	pool   string
	weight atomic.Int64 // changes only for a concurrency share (Semaphore)
	token  uint64
	margin time.Duration
	// As granted; sent with every renew so that a restarted server can
	// re-adopt the lease (docs/recovery.md).
	clientID    string
	description string
	priority    int32
	resources   []Resource // the instances it is bound to (active and passive pools)
	// receipt is the newest expiry receipt the server sent (by expiry, then
	// share version: receiptAt), and receiptWeight the weight it signs,
	// which a renew sends with it; guarded by mu.
	receipt       string
	receiptWeight int64
	receiptAt     receiptOrder
	// share, for a concurrency share, hears every snapshot of the lease
	// the server sends (Semaphore).
	share atomic.Pointer[Semaphore]

	mu sync.Mutex
	// keeper starts keepAlive when the first renew is due, or at once on a
	// kick, so that a lease released before then costs no goroutine; nil
	// once keepAlive started or the lease ended.
	keeper *time.Timer
	// Made when first needed (a lease acquired and released with
	// ReleaseAsync before its first renew needs none of them):
	// ctx is done when the lease has ended; its cause is the lease's Err
	// (leaseCtx).
	ctx       context.Context
	cancelCtx context.CancelCauseFunc
	kick      chan struct{} // renew now (a new stream is up); set before keepAlive starts, then fixed
	// A Release (or ReleaseAsync) is running (lockRelease); relFree is
	// closed when it ends, made by the first call that waits for that.
	relHeld bool
	relFree chan struct{}
	ttl     time.Duration
	expiry  time.Time  // local estimate: when the server will expire it
	state   leaseState // see leaseState for the transitions
	err     error      // set once the lease ends: ErrReleased, or why it was lost
}

// newLease builds the lease of a grant, registers it for events and
// schedules its renewals (keepAlive starts when the first is due). sent
// and received are when the acquire was sent and its grant arrived. A grant that came back at once counts its expiry from
// sent; one that waited in the queue counts from received (the grant was
// made a one-way trip earlier, which the safety margin covers) and is
// renewed at once, to count from a renew's send time again.
func (c *Client) newLease(g *tollgatev1.Lease, sent, received time.Time) *Lease {
	ttl := g.GetTtl().AsDuration()
	if ttl <= 0 {
		ttl = g.GetExpireTime().AsTime().Sub(g.GetAcquireTime().AsTime())
	}
	if ttl <= 0 {
		ttl = defaultTTL
	}
	l := &Lease{
		c:      c,
		id:     g.GetId(),
		pool:   g.GetPool(),
		token:  g.GetFencingToken(),
		margin: c.safetyMargin(ttl),
		ttl:    ttl,
	}
	l.noteReceiptLocked(g)
	l.weight.Store(g.GetWeight())
	l.clientID, l.description, l.priority = g.GetClientId(), g.GetDescription(), g.GetPriority()
	l.resources = resourcesFromProto(g.GetResources())
	base, next := sent, sent.Add(ttl/3)
	if received.Sub(sent) > l.margin {
		base, next = received, received
	}
	l.expiry = base.Add(ttl)

	first := next // when keepAlive must run: the first renew, or the local deadline if sooner
	if d := l.expiry.Add(-l.margin); d.Before(first) {
		first = d
	}
	l.mu.Lock()
	l.keeper = time.AfterFunc(time.Until(first), func() { l.startKeepAlive(next) })
	l.mu.Unlock()
	c.mu.Lock()
	closed := c.closed
	if !closed {
		c.leases[leaseKey{l.pool, l.id}] = l
	}
	c.mu.Unlock()
	if closed {
		l.end(lostError(l, ErrClosed))
	}
	return l
}

// startKeepAlive starts keepAlive (first renew at next), when the keeper
// timer fires or on a kick, unless it has started already or the lease
// has ended; it reports whether it did.
func (l *Lease) startKeepAlive(next time.Time) bool {
	l.mu.Lock()
	start := l.keeper != nil
	if start {
		l.keeper.Stop()
		l.keeper = nil
		l.kick = make(chan struct{}, 1)
	}
	l.mu.Unlock()
	if start && !l.c.goBackground(func(ctx context.Context) { l.keepAlive(ctx, next) }) {
		l.end(lostError(l, ErrClosed))
	}
	return start
}

// Resources returns the instances the lease is bound to, in an active or
// passive pool: Weight of them, held by no other live lease while this
// one is. Nil in a free pool. The slice and its maps must not be changed.
func (l *Lease) Resources() []Resource { return l.resources }

// ID returns the lease's id, unique within its pool. It is opaque.
func (l *Lease) ID() string { return l.id }

// Pool returns the name of the pool the lease is from.
func (l *Lease) Pool() string { return l.pool }

// Weight returns the permit weight the lease holds.
func (l *Lease) Weight() int64 { return l.weight.Load() }

// FencingToken returns the lease's fencing token: strictly increasing per
// pool across all grants. Pass it to the protected system so that it can
// refuse a holder whose token is older than the newest it has seen.
func (l *Lease) FencingToken() uint64 { return l.token }

// TTL returns the time to live the lease was granted or last renewed with.
func (l *Lease) TTL() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ttl
}

// Expiry returns the local clock's estimate of when the server will expire
// the lease unless it is renewed: the time the last successful renew (or
// the acquire) was sent, plus the TTL. The lease is treated as lost a safety
// margin before it.
func (l *Lease) Expiry() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.expiry
}

// Done returns a channel that is closed when the lease ends: it was
// released, it expired or was revoked on the server, a renew was refused,
// its local deadline (Expiry minus the safety margin) passed without a
// successful renew, or its Client was closed.
func (l *Lease) Done() <-chan struct{} { return l.leaseCtx().Done() }

// leaseCtx returns the lease's context, making it on first use: it is
// cancelled, with the lease's Err as its cause, when the lease ends.
func (l *Lease) leaseCtx() context.Context {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ctx == nil {
		l.ctx, l.cancelCtx = context.WithCancelCause(context.Background())
		if l.state.ended() {
			l.cancelCtx(l.err)
		}
	}
	return l.ctx
}

// lockRelease waits, while ctx allows, until no other Release runs on the
// lease, and marks one running; unlockRelease ends it.
func (l *Lease) lockRelease(ctx context.Context) error {
	l.mu.Lock()
	for l.relHeld {
		if l.relFree == nil {
			l.relFree = make(chan struct{})
		}
		free := l.relFree
		l.mu.Unlock()
		select {
		case <-free:
		case <-ctx.Done():
			return ctx.Err()
		}
		l.mu.Lock()
	}
	l.relHeld = true
	l.mu.Unlock()
	return nil
}

// unlockRelease ends what lockRelease began.
func (l *Lease) unlockRelease() {
	l.mu.Lock()
	l.relHeld = false
	if l.relFree != nil {
		close(l.relFree)
		l.relFree = nil
	}
	l.mu.Unlock()
}

// Err returns nil while the lease is held, and once Done is closed, why it
// ended: ErrReleased after a Release, or an error matching ErrLeaseLost
// (and its cause, such as apierr.ErrLeaseExpired, apierr.ErrLeaseRevoked or ErrClosed).
func (l *Lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Context returns a context derived from parent that is also cancelled,
// with the lease's Err as its cause (see context.Cause), when the lease
// ends. Call the returned CancelFunc when done with the context.
func (l *Lease) Context(parent context.Context) (context.Context, context.CancelFunc) {
	lctx := l.leaseCtx()
	ctx, cancel := context.WithCancelCause(parent)
	stop := context.AfterFunc(lctx, func() { cancel(context.Cause(lctx)) })
	if lctx.Err() != nil { // ended already: be done on return
		cancel(context.Cause(lctx))
	}
	return ctx, func() {
		stop()
		cancel(context.Canceled)
	}
}

// Release ends the lease and returns its permits to the pool at once. It
// stops the renewals and closes Done when it returns.
//
// It returns nil when the server confirmed the release (and for a lease
// already released). For a lease that was lost before or during the
// release, it returns the loss error (matching ErrLeaseLost): the server
// had already dropped the lease, so work done under it may have overlapped
// another holder. It returns ctx.Err(), ErrClosed or a server error when
// the release could not be confirmed; the lease then ends anyway and the
// server frees its permits when its TTL passes. Release may be called
// again to retry.
//
// Release waits for a connection while ctx allows; give it a deadline.
// Concurrent calls are made one at a time. ReleaseWithOutcome also reports
// how the work ended.
func (l *Lease) Release(ctx context.Context) error {
	return l.release(ctx, nil)
}

// release is Release, carrying out (nil: no outcome) to the server.
func (l *Lease) release(ctx context.Context, out *tollgatev1.Outcome) error {
	if err := l.lockRelease(ctx); err != nil {
		return err
	}
	defer l.unlockRelease()
	l.mu.Lock()
	if settled, err := l.settledLocked(); settled {
		l.mu.Unlock()
		return err
	}
	if l.state == leaseHeld {
		l.state = leaseReleasing
	}
	retry := l.state == leaseUnconfirmed
	l.mu.Unlock()

	o := releaseOp(l.pool, l.id)
	o.build = withOutcome(o.build, out)
	build := o.build
	o.build = func(n int) (*tollgatev1.SessionRequest, error) {
		retry = retry || n > 0
		return build(n)
	}
	_, err := l.c.roundTrip(ctx, o)
	var e *Error
	switch {
	case err == nil:
		l.confirmRelease()
	case errors.As(err, &e) && retry && e.Is(apierr.ErrLeaseNotFound):
		// An earlier attempt may have released it already.
		l.confirmRelease()
		err = nil
	case errors.As(err, &e) && e.Code == codes.NotFound:
		l.end(lostError(l, err))
	default:
		l.finish(leaseUnconfirmed, ErrReleased)
	}
	if lerr := l.Err(); lerr != ErrReleased {
		return lerr
	}
	return err
}

// settledLocked reports whether a release has nothing to do: for a lease
// lost (returning its loss error) or released (nil).
func (l *Lease) settledLocked() (bool, error) {
	switch l.state {
	case leaseLost:
		return true, l.err
	case leaseReleased:
		return true, nil
	}
	return false, nil
}

// confirmRelease ends the lease as released by the server's word; an
// unconfirmed release becomes a confirmed one.
func (l *Lease) confirmRelease() {
	l.mu.Lock()
	if l.state == leaseUnconfirmed {
		l.state = leaseReleased
		l.mu.Unlock()
		return
	}
	l.mu.Unlock()
	l.finish(leaseReleased, ErrReleased)
}

// end ends the lease as lost, with err, unless it has already ended; it
// reports whether it did.
func (l *Lease) end(err error) bool { return l.finish(leaseLost, err) }

// finish moves a lease that has not ended to the ended state st with err,
// closes Done and forgets the lease; it reports whether it did.
func (l *Lease) finish(st leaseState, err error) bool {
	l.mu.Lock()
	if l.state.ended() {
		l.mu.Unlock()
		return false
	}
	l.state, l.err = st, err
	if l.keeper != nil {
		l.keeper.Stop()
		l.keeper = nil
	}
	cancel := l.cancelCtx // nil if no one asked for the context yet (leaseCtx)
	l.mu.Unlock()
	if cancel != nil {
		cancel(err)
	}
	if s := l.share.Load(); s != nil { // a concurrency share
		s.leaseEnded(l)
	}
	l.c.mu.Lock()
	if l.c.leases[leaseKey{l.pool, l.id}] == l {
		delete(l.c.leases, leaseKey{l.pool, l.id})
	}
	l.c.mu.Unlock()
	return true
}

// releasing reports whether a Release is running on the live lease.
func (l *Lease) releasing() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.state == leaseReleasing
}

// kickRenew asks the keep-alive loop to renew at once, starting it (to
// renew at once) if it has not started.
func (l *Lease) kickRenew() {
	if l.startKeepAlive(time.Now()) {
		return
	}
	l.mu.Lock()
	kick := l.kick
	l.mu.Unlock()
	if kick == nil {
		return // the lease ended before keepAlive started
	}
	select {
	case kick <- struct{}{}:
	default:
	}
}

// deadline returns the local deadline: Expiry minus the safety margin.
func (l *Lease) deadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.expiry.Add(-l.margin)
}

// keepAlive renews the lease every TTL/3 (first at next), retrying failed
// renewals until the local deadline, and ends the lease when it is lost.
// It returns when the lease ends or ctx (the Client's) is cancelled.
func (l *Lease) keepAlive(ctx context.Context, next time.Time) {
	var lastErr error
	failures := 0
	timer := time.NewTimer(0)
	defer timer.Stop()
	done := l.Done()
	for {
		deadline := l.deadline()
		now := time.Now()
		if !now.Before(deadline) {
			cause := errDeadline
			if lastErr != nil {
				cause = fmt.Errorf("%w; last renew error: %w", errDeadline, lastErr)
			}
			l.end(lostError(l, cause))
			return
		}
		timer.Reset(min(next.Sub(now), deadline.Sub(now)))
		select {
		case <-ctx.Done():
			return
		case <-done:
			return
		case <-l.kick:
			next = time.Now()
		case <-timer.C:
		}
		if time.Now().Before(next) || time.Now().After(deadline) {
			continue // the deadline check at the top decides
		}
		if l.releasing() {
			// Keep watching the deadline while Release runs.
			next = deadline
			continue
		}
		sent, err := l.renew(ctx, deadline)
		var e *Error
		switch {
		case err == nil:
			lastErr, failures = nil, 0
			next = sent.Add(l.TTL() / 3)
		case ctx.Err() != nil:
			return
		case errors.As(err, &e) && e.Code == codes.NotFound:
			if !l.releasing() { // else Release decides how the lease ended
				l.end(lostError(l, err))
				return
			}
		default:
			if !errors.Is(err, context.DeadlineExceeded) {
				l.c.log.Warn("tollgate: renew failed; retrying", "pool", l.pool, "lease_id", l.id, "err", err)
				lastErr = err
			}
			next = time.Now().Add(min(retryBackoff.delay(failures, deadline), l.TTL()/10, renewRetryMax))
			failures++
		}
	}
}

// renew renews the lease once (retrying across stream breaks until
// deadline), updates its expiry from the send time of the renew that
// succeeded, and returns that time.
func (l *Lease) renew(ctx context.Context, deadline time.Time) (time.Time, error) {
	if l.c.servers != nil || l.c.sharded() { // another server can take over from one that does not answer
		l.mu.Lock()
		ttl, margin := l.ttl, l.margin
		l.mu.Unlock()
		if d := time.Now().Add(renewTimeout(ttl, margin)); d.Before(deadline) {
			deadline = d // a server that does not answer by then is abandoned
		}
	}
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	a, err := l.c.roundTrip(ctx, op{
		pool:            l.pool,
		resetOnDeadline: true,
		build: func(int) (*tollgatev1.SessionRequest, error) {
			l.mu.Lock()
			// The weight the receipt signs: a restarted server re-adopts
			// the lease only with exactly that weight. It is at least the
			// weight local tasks may use (a share lowers that first, then
			// asks the server), so re-adopting it is safe.
			receipt, w := l.receipt, l.receiptWeight
			l.mu.Unlock()
			return &tollgatev1.SessionRequest{Kind: &tollgatev1.SessionRequest_Renew{Renew: &tollgatev1.RenewRequest{
				// No ttl: the server keeps the lease's TTL, capped at the
				// pool's current maximum (an operator may have lowered it),
				// and the answer says what it is.
				Pool: l.pool, LeaseId: l.id,
				// What the lease is, so that a server restarted since the
				// grant re-adopts it (docs/recovery.md).
				Weight: &w, ClientId: l.clientID, Description: l.description, Priority: l.priority,
				ResourceIds: l.resourceIDs(), ExpiryReceipt: receipt,
			}}}, nil
		},
	})
	if err != nil {
		return time.Time{}, err
	}
	l.shareChanged(a.resp.GetRenew().GetLease())
	l.mu.Lock()
	defer l.mu.Unlock()
	if ttl := a.resp.GetRenew().GetLease().GetTtl().AsDuration(); ttl > 0 {
		l.ttl = ttl
	}
	// The server counts the new TTL from when it got the renew, which is
	// after it was sent.
	l.expiry = a.sentAt.Add(l.ttl)
	return a.sentAt, nil
}

// leaseEvent ends the lease an event is about, if the client holds it.
func (c *Client) leaseEvent(ev *tollgatev1.LeaseEvent) {
	c.mu.Lock()
	l := c.leases[leaseKey{ev.GetLease().GetPool(), ev.GetLease().GetId()}]
	c.mu.Unlock()
	if l == nil {
		return
	}
	if ev.GetType() == tollgatev1.LeaseEventType_LEASE_EVENT_TYPE_RESIZED { // a concurrency share
		l.shareChanged(ev.GetLease())
		return
	}
	e := &Error{Code: codes.NotFound, Message: ev.GetReason()}
	switch ev.GetType() {
	case tollgatev1.LeaseEventType_LEASE_EVENT_TYPE_EXPIRED:
		e.Reason = apierr.ErrLeaseExpired.Reason
		if e.Message == "" {
			e.Message = "the lease expired on the server"
		}
	case tollgatev1.LeaseEventType_LEASE_EVENT_TYPE_REVOKED:
		e.Reason = apierr.ErrLeaseRevoked.Reason
		if e.Message == "" {
			e.Message = "the server revoked the lease"
		}
	default:
		e.Reason = apierr.Reason(ev.GetType().String())
		if e.Message == "" {
			e.Message = "the lease ended on the server"
		}
	}
	l.end(lostError(l, e))
}

// receiptOrder orders the snapshots of a lease the server sends: by
// expiry (a renew never makes it earlier), then by share version (a
// resize changes the weight, not the expiry).
type receiptOrder struct {
	expiry  time.Time
	version uint64
}

func (a receiptOrder) after(b receiptOrder) bool {
	return a.expiry.After(b.expiry) || a.expiry.Equal(b.expiry) && a.version > b.version
}

// noteReceiptLocked keeps g's expiry receipt and weight if g is the
// newest snapshot of the lease seen. l.mu is held, or l is not shared yet.
func (l *Lease) noteReceiptLocked(g *tollgatev1.Lease) {
	r := g.GetExpiryReceipt()
	if r == "" {
		return
	}
	at := receiptOrder{g.GetExpireTime().AsTime(), g.GetShare().GetVersion()}
	if l.receipt == "" || at.after(l.receiptAt) {
		l.receipt, l.receiptWeight, l.receiptAt = r, g.GetWeight(), at
	}
}

// noteReceipt is noteReceiptLocked for a snapshot that came with a
// resize answer or event.
func (l *Lease) noteReceipt(g *tollgatev1.Lease) {
	l.mu.Lock()
	l.noteReceiptLocked(g)
	l.mu.Unlock()
}
