package limiter

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
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
	// calls on its pools fail with apierr.ErrNotLeader, having changed nothing.
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
	durEnv       durEnv         // what the pools' durable parts share of the engine
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
	e := &Engine{clock: c, onLeaseEnded: opts.OnLeaseEnded, persister: opts.Persister, horizonSlack: slack, preReserve: opts.PreReserve, done: make(chan struct{}), stopping: make(chan struct{}),
		onPoolEvent: opts.OnPoolEvent, onShareUpdate: opts.OnShareUpdate, onResized: opts.OnLeaseResized, markInterval: markInterval, live: opts.Live}
	e.durEnv = durEnv{persister: e.persister, clock: c, horizonSlack: slack, preReserve: e.preReserve, closed: &e.closed, bg: &e.bg, acting: e.acting}
	return e
}

// acting reports whether the engine may act: Options.Live says so.
func (e *Engine) acting() bool { return e.live == nil || e.live() }

// errNotLeader is the error of a call on a frozen engine (Options.Live).
func errNotLeader() error {
	return errorf(apierr.ErrNotLeader, "this server no longer leads the cluster; nothing was changed; retry on the leader")
}

// Clock returns the engine's clock.
func (e *Engine) Clock() Clock { return e.clock }

// StopWaits ends the wait of every acquire and take that waits now with
// apierr.ErrShuttingDown, and refuses the same way any that would wait from now
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
	return errorf(apierr.ErrShuttingDown, "the server is shutting down; retry on another server, or after it restarts")
}

// Close fails every waiting Acquire and Take with apierr.ErrShuttingDown and stops
// the engine's timers; later calls fail with apierr.ErrShuttingDown. Leases are not
// released and nothing expires after Close. It returns once no background
// write is in flight (Options.PreReserve), so that the caller may close
// the Persister. Close is idempotent.
func (e *Engine) Close() {
	var ended []delivery
	defer func() { // after e.mu is released
		for _, d := range ended {
			deliverWaits(d)
		}
	}()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed.Swap(true) {
		return
	}
	close(e.done)
	for _, p := range e.pools.snapshot() {
		p.mu.Lock()
		p.failWaitersLocked(func(*waiter) error {
			return errorf(apierr.ErrShuttingDown, "the server is shutting down; retry on another server or after it restarts")
		})
		p.stopTimersLocked()
		if p.out.waits != nil {
			ended = append(ended, p.out.waits)
			p.out.waits = nil
		}
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
				if !p.deleted {
					// It holds something if a lease, a rate share or a
					// recovery window for ones from before a restart is left.
					holds := len(p.leases) > 0 || p.held > 0 || p.rec.active() || len(p.shr.byID) > 0 || p.shr.rec != nil
					p.dur.recordCleanStop(holds, p.rec.weightHeld(p.held))
				}
				p.mu.Unlock()
			}
		})
	}
	wg.Wait()
}

// cleanStopWriters is how many pools RecordCleanStop writes at once.
const cleanStopWriters = 64

// lookup returns the named pool, or apierr.ErrPoolNotFound / apierr.ErrShuttingDown.
func (e *Engine) lookup(name string) (*pool, error) {
	if e.closed.Load() {
		return nil, errorf(apierr.ErrShuttingDown, "the server is shutting down; retry on another server or after it restarts")
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
// (apierr.ErrPoolNotFound, also for a pool deleted meanwhile, or apierr.ErrShuttingDown)
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
	return errorf(apierr.ErrPoolNotFound, "pool %q not found; create it first", name)
}

func (e *Engine) notifyEnded(ended []LeaseEnded) {
	if e.onLeaseEnded == nil {
		return
	}
	for _, le := range ended {
		e.onLeaseEnded(le)
	}
}
