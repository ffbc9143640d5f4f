package limiter

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// checkInvariants verifies, under each pool's lock, the invariants written
// on the pool type, plus DESIGN.md invariants 1 and 2 as far as they can be
// seen at this instant:
//   - held is the sum of live lease weights; map and expiry heap agree;
//   - held is within the limit unless it was already above it at the
//     previous check (the limit was lowered under held leases) and has not
//     grown since (no grant was made while over);
//   - no live lease is past its expiry (the fake clock runs due timers
//     before Advance returns, so a lease past expiry would be a leak);
//   - heap order and indexes; waiters not done; fencing tokens below
//     lastToken and unique.
func (e *Engine) checkInvariants(prevHeld map[string]int64) error {
	now := e.clock.Now()
	for _, p := range e.pools.snapshot() {
		p.mu.Lock()
		err := p.checkLocked(now, prevHeld[p.name])
		prevHeld[p.name] = p.held
		p.mu.Unlock()
		if err != nil {
			return fmt.Errorf("pool %s: %w", p.name, err)
		}
	}
	return nil
}

func (p *pool) checkLocked(now time.Time, prevHeld int64) error {
	var sum int64
	for tok, l := range p.leases {
		sum += l.Weight
		if l.FencingToken != tok || tok > p.lastToken {
			return fmt.Errorf("lease key %d has token %d (last %d)", tok, l.FencingToken, p.lastToken)
		}
		if l.index < 0 || l.index >= len(p.expiry) || p.expiry[l.index] != l {
			return fmt.Errorf("lease %d not at its heap index", tok)
		}
		if !l.ExpireTime.After(now) {
			return fmt.Errorf("lease %d live past its expiry %v (now %v): leaked permit", tok, l.ExpireTime, now)
		}
	}
	if len(p.expiry) != len(p.leases) {
		return fmt.Errorf("expiry heap has %d leases, map %d", len(p.expiry), len(p.leases))
	}
	if sum != p.held {
		return fmt.Errorf("held %d but leases weigh %d", p.held, sum)
	}
	// The effective limit is what grants are checked against.
	// Under RevocationRevoke, any lowering revokes at once: never over.
	if p.cfg.RevocationPolicy == RevocationRevoke && p.cfg.ConcurrencyLimit > 0 && p.held > p.ad.limit {
		return fmt.Errorf("held %d over effective limit %d (configured %d) in a pool whose revocation policy is revoke", p.held, p.ad.limit, p.cfg.ConcurrencyLimit)
	}
	if lim := p.ad.limit; p.cfg.ConcurrencyLimit > 0 && p.held > lim && p.held > prevHeld {
		return fmt.Errorf("held %d over effective limit %d (configured %d) and grew from %d: a grant broke the limit", p.held, lim, p.cfg.ConcurrencyLimit, prevHeld)
	}
	for i := 1; i < len(p.expiry); i++ {
		if p.expiry[i].before(p.expiry[(i-1)/2]) {
			return fmt.Errorf("expiry heap out of order at %d", i)
		}
	}
	var ww int64
	for i, w := range p.queue.heap {
		ww += w.g.weight
		if w.wait.endedLocked() || int(w.index) != i {
			return fmt.Errorf("waiter %d: done=%v index=%d", i, w.wait.endedLocked(), w.index)
		}
		if i > 0 && w.before(p.queue.heap[(i-1)/2]) {
			return fmt.Errorf("wait queue out of order at %d", i)
		}
	}
	if ww != p.queue.weight {
		return fmt.Errorf("waiting weight %d, counted %d", p.queue.weight, ww)
	}
	if head, ok := p.queue.heap.top(); ok && (p.cfg.ConcurrencyLimit > 0 || p.res != nil) && p.bucket == nil && !p.rec.blocks() && !p.susp.on &&
		(p.cfg.ConcurrencyLimit == 0 || p.held+head.g.weight <= p.ad.limit) && (p.res == nil || int64(p.res.free.Len()) >= head.g.weight) {
		return fmt.Errorf("head waiter of weight %d fits (held %d, effective limit %d) but waits", head.g.weight, p.held, p.ad.limit)
	}
	if err := p.checkResourcesLocked(); err != nil {
		return err
	}
	if err := p.checkConcSharesLocked(); err != nil {
		return err
	}
	return p.checkAdaptiveLocked(now) // effective limits and shares
}

// TestRandomizedInvariants drives pools of every shape through thousands of
// random operations (acquire with and without waiting, cancel, release,
// renew, let expire, raise and lower limits, take tokens, revoke, suspend
// and resume, delete and re-create) and checks the invariants after every
// step. At the end every lease the test still holds is released: held must
// reach zero, proving no
// cancelled or timed-out waiter kept a permit; then fencing tokens must have
// been unique and increasing per pool.
func TestRandomizedInvariants(t *testing.T) {
	seeds := []uint64{1, 2, 3, 4}
	steps := 3000
	if testing.Short() {
		seeds, steps = seeds[:1], 1000
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { runRandomized(t, seed, steps) })
	}
}

type heldLease struct {
	pool  string
	token uint64
}

func runRandomized(t *testing.T, seed uint64, steps int) {
	te := newTestEngine(t)
	rng := rand.New(rand.NewPCG(seed, seed*7+1))
	configs := []PoolConfig{
		{Name: "conc", ConcurrencyLimit: 5, MaxWaiters: 20},
		{Name: "rate", Rate: 20, Burst: 4, MaxWaiters: 20},
		{Name: "both", ConcurrencyLimit: 3, Rate: 10, Burst: 3, MaxWaiters: 20},
		// Adaptive pools, fed random outcomes.
		{Name: "adapt", ConcurrencyLimit: 6, Rate: 40, Burst: 4, MaxWaiters: 20, Adaptive: AdaptiveConfig{Enabled: true,
			Window: 2 * time.Second, MinSamples: 3, Cooldown: 300 * time.Millisecond, Interval: 200 * time.Millisecond, Increase: 0.2, LatencyTolerance: 2}},
		{Name: "adapt-conc", ConcurrencyLimit: 8, MaxWaiters: 20, Adaptive: AdaptiveConfig{Enabled: true, Target: AdaptConcurrency,
			Window: time.Second, MinSamples: 2, Cooldown: 100 * time.Millisecond, Interval: 100 * time.Millisecond}},
		// Pools that revoke when their limit is lowered under what is held:
		// by UpdatePool, and by adaptive cuts.
		{Name: "revoke", ConcurrencyLimit: 5, MaxWaiters: 20, RevocationPolicy: RevocationRevoke},
		{Name: "adapt-revoke", ConcurrencyLimit: 8, MaxWaiters: 20, RevocationPolicy: RevocationRevoke, Adaptive: AdaptiveConfig{Enabled: true, Target: AdaptConcurrency,
			Window: time.Second, MinSamples: 2, Cooldown: 100 * time.Millisecond, Interval: 100 * time.Millisecond}},
	}
	for _, c := range configs {
		te.mustCreate(t, c)
	}

	// Background acquires are started with startAcquire, which returns only
	// once the acquire is queued or done, and cancelled ones are waited for:
	// between steps no goroutine but the test's touches the engine, so every
	// grant happens inside a step, and the clock never moves while another
	// goroutine is between reading it and arming a timer.
	var (
		held    []heldLease
		tokens  = map[string][]uint64{}
		waiting []*pending
		shares  []Share // rate shares the test holds
	)
	record := func(l Lease) {
		held = append(held, heldLease{l.Pool, l.FencingToken})
		tokens[l.Pool] = append(tokens[l.Pool], l.FencingToken)
	}
	collect := func() { // record the leases of finished background acquires
		kept := waiting[:0]
		for _, w := range waiting {
			if !w.finished() {
				kept = append(kept, w)
			} else if w.err == nil {
				record(w.lease)
			}
		}
		waiting = kept
	}
	takeHeld := func() (heldLease, bool) {
		if len(held) == 0 {
			return heldLease{}, false
		}
		i := rng.IntN(len(held))
		h := held[i]
		held[i] = held[len(held)-1]
		held = held[:len(held)-1]
		return h, true
	}
	peekHeld := func() (heldLease, bool) {
		if len(held) == 0 {
			return heldLease{}, false
		}
		return held[rng.IntN(len(held))], true
	}

	prevHeld := map[string]int64{}
	ctx := context.Background()
	for step := 0; step < steps; step++ {
		cfg := configs[rng.IntN(len(configs))]
		maxW := int64(3)
		switch op := rng.IntN(151); {
		case op < 25: // try-acquire
			l, err := te.Acquire(ctx, AcquireRequest{Pool: cfg.Name, Weight: 1 + rng.Int64N(maxW), NoWait: true, TTL: time.Duration(1+rng.IntN(10)) * time.Second})
			if err == nil {
				record(l)
			}
		case op < 40: // waiting acquire in the background
			req := AcquireRequest{Pool: cfg.Name, Weight: 1 + rng.Int64N(maxW), Priority: int32(rng.IntN(3)), TTL: time.Duration(1+rng.IntN(10)) * time.Second}
			if rng.IntN(2) == 0 {
				req.WaitTimeout = time.Duration(1+rng.IntN(3000)) * time.Millisecond
			}
			waiting = append(waiting, te.startAcquire(t, req))
		case op < 48: // cancel a waiter
			if len(waiting) > 0 {
				w := waiting[rng.IntN(len(waiting))]
				w.cancel()
				_, _ = w.result(t)
			}
		case op < 68: // release
			if h, ok := takeHeld(); ok {
				_, err := te.Release(h.pool, h.token) // may have expired: that is fine
				if rng.IntN(2) == 0 && (err == nil || errors.Is(err, apierr.ErrLeaseExpired)) {
					// ReleaseWithOutcome, in two steps: a waiter granted by the
					// release must be checked before the outcome may cut the
					// limit below it.
					if err := te.checkInvariants(prevHeld); err != nil {
						t.Fatalf("seed %d step %d: %v", seed, step, err)
					}
					_ = te.RecordOutcome(h.pool, randomOutcome(rng), time.Duration(rng.IntN(200))*time.Millisecond)
				}
			}
		case op < 78: // renew
			if h, ok := peekHeld(); ok {
				_, _ = te.Renew(h.pool, h.token, 0, nil)
			}
		case op < 90: // time passes
			te.clk.Advance(time.Duration(rng.IntN(2000)) * time.Millisecond)
		case op < 95: // change a limit
			info, err := te.UpdatePool(cfg.Name, func(c *PoolConfig) {
				if c.ConcurrencyLimit > 0 {
					c.ConcurrencyLimit = 1 + rng.Int64N(6)
				}
				if c.Rate > 0 {
					c.Rate = float64(1 + rng.IntN(30))
				}
				if cfg.Adaptive.Enabled && rng.IntN(4) == 0 { // adaptive off, or back on with defaults
					c.Adaptive = AdaptiveConfig{Enabled: !c.Adaptive.Enabled}
				}
			})
			if err != nil {
				t.Fatalf("step %d: update: %v", step, err)
			}
			if s := info.Status; cfg.RevocationPolicy == RevocationRevoke && s.Held > s.EffectiveConcurrencyLimit {
				t.Fatalf("seed %d step %d: pool %s holds %d right after its limit was lowered to %d, but it revokes", seed, step, cfg.Name, s.Held, s.EffectiveConcurrencyLimit)
			}
		case op < 100: // take tokens
			if cfg.Rate > 0 {
				_, _ = te.Take(ctx, cfg.Name, 1, 0)
			}
		case op < 112: // outcomes reported, mostly bad, for the adaptive pools
			randomReports(te, rng, cfg.Name)
		case op < 125: // revoke a lease the test holds, or one never issued
			h, ok := heldLease{cfg.Name, 1 << 40}, false
			if rng.IntN(5) != 0 {
				if hh, held := takeHeld(); held {
					h, ok = hh, true
				}
			}
			err := te.RevokeLease(h.pool, h.token, "random revoke")
			if err != nil && !errors.Is(err, apierr.ErrLeaseExpired) && !errors.Is(err, apierr.ErrLeaseRevoked) && !errors.Is(err, apierr.ErrLeaseNotFound) {
				t.Fatalf("seed %d step %d: RevokeLease: %v", seed, step, err)
			}
			_ = ok // a held lease may have expired, been revoked, or (past the tombstones) be forgotten
		case op < 135: // rate shares
			shares = randomShareOp(te, rng, cfg, shares)
		case op < 148: // resize a held lease: shrink, grow, or make it a concurrency share
			if h, ok := peekHeld(); ok {
				r := LeaseResize{Pool: h.pool, Token: h.token, Weight: rng.Int64N(5)}
				if rng.IntN(2) == 0 {
					r.Want = 1 + rng.Int64N(6)
				}
				_, _ = te.ResizeLease(r) // may have ended, not fit, or be of a rate-only pool
			}
		case op < 148+3: // suspend, sometimes revoking what is held
			if _, err := te.SuspendPool(cfg.Name, rng.IntN(3) == 0); err != nil {
				t.Fatalf("seed %d step %d: SuspendPool: %v", seed, step, err)
			}
		default: // resume
			if _, err := te.ResumePool(cfg.Name); err != nil {
				t.Fatalf("seed %d step %d: ResumePool: %v", seed, step, err)
			}
		}
		collect()
		if err := te.checkInvariants(prevHeld); err != nil {
			t.Fatalf("seed %d step %d: %v", seed, step, err)
		}
	}

	// Stop all waiting, then release what the test holds: nothing may remain.
	for _, w := range waiting {
		w.cancel()
		_, _ = w.result(t)
	}
	collect()
	for {
		h, ok := takeHeld()
		if !ok {
			break
		}
		_, _ = te.Release(h.pool, h.token)
	}
	for _, c := range configs {
		if s := te.status(t, c.Name); s.Held != 0 || s.Leases != 0 || s.Waiting != 0 {
			t.Fatalf("pool %s after releasing everything the test holds: %+v (a permit leaked)", c.Name, s)
		}
	}
	revoked := map[string]int64{}
	for _, le := range te.endedLeases() {
		if le.Reason == EndRevoked {
			revoked[le.Lease.Pool]++
		}
	}
	for _, c := range configs {
		if s := te.status(t, c.Name); s.Revoked != revoked[c.Name] {
			t.Fatalf("pool %s counts %d revoked, OnLeaseEnded reported %d", c.Name, s.Revoked, revoked[c.Name])
		}
	}
	for pool, toks := range tokens {
		seen := map[uint64]bool{}
		for _, tok := range toks {
			if seen[tok] {
				t.Fatalf("pool %s: fencing token %d granted twice", pool, tok)
			}
			seen[tok] = true
		}
	}
}

// TestNoLeakAfterHoldersDie: leases nobody renews are all back within their
// TTL, however they were acquired.
func TestNoLeakAfterHoldersDie(t *testing.T) {
	te := newTestEngine(t)
	te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 50, MaxLeaseTTL: time.Minute})
	rng := rand.New(rand.NewPCG(9, 9))
	var maxTTL time.Duration
	for i := 0; i < 50; i++ {
		ttl := time.Duration(100+rng.IntN(59900)) * time.Millisecond
		maxTTL = max(maxTTL, ttl)
		te.mustAcquire(t, AcquireRequest{Pool: "db", TTL: ttl})
	}
	te.clk.Advance(maxTTL - time.Millisecond)
	if s := te.status(t, "db"); s.Held == 0 {
		t.Fatal("everything expired early")
	}
	te.clk.Advance(time.Millisecond)
	if s := te.status(t, "db"); s.Held != 0 || s.Expired != 50 {
		t.Fatalf("after the longest TTL: %+v", s)
	}
}
