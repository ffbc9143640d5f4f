package limiter

import (
	"context"
	"errors"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// Options configures an Engine.
type Options struct {
	// Clock is the engine's time source; nil means SystemClock.
	Clock Clock
	// OnLeaseEnded, if set, is called for every lease that ends without its
	// holder's release (expiry, forced pool deletion, revocation). It is called without
	// engine locks held, from the goroutine that ended the lease (for expiry,
	// a clock timer), and must not block for long or call back into the
	// engine synchronously in a way that waits on that goroutine.
	OnLeaseEnded func(LeaseEnded)
	// Persister, if set, makes pool definitions and each pool's
	// DurableState durable; a change becomes visible only once it is
	// written (see DurableState). Nil keeps everything in memory.
	Persister Persister
	// HorizonSlack is how far ahead a pool's lease horizon is written; 0
	// means DefaultHorizonSlack. See DurableState.
	HorizonSlack time.Duration
	// PreReserve makes a pool write its next block of fencing tokens and
	// its next lease horizon in the background when it has used half of
	// the current ones, so that grants do not wait for the disk under the
	// pool's lock. Off, the write is made by the grant
	// that needs it. Only with a Persister.
	PreReserve bool
	// OnPoolEvent, if set, is called for every change of a pool's
	// effective limits made by adaptive control and every
	// event mark a pool crosses; and
	// OnShareUpdate for every change to a rate share that its holder did
	// not ask for. Both are called like OnLeaseEnded: without
	// engine locks held, from the goroutine that made the change, and must
	// not block for long.
	OnPoolEvent   func(PoolEvent)
	OnShareUpdate func(ShareUpdate)
	// OnLeaseResized, if set, is called like OnLeaseEnded for every change
	// to a concurrency share that its holder did not ask for (see
	// ResizeLease).
	OnLeaseResized func(LeaseResized)
	// MarkEventInterval is the least time between two reported mark
	// events of one kind from one pool; 0 means
	// DefaultMarkEventInterval, a negative value reports every crossing.
	MarkEventInterval time.Duration
	// Live, when set, says whether the engine may still act for its
	// owner (a server of a cluster passes its leadership term's). Once it
	// says false the engine is frozen, for good: its timers change nothing
	// (no lease expires, no waiter is granted or timed out, no mark,
	// adaptive, provider or recovery tick), no callback is called, and
	// calls on its pools fail with ErrNotLeader, having changed nothing.
	// It is asked under pool locks, so it must be cheap and take no lock
	// of the engine. nil: always live.
	Live func() bool
}

// Engine is the limiter: a set of named pools, each with a concurrency limit
// and/or a token bucket, granting leases with TTLs and queueing the
// acquires it cannot grant at once. It is safe for concurrent use; each pool
// has its own lock, so pools do not contend with each other. Create one
// with New.
type Engine struct {
	clock        Clock
	onLeaseEnded func(LeaseEnded)
	persister    Persister      // nil: in memory only
	horizonSlack time.Duration  // Options.HorizonSlack, resolved
	preReserve   bool           // Options.PreReserve
	bg           sync.WaitGroup // background writes in flight: Close waits for them
	// Callbacks of adaptive control and rate shares.
	onPoolEvent   func(PoolEvent)
	onShareUpdate func(ShareUpdate)
	onResized     func(LeaseResized)
	markInterval  time.Duration // Options.MarkEventInterval, resolved
	live          func() bool   // Options.Live; nil: always

	pools  poolIndex
	closed atomic.Bool
	done   chan struct{} // closed by Close
	// stopping is closed by StopWaits: every wait ends, and none begins.
	stopping chan struct{}
	stopOnce sync.Once
	mu       sync.Mutex // serializes Close with pool creation

	// tokenFloor is the highest fencing token any deleted pool may have
	// issued. A new pool starts its tokens above it, so that a pool deleted
	// and created again under the same name never repeats a token: a
	// protected system that keys fencing by pool name stays safe.
	tokenFloor atomic.Uint64
}

// New returns an Engine with no pools.
func New(opts Options) *Engine {
	c := opts.Clock
	if c == nil {
		c = SystemClock{}
	}
	slack := opts.HorizonSlack
	if slack <= 0 {
		slack = DefaultHorizonSlack
	}
	markInterval := opts.MarkEventInterval
	if markInterval == 0 {
		markInterval = DefaultMarkEventInterval
	}
	return &Engine{clock: c, onLeaseEnded: opts.OnLeaseEnded, persister: opts.Persister, horizonSlack: slack, preReserve: opts.PreReserve, done: make(chan struct{}), stopping: make(chan struct{}),
		onPoolEvent: opts.OnPoolEvent, onShareUpdate: opts.OnShareUpdate, onResized: opts.OnLeaseResized, markInterval: markInterval, live: opts.Live}
}

// acting reports whether the engine may act: Options.Live says so.
func (e *Engine) acting() bool { return e.live == nil || e.live() }

// errNotLeader is the error of a call on a frozen engine (Options.Live).
func errNotLeader() error {
	return errorf(ErrNotLeader, "this server no longer leads the cluster; nothing was changed; retry on the leader")
}

// Clock returns the engine's clock.
func (e *Engine) Clock() Clock { return e.clock }

// StopWaits ends the wait of every acquire and take that waits now with
// ErrShuttingDown, and refuses the same way any that would wait from now
// on; grants that need no wait go on until Close. A server calls it when
// its shutdown starts, so that waiting callers learn at once.
func (e *Engine) StopWaits() { e.stopOnce.Do(func() { close(e.stopping) }) }

// waitsStopped reports whether StopWaits was called.
func (e *Engine) waitsStopped() bool {
	select {
	case <-e.stopping:
		return true
	default:
		return false
	}
}

// errShuttingDown is the error of a wait that StopWaits ended or refused.
func errShuttingDown() error {
	return errorf(ErrShuttingDown, "the server is shutting down; retry on another server, or after it restarts")
}

// errWaitsStopped is an await's cause when StopWaits ended it.
var errWaitsStopped = errors.New("waits stopped")

// Close fails every waiting Acquire and Take with ErrShuttingDown and stops
// the engine's timers; later calls fail with ErrShuttingDown. Leases are not
// released and nothing expires after Close. It returns once no background
// write is in flight (Options.PreReserve), so that the caller may close
// the Persister. Close is idempotent.
func (e *Engine) Close() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed.Swap(true) {
		return
	}
	close(e.done)
	for _, p := range e.pools.snapshot() {
		p.mu.Lock()
		p.failWaitersLocked(func(*waiter) error {
			return errorf(ErrShuttingDown, "the server is shutting down; retry on another server or after it restarts")
		})
		p.stopTimersLocked()
		p.mu.Unlock() // no deliveries under e.mu
	}
	e.bg.Wait() // background writes take no engine lock
}

// RecordCleanStop records, after Close, that each pool holding nothing
// (no lease, no rate share, no recovery window open) stopped cleanly, so
// that the next start restores it with no recovery window. A server calls
// it when it shuts down gracefully; a crash never does. For the other
// pools it writes the leases released or revoked that the background has
// not written yet, and lowers the held-weight bound to the weight held:
// nothing is granted after Close, so no lease can hold more, and the next
// start grants at once what fits beside it. A failed write leaves the
// bound written ahead, higher, which is merely more cautious. It does
// nothing before Close, or without a Persister.
func (e *Engine) RecordCleanStop() {
	if !e.closed.Load() {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	// Several pools at a time, so that a Persister that batches writes
	// (group commit) makes few commits for many pools.
	ps := e.pools.snapshot()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(cleanStopWriters, len(ps)) {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(len(ps)); i = next.Add(1) - 1 {
				p := ps[i]
				p.mu.Lock()
				p.recordCleanStopLocked()
				p.mu.Unlock()
			}
		})
	}
	wg.Wait()
}

// cleanStopWriters is how many pools RecordCleanStop writes at once.
const cleanStopWriters = 64

// lookup returns the named pool, or ErrPoolNotFound / ErrShuttingDown.
func (e *Engine) lookup(name string) (*pool, error) {
	if e.closed.Load() {
		return nil, errorf(ErrShuttingDown, "the server is shutting down; retry on another server or after it restarts")
	}
	if !e.acting() {
		return nil, errNotLeader()
	}
	p := e.pools.get(name)
	if p == nil {
		return nil, e.poolNotFound(name)
	}
	return p, nil
}

// lockPool returns the named pool with its lock held, or an error
// (ErrPoolNotFound, also for a pool deleted meanwhile, or ErrShuttingDown)
// with no lock held. The caller must unlock p.mu.
func (e *Engine) lockPool(name string) (*pool, error) {
	p, err := e.lookup(name)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	if p.deleted {
		p.unlock()
		return nil, poolNotFound(name)
	}
	if !e.acting() { // checked again under the lock: the deadline may have passed meanwhile
		p.mu.Unlock()
		return nil, errNotLeader()
	}
	return p, nil
}

func poolNotFound(name string) error {
	if err := ValidatePoolName(name); err != nil {
		return err
	}
	return errorf(ErrPoolNotFound, "pool %q not found; create it first", name)
}

func (e *Engine) notifyEnded(ended []LeaseEnded) {
	if e.onLeaseEnded == nil {
		return
	}
	for _, le := range ended {
		e.onLeaseEnded(le)
	}
}

// CreatePool creates a pool from cfg with defaults filled in and returns it.
// With a Persister, the pool is written before it becomes visible.
// Errors: ErrInvalidArgument (the message names the field), ErrPoolExists,
// ErrStorageFailed (nothing was created).
func (e *Engine) CreatePool(cfg PoolConfig) (PoolInfo, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return PoolInfo{}, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed.Load() {
		return PoolInfo{}, errorf(ErrShuttingDown, "the server is shutting down")
	}
	if e.pools.get(cfg.Name) != nil { // e.mu serializes every pool creation
		return PoolInfo{}, errorf(ErrPoolExists, "pool %q already exists; update it, or pick another name", cfg.Name)
	}
	now := e.clock.Now()
	p := newPool(e, cfg, now, e.tokenFloor.Load())
	if err := p.persistCreateLocked(); err != nil { // durable before visible
		p.stopTimersLocked() // the pool is never seen: its event marks armed a timer
		return PoolInfo{}, err
	}
	// Read before the pool is visible: an acquire may lock it at once.
	info := p.infoLocked(now)
	e.pools.add(p)
	return info, nil
}

// GetPool returns a pool's configuration and status. Errors: ErrPoolNotFound.
func (e *Engine) GetPool(name string) (PoolInfo, error) {
	p, err := e.lockPool(name)
	if err != nil {
		return PoolInfo{}, err
	}
	defer p.unlock()
	return p.infoLocked(e.clock.Now()), nil
}

// poolsAfter returns up to limit pools whose names sort after `after`, in
// name order, and whether more follow. A limit below 1 means 1.
func (e *Engine) poolsAfter(after string, limit int) ([]*pool, bool) {
	return e.pools.after(after, max(limit, 1))
}

// ListPools returns up to limit pools whose names sort after `after`, in
// name order, and whether more follow. A limit below 1 means 1.
func (e *Engine) ListPools(after string, limit int) ([]PoolInfo, bool) {
	ps, more := e.poolsAfter(after, limit)

	now := e.clock.Now()
	infos := make([]PoolInfo, 0, len(ps))
	for _, p := range ps {
		p.mu.Lock()
		if !p.deleted {
			infos = append(infos, p.infoLocked(now))
		}
		p.unlock()
	}
	return infos, more
}

// UpdatePool applies update to a copy of the pool's configuration, fills in
// defaults, validates the result and makes it live at once:
//   - a higher concurrency limit or rate admits waiters at once;
//   - a lower concurrency limit blocks new grants until the held weight is
//     under it (held leases continue; with RevocationRevoke, leases are
//     revoked until the held weight is within it, reported to OnLeaseEnded
//     with EndRevoked), and fails the waiters whose weight is above it
//     with ErrLimitBelowWeight (likewise for a lower burst);
//   - TTL changes apply to grants and renewals from now on;
//   - with adaptive control, an effective limit that was lowered stays
//     lowered (within its new floor and configured value), and a change of
//     the rate rebalances the rate shares (shrunk ones are pushed to
//     OnShareUpdate; with no rate left, they are revoked).
//
// update runs under the pool's lock and must not call the engine. The name
// cannot change. With a Persister, the new configuration is written before
// it becomes live. ByActor names who made the change in the revocations a
// lowered concurrency limit makes. Errors: ErrPoolNotFound,
// ErrInvalidArgument, ErrStorageFailed (nothing was changed).
func (e *Engine) UpdatePool(name string, update func(*PoolConfig), opts ...CallOption) (PoolInfo, error) {
	actor := callOptionsOf(opts).actor
	p, err := e.lookup(name)
	if err != nil {
		return PoolInfo{}, err
	}
	p.mu.Lock()
	defer p.unlock()
	if p.deleted {
		return PoolInfo{}, poolNotFound(name)
	}
	cfg := p.cfg
	update(&cfg)
	if cfg.Name != p.name {
		return PoolInfo{}, errorf(ErrInvalidArgument, "pool %q cannot be renamed to %q; create a new pool instead", p.name, cfg.Name)
	}
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return PoolInfo{}, err
	}
	if cfg.ResourceKind != p.cfg.ResourceKind {
		return PoolInfo{}, errorf(ErrInvalidArgument, "pool %q is %s and cannot become %s; create a new pool instead", p.name, p.cfg.ResourceKind, cfg.ResourceKind)
	}
	now := e.clock.Now()
	if err := p.persistConfigLocked(cfg, now); err != nil { // durable before visible
		return PoolInfo{}, err
	}
	old := p.cfg
	p.cfg = cfg
	p.updateTime = now
	e.pools.changed()
	p.limitsChangedLocked(old, now) // effective limits and shares follow
	p.applyMarksLocked()
	p.enforceLimitByLocked(now, actor) // RevocationRevoke
	p.applyRateLocked(now)
	p.failWaitersLocked(func(w *waiter) error {
		if err := p.checkWeightLocked(w.g.weight); err != nil {
			return errorf(ErrLimitBelowWeight, "pool %q was changed while this acquire waited and can no longer grant weight %d: %v", p.name, w.g.weight, err)
		}
		return nil
	})
	p.dispatchLocked(now)
	p.marksLocked() // a new limit or mark may be crossed
	return p.infoLocked(now), nil
}

// DeletePool removes a pool. Without force it refuses while leases are
// held (ErrPoolBusy). With force, the held leases end (reported to
// OnLeaseEnded with EndPoolDeleted). Either way, waiting acquires fail with
// ErrPoolDeleted, and its rate shares are revoked (reported to
// OnShareUpdate). With a Persister, the deletion is written first.
// Errors: ErrPoolNotFound, ErrPoolBusy, ErrStorageFailed (nothing was
// deleted).
func (e *Engine) DeletePool(name string, force bool) error {
	p, err := e.lockPool(name)
	if err != nil {
		return err
	}
	if len(p.leases) > 0 && !force {
		n, held := len(p.leases), p.held
		p.unlock()
		return errorf(ErrPoolBusy, "pool %q has %d live leases holding %d permits; release them, wait for them to expire, or delete with force to end them", name, n, held)
	}
	if err := p.persistDeleteLocked(max(p.lastToken, e.tokenFloor.Load())); err != nil { // durable before visible
		p.unlock()
		return err
	}
	e.RaiseTokenFloor(p.lastToken) // before the name is free for a new pool
	e.pools.remove(p)
	p.deleted = true
	p.failWaitersLocked(func(*waiter) error {
		return errorf(ErrPoolDeleted, "pool %q was deleted while this acquire waited", name)
	})
	var ended []LeaseEnded
	for _, l := range p.leases {
		ended = append(ended, LeaseEnded{Lease: l.Lease, Reason: EndPoolDeleted, Owner: l.owner})
	}
	sort.Slice(ended, func(i, j int) bool { return ended[i].Lease.FencingToken < ended[j].Lease.FencingToken })
	clear(p.leases)
	p.expiry = nil
	p.held = 0
	p.notifyDrainedLocked() // DrainPool callers return
	p.endAllSharesLocked(ShareRevoked)
	p.providersGoneLocked()
	p.stopTimersLocked()
	p.endedLocked(ended)
	p.unlock()
	return nil
}

// RaiseTokenFloor makes every pool created from now on start its fencing
// tokens above floor (if floor is above the current floor). DeletePool
// raises it to the deleted pool's last token; after a restart, the server
// restores it from its store before it serves. It never lowers the floor.
func (e *Engine) RaiseTokenFloor(floor uint64) {
	for {
		cur := e.tokenFloor.Load()
		if floor <= cur || e.tokenFloor.CompareAndSwap(cur, floor) {
			return
		}
	}
}

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
// Errors: ErrPoolNotFound; ErrInvalidArgument (weight < 1, weight above the
// limit or burst, TTL out of range, client id or description too long);
// ErrNoCapacity (NoWait); ErrQueueFull; ErrWaitTimeout (WaitTimeout passed,
// or ctx's deadline); ErrCanceled (ctx cancelled); ErrLimitBelowWeight and
// ErrPoolDeleted (the pool changed while waiting); ErrShuttingDown;
// ErrRecovering (NoWait during the pool's recovery window after a restart,
// see RestorePool; without NoWait the acquire waits for the window to end);
// ErrStorageFailed (the token or expiry reservation could not be written;
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
// wait, or else queues req and returns the wait, whose Await must then be
// called exactly once (with a done context to give up) to learn the
// outcome. The queued request keeps its place in the pool's queue, and
// its WaitTimeout runs, from this call on.
func (e *Engine) StartAcquire(req AcquireRequest) (Lease, *AcquireWait, error) {
	if err := checkAcquireRequest(&req); err != nil {
		return Lease{}, nil, err
	}
	return e.grantOrEnqueue(&req)
}

// AcquireWait is an acquire queued by StartAcquire: its record in the
// pool's queue.
type AcquireWait struct {
	w waiter
}

// Await waits for the queued acquire as Acquire does, until it is granted
// or fails or ctx is done, and returns its outcome.
func (a *AcquireWait) Await(ctx context.Context) (Lease, error) {
	w := &a.w
	p := w.p
	p.mu.Lock()
	if w.out == nil { // only Await needs the channel: a notified waiter is smaller
		w.out = &waitOutcome{ready: make(chan struct{})}
	} else {
		w.out.ready = make(chan struct{})
		close(w.out.ready) // ended already
	}
	p.unlock()
	return p.await(ctx, w)
}

// Notify is the other way to learn the outcome, with no goroutine waiting:
// then is called once with it, when the acquire is granted or fails (at
// once if it has already). It is called with the pool locked, or on
// Notify's caller, so it must neither block nor call the engine. Use
// either Await or Notify, once. StopWaits does not end a notified wait:
// its owner ends it with Cancel.
func (a *AcquireWait) Notify(then func(Lease, error)) {
	w := &a.w
	p := w.p
	p.mu.Lock()
	if !w.done {
		w.then = then
		p.unlock()
		return
	}
	out := w.out
	p.unlock()
	if out == nil {
		panic("limiter: AcquireWait.Notify called twice")
	}
	then(out.lease, out.err)
}

// Cancel gives up a notified wait, as the end of Acquire's ctx with cause
// (context.Canceled or context.DeadlineExceeded) would: then gets the
// error. A wait already granted or failed is left as it ended.
func (a *AcquireWait) Cancel(cause error) {
	w := &a.w
	p := w.p
	p.mu.Lock()
	defer p.unlock()
	if !w.done {
		p.finishWaiterLocked(w, Lease{}, p.abandonErrLocked(cause, w.g.weight))
		p.dispatchLocked(p.e.clock.Now()) // w may have been the head
	}
}

// grantOrEnqueue grants req at once when it can and no waiter of the same
// or higher priority is ahead of it, or else queues a waiter for it and
// returns that wait. With no wait, it returns the lease or the error.
func (e *Engine) grantOrEnqueue(req *AcquireRequest) (Lease, *AcquireWait, error) {
	p, err := e.lockPool(req.Pool)
	if err != nil {
		return Lease{}, nil, err
	}
	defer p.unlock()
	if err := p.checkWeightLocked(req.Weight); err != nil {
		return Lease{}, nil, err
	}
	if req.TTL, err = p.resolveTTLLocked(req.TTL); err != nil {
		return Lease{}, nil, err
	}
	now := e.clock.Now()
	head, queued := p.waiters.top()
	if (!queued || req.Priority > head.g.priority) && p.admitLocked(req.Weight, now) {
		g := grantOf(req)
		l, err := p.grantLocked(&g, now, 0)
		return l, nil, err
	}
	if err := p.refuseWaitLocked(req, now); err != nil {
		p.stats.Rejected++
		return Lease{}, nil, err
	}
	a := &AcquireWait{w: waiter{p: p, g: grantOf(req), seq: p.seq, index: -1, waitTimeout: req.WaitTimeout, enqueued: now}}
	w := &a.w
	p.seq++
	p.waiters.push(w)
	p.rankAddLocked(w)
	p.waitingWeight += req.Weight
	p.marksLocked()
	if req.WaitTimeout > 0 {
		w.timer = e.clock.AfterFunc(req.WaitTimeout, func() { p.timeOutWaiter(w) })
	}
	p.dispatchLocked(now) // a new head may be blocked by tokens only: arm the rate timer
	return Lease{}, a, nil
}

// refuseWaitLocked returns why req may not wait for capacity, or nil if
// it may: it asked not to, or the queue is full.
func (p *pool) refuseWaitLocked(req *AcquireRequest, now time.Time) error {
	switch {
	case req.NoWait && p.recoveryBlocksLocked(): // after a restart
		return p.recoveringErrLocked(now)
	case req.NoWait:
		return errorf(ErrNoCapacity, "pool %q cannot grant weight %d now (%s), and the acquire does not wait", p.name, req.Weight, p.busyLocked(now))
	case p.e.waitsStopped():
		return errShuttingDown()
	case int64(len(p.waiters))+p.takesWaiting >= p.cfg.MaxWaiters:
		return errorf(ErrQueueFull, "pool %q has %d acquires and takes waiting, its max_waiters; retry later with backoff, or raise max_waiters", p.name, int64(len(p.waiters))+p.takesWaiting)
	}
	return nil
}

// await waits for w's grant until ctx is done. If ctx ends first, it
// ends the wait if it has not ended; if it ended in a grant, it undoes the
// grant: nobody will hold it.
func (p *pool) await(ctx context.Context, w *waiter) (Lease, error) {
	out := w.out
	select {
	case <-out.ready:
	case <-ctx.Done():
	case <-p.e.stopping:
	}
	cause := ctx.Err()
	if cause == nil {
		select {
		case <-out.ready: // granted (or ended), even if waits stopped meanwhile
			return out.lease, out.err
		default:
			cause = errWaitsStopped
		}
	}
	p.mu.Lock()
	defer p.unlock()
	now := p.e.clock.Now()
	if !w.done {
		p.finishWaiterLocked(w, Lease{}, p.abandonErrLocked(cause, w.g.weight))
		p.dispatchLocked(now) // w may have been the head
		return Lease{}, out.err
	}
	if out.err != nil {
		return Lease{}, out.err
	}
	if l := p.leases[out.lease.FencingToken]; l != nil {
		p.removeLeaseLocked(l)
		p.stats.Granted--
		p.dispatchLocked(now)
	}
	return Lease{}, p.abandonErrLocked(cause, w.g.weight)
}

// checkAcquireRequest validates what can be checked without the pool.
func checkAcquireRequest(req *AcquireRequest) error {
	switch {
	case req.Weight < 1:
		return errorf(ErrInvalidArgument, "weight %d is invalid; ask for at least 1 permit", req.Weight)
	case req.TTL < 0:
		return errorf(ErrInvalidArgument, "ttl %v is negative", req.TTL)
	case req.WaitTimeout < 0:
		return errorf(ErrInvalidArgument, "wait timeout %v is negative", req.WaitTimeout)
	case len(req.ClientID) > MaxClientIDLen:
		return errorf(ErrInvalidArgument, "client id is %d bytes; the most is %d", len(req.ClientID), MaxClientIDLen)
	case len(req.Description) > MaxDescriptionLen:
		return errorf(ErrInvalidArgument, "description is %d bytes; the most is %d", len(req.Description), MaxDescriptionLen)
	}
	return nil
}

// abandonErrLocked counts and explains a wait that its caller ended.
func (p *pool) abandonErrLocked(cause error, weight int64) error {
	if cause == errWaitsStopped {
		return errShuttingDown()
	}
	if errors.Is(cause, context.DeadlineExceeded) {
		p.stats.WaitTimeouts++
		return errorf(ErrWaitTimeout, "the call's deadline passed while waiting for weight %d in pool %q (%s)", weight, p.name, p.busyLocked(p.e.clock.Now()))
	}
	p.stats.Canceled++
	return errorf(ErrCanceled, "the acquire of weight %d in pool %q was cancelled while waiting", weight, p.name)
}

// timeOutWaiter ends w's wait when its WaitTimeout passes.
func (p *pool) timeOutWaiter(w *waiter) {
	p.mu.Lock()
	defer p.unlock()
	if w.done || !p.e.acting() {
		return
	}
	now := p.e.clock.Now()
	p.stats.WaitTimeouts++
	p.finishWaiterLocked(w, Lease{}, errorf(ErrWaitTimeout, "waited %v (the wait timeout) for weight %d in pool %q without a grant (%s)", w.waitTimeout, w.g.weight, p.name, p.busyLocked(now)))
	p.dispatchLocked(now)
}

// busyLocked describes why the pool cannot grant now, for messages: what
// each gate says, the bucket's tokens, and the queue.
func (p *pool) busyLocked(now time.Time) string {
	var parts []string
	for _, g := range p.gates {
		if d := g.describe(p, now); d != "" {
			parts = append(parts, d)
		}
	}
	if p.bucket != nil {
		parts = append(parts, "tokens "+ftoa(p.bucket.TokensAt(now))+" of burst "+itoa(p.cfg.Burst))
	}
	return strings.Join(append(parts, itoa(int64(len(p.waiters)))+" waiting"), ", ")
}

// Release ends a live lease, returns its permits to the pool at once,
// granting waiters they now fit, and returns the lease as it was when
// released (the zero Lease when it returns an error, and for a lease from
// before a restart that was never re-adopted, which the engine does not
// know). During the pool's recovery window after a restart, releasing a
// lease from before the restart that was not re-adopted succeeds (see
// RestorePool). See WithOutcome for reporting how the work went.
//
// Errors: ErrPoolNotFound; ErrLeaseExpired (it expired before the
// release, so the work ran unprotected at the end; reported once the
// expiry has been processed); ErrLeaseNotFound (released already, or never
// issued); ErrInvalidArgument for a bad outcome (then nothing is
// released).
func (e *Engine) Release(pool string, token uint64, opts ...ReleaseOption) (Lease, error) {
	o := releaseOptionsOf(opts)
	if o.outcome != nil {
		if err := checkOutcome(o.outcome.Outcome, o.outcome.Latency); err != nil {
			return Lease{}, err
		}
	}
	p, err := e.lockPool(pool)
	if err != nil {
		return Lease{}, err
	}
	defer p.unlock()
	var released Lease
	l := p.leases[token]
	switch {
	case l == nil && p.releasePreRestartLocked(token): // a lease from before a restart
	case l == nil:
		err = p.missingLeaseErrLocked(token)
	default:
		// A lease still in the map is released even if its expiry instant
		// has just passed and the expiry timer has not run yet: the permits
		// go back either way, and not reading the clock keeps Release cheap.
		// (Renew, by contrast, refuses: extending such a lease would be
		// wrong.)
		p.removeLeaseLocked(l)
		p.liveChangedLocked() // not re-adopted after a restart
		p.stats.Released++
		if len(p.waiters) > 0 || len(p.csh.byToken) > 0 {
			p.dispatchLocked(e.clock.Now())
		}
		released = l.Lease
	}
	if o.outcome != nil && (err == nil || errors.Is(err, ErrLeaseExpired)) {
		p.recordOutcomesLocked(outcomeBucketOf(o.outcome.Outcome, o.outcome.Latency), e.clock.Now())
	}
	return released, err
}

// ReleaseOption qualifies a Release.
type ReleaseOption func(*releaseOptions)

type releaseOptions struct {
	outcome *ReleaseOutcome
}

func releaseOptionsOf(opts []ReleaseOption) releaseOptions {
	if len(opts) == 0 {
		return releaseOptions{} // no allocation on the common path
	}
	var o releaseOptions
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// WithOutcome makes a Release count how the work done under the lease
// ended (latency 0: not measured), as RecordOutcome would, under the same
// lock. The outcome is counted when the release succeeds or the lease had
// expired (the work ran either way, and how it went tells about the
// protected system), not for a lease the pool does not know, so a retried
// release counts once.
func WithOutcome(o Outcome, latency time.Duration) ReleaseOption {
	return func(ro *releaseOptions) { ro.outcome = &ReleaseOutcome{Outcome: o, Latency: latency} }
}

// ReleaseOutcome is how the work done under a released lease ended, as
// RecordOutcome takes it: an Outcome and its latency (0: not measured).
type ReleaseOutcome struct {
	Outcome Outcome
	Latency time.Duration
}

// Renew extends a live lease to ttl from now (0: the TTL it has, capped at
// the pool's current MaxLeaseTTL) and returns
// it; a non-nil owner replaces the lease's Owner. It never makes the
// expiry earlier: a renew with a TTL shorter than what is left keeps the
// expiry the lease has (and takes ttl as its TTL for the next renew). A lease whose ExpireTime
// has passed cannot be renewed, even if the expiry timer has not run yet.
// It never re-adopts a lease from before a restart; RenewOrReadopt does.
// Errors: ErrPoolNotFound; ErrLeaseExpired (the holder must stop);
// ErrLeaseNotFound; ErrInvalidArgument (ttl out of range);
// ErrStorageFailed (the new expiry could not be reserved; the lease keeps
// its old one).
func (e *Engine) Renew(pool string, token uint64, ttl time.Duration, owner any) (Lease, error) {
	return e.renew(pool, token, ttl, owner, nil)
}

// renew is Renew and, with a non-nil ra, RenewOrReadopt.
func (e *Engine) renew(pool string, token uint64, ttl time.Duration, owner any, ra *Readopt) (Lease, error) {
	if ttl < 0 {
		return Lease{}, errorf(ErrInvalidArgument, "ttl %v is negative", ttl)
	}
	p, err := e.lockPool(pool)
	if err != nil {
		return Lease{}, err
	}
	defer p.unlock()
	now := e.clock.Now()
	l := p.leases[token]
	if l == nil && ra != nil { // a lease from before a restart is re-adopted
		nl, err := p.readoptLocked(token, ttl, ra, owner, now)
		if err != nil || nl != nil {
			var out Lease
			if nl != nil {
				out = nl.Lease
			}
			return out, err
		}
	}
	if l == nil || !l.ExpireTime.After(now) {
		ended := p.expireDueLocked(now)
		if len(ended) > 0 {
			p.dispatchLocked(now)
		}
		err := p.missingLeaseErrLocked(token)
		p.endedLocked(ended)
		return Lease{}, err
	}
	if ttl == 0 {
		// Keep the lease's TTL, but within the pool's maximum as it is now:
		// an operator lowering max_lease_ttl must not make every holder's
		// keep-alive fail.
		ttl = min(l.TTL, p.cfg.MaxLeaseTTL)
	}
	if ttl, err = p.resolveTTLLocked(ttl); err != nil {
		return Lease{}, err
	}
	// A renew never moves the expiry earlier than one already signed: the
	// lease then stays live until the latest expiry any of its receipts
	// shows, so that no receipt outlives it (docs/recovery.md).
	expiry := now.Add(ttl)
	if expiry.After(l.ExpireTime) {
		if err := p.reserveLocked(now, expiry, 0); err != nil { // durable horizon first
			return Lease{}, err
		}
		l.ExpireTime = expiry
		p.expiry.fix(l.index)
	}
	l.TTL = ttl
	if owner != nil {
		l.owner = owner
	}
	return p.leaseOutLocked(l), nil
}

// Take takes tokens from a pool's bucket. If they are not available now,
// it reserves them and waits until they are, provided that is within
// maxWait by the engine's clock; otherwise it reserves nothing and fails
// with ErrRateLimited, whose RetryAfter says how long until they would be.
// If ctx ends during the wait, the reservation is cancelled (its tokens go
// back to the bucket as far as later reservations allow) and Take fails
// with ErrCanceled or ErrWaitTimeout.
//
// Errors: ErrPoolNotFound; ErrNoRateLimit; ErrInvalidArgument (tokens < 1
// or above the burst, negative maxWait); ErrRateLimited; ErrCanceled;
// ErrWaitTimeout; ErrShuttingDown.
func (e *Engine) Take(ctx context.Context, pool string, tokens int64, maxWait time.Duration) (TakeResult, error) {
	res, w, err := e.StartTake(pool, tokens, maxWait)
	if w == nil {
		return res, err
	}
	return w.Await(ctx)
}

// StartTake is Take in two steps, so that a caller serving many requests
// (a server's stream) needs no goroutine while tokens are on their way: it
// takes the tokens at once or fails as Take does, returning a nil wait, or
// else reserves them and returns the wait, whose outcome Await or Notify
// must then learn, once.
func (e *Engine) StartTake(pool string, tokens int64, maxWait time.Duration) (TakeResult, *TakeWait, error) {
	if tokens < 1 {
		return TakeResult{}, nil, errorf(ErrInvalidArgument, "tokens %d is invalid; take at least 1", tokens)
	}
	if maxWait < 0 {
		return TakeResult{}, nil, errorf(ErrInvalidArgument, "max wait %v is negative", maxWait)
	}
	p, r, delay, err := e.takeOrReserve(pool, tokens, maxWait)
	switch {
	case err != nil:
		return TakeResult{}, nil, err
	case delay == 0:
		return TakeResult{Tokens: tokens}, nil, nil
	}
	w := &TakeWait{p: p, r: r, tokens: tokens, delay: delay}
	p.mu.Lock()
	w.timer = e.clock.AfterFunc(delay, w.ready)
	p.unlock()
	return TakeResult{}, w, nil
}

// TakeWait is a take of StartTake waiting for its reserved tokens: one
// record and a timer, no goroutine.
type TakeWait struct {
	p      *pool
	r      *rate.Reservation
	tokens int64
	delay  time.Duration
	timer  Timer // guarded by p.mu, as is the rest below
	done   bool
	res    TakeResult
	err    error
	then   func(TakeResult, error)
}

// Await waits for the tokens as Take does, until they are there, ctx is
// done or the engine stops its waits, and returns the outcome.
func (w *TakeWait) Await(ctx context.Context) (TakeResult, error) {
	ready := make(chan struct{})
	var res TakeResult
	var err error
	w.Notify(func(r TakeResult, e error) { res, err = r, e; close(ready) })
	select {
	case <-ready:
		return res, err
	case <-ctx.Done():
		w.Cancel(ctx.Err())
	case <-w.p.e.done:
		w.Cancel(nil)
	case <-w.p.e.stopping:
		w.Cancel(nil)
	}
	<-ready
	return res, err
}

// Notify is the other way to learn the outcome, with no goroutine waiting:
// then is called once with it, when the tokens are there or the wait is
// cancelled (at once if either has happened), with no lock held. Use
// either Await or Notify, once. StopWaits does not end a notified wait:
// its owner ends it with Cancel.
func (w *TakeWait) Notify(then func(TakeResult, error)) {
	p := w.p
	p.mu.Lock()
	if !w.done {
		w.then = then
		p.unlock()
		return
	}
	res, err := w.res, w.err
	p.unlock()
	then(res, err)
}

// Cancel gives up the wait as the end of Take's ctx with cause
// (context.Canceled or context.DeadlineExceeded) would; a nil cause is the
// engine stopping its waits. The reserved tokens go back to the bucket as
// far as later reservations allow. A wait whose tokens are there already
// is left as it ended.
func (w *TakeWait) Cancel(cause error) {
	p := w.p
	p.mu.Lock()
	if w.done {
		p.unlock()
		return
	}
	w.timer.Stop()
	p.takesWaiting--
	now := p.e.clock.Now()
	w.r.CancelAt(now)
	p.stats.TokensGranted -= w.tokens
	p.waits.addTokens(now, -w.tokens)
	switch {
	case cause == nil:
		w.err = errShuttingDown()
	case errors.Is(cause, context.DeadlineExceeded):
		p.stats.WaitTimeouts++
		w.err = errorf(ErrWaitTimeout, "the call's deadline passed while waiting for %d tokens of pool %q", w.tokens, p.name)
	default:
		p.stats.Canceled++
		w.err = errorf(ErrCanceled, "the take of %d tokens from pool %q was cancelled while waiting", w.tokens, p.name)
	}
	w.finishLocked()
}

// ready ends the wait when its tokens are there (its timer).
func (w *TakeWait) ready() {
	p := w.p
	p.mu.Lock()
	if w.done {
		p.unlock()
		return
	}
	p.takesWaiting--
	if !p.e.acting() { // tokens reserved before the deadline are not handed out after it
		w.err = errNotLeader()
		w.finishLocked()
		return
	}
	w.res = TakeResult{Tokens: w.tokens, Waited: w.delay}
	w.finishLocked()
}

// finishLocked marks the wait done with its outcome, unlocks the pool and
// tells the notified owner, if any.
func (w *TakeWait) finishLocked() {
	w.done = true
	then := w.then
	w.then = nil
	w.p.unlock()
	if then != nil {
		then(w.res, w.err)
	}
}

// takeOrReserve takes tokens from pool's bucket, reserving them if they
// are not there yet, and returns the pool, the reservation and how long
// until its tokens are there (0: taken now). It reserves nothing, and
// fails, if that is beyond maxWait.
func (e *Engine) takeOrReserve(pool string, tokens int64, maxWait time.Duration) (*pool, *rate.Reservation, time.Duration, error) {
	p, err := e.lockPool(pool)
	if err != nil {
		return nil, nil, 0, err
	}
	defer p.unlock()
	if p.bucket == nil {
		return nil, nil, 0, errorf(ErrNoRateLimit, "pool %q has no rate limit, only a concurrency limit; use Acquire, or give the pool a rate", pool)
	}
	if tokens > p.cfg.Burst {
		return nil, nil, 0, errorf(ErrInvalidArgument, "tokens %d exceeds pool %q's burst of %d; no wait could satisfy it: take fewer at a time", tokens, pool, p.cfg.Burst)
	}
	now := e.clock.Now()
	r := p.bucket.ReserveN(now, int(tokens))
	delay := r.DelayFrom(now)
	if delay > maxWait {
		r.CancelAt(now)
		p.stats.Rejected++
		if p.noRefillLocked() { // rate shares hold the whole rate
			return nil, nil, 0, p.noRefillErrLocked(tokens)
		}
		return nil, nil, 0, &Error{Code: CodeResourceExhausted, Reason: ReasonRateLimited, RetryAfter: delay,
			Message: "pool " + quote(pool) + " would have " + itoa(tokens) + " tokens in " + delay.String() + ", beyond the wait limit of " + maxWait.String() + "; retry after that"}
	}
	if delay > 0 && e.waitsStopped() {
		r.CancelAt(now)
		return nil, nil, 0, errShuttingDown()
	}
	if n := int64(len(p.waiters)) + p.takesWaiting; delay > 0 && n >= p.cfg.MaxWaiters {
		r.CancelAt(now)
		p.stats.Rejected++
		return nil, nil, 0, errorf(ErrQueueFull, "pool %q has %d acquires and takes waiting, its max_waiters; retry later with backoff, or raise max_waiters", pool, n)
	}
	p.stats.TokensGranted += tokens
	p.waits.addTokens(now, tokens) // for the rate's utilisation
	if delay > 0 {
		p.takesWaiting++
	}
	return p, r, delay, nil
}
