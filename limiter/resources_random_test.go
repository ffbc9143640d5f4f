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

// TestRandomizedResources drives active and passive pools through random
// operations: acquires (waiting, cancelled, timed out), releases, renewals,
// expiry, instances added and removed (revoking or waiting), providers
// registering, offering, withdrawing, leaving, and dying by missing their
// keep-alive, limits raised and lowered, leases revoked, suspend and
// resume. After every step it checks every invariant of checkLocked,
// among them: no instance in two live leases, held weight within the
// effective limit, and no live lease past its expiry (no leaked permit).
// At the end, every lease the test holds is released and every instance
// must be free again.
func TestRandomizedResources(t *testing.T) {
	seeds := []uint64{11, 12, 13, 14}
	steps := 3000
	if testing.Short() {
		seeds, steps = seeds[:1], 1000
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { runRandomizedResources(t, seed, steps) })
	}
}

func runRandomizedResources(t *testing.T, seed uint64, steps int) {
	te := newTestEngine(t)
	rng := rand.New(rand.NewPCG(seed, seed*3+5))
	configs := []PoolConfig{
		{Name: "active", ResourceKind: ResourceActive, MaxWaiters: 20},
		{Name: "active-lim", ResourceKind: ResourceActive, Selection: SelectSpread, ConcurrencyLimit: 3, MaxWaiters: 20, RevocationPolicy: RevocationRevoke},
		{Name: "passive", ResourceKind: ResourcePassive, MaxWaiters: 20},
		{Name: "passive-rate", ResourceKind: ResourcePassive, Selection: SelectSpread, Rate: 10, Burst: 3, MaxWaiters: 20},
	}
	for _, c := range configs {
		te.mustCreate(t, c)
	}
	nextID := 0
	newResources := func(n int) []Resource {
		rs := make([]Resource, n)
		for i := range rs {
			nextID++
			rs[i] = Resource{ID: fmt.Sprintf("r%d", nextID), Attributes: map[string]string{"n": fmt.Sprint(nextID)}}
		}
		return rs
	}
	for _, c := range configs[:2] {
		if _, err := te.AddResources(c.Name, newResources(4)); err != nil {
			t.Fatal(err)
		}
	}

	var (
		held      []heldLease
		waiting   []*pending
		providers = map[string][]*Provider{} // by pool, live or not
	)
	collect := func() {
		kept := waiting[:0]
		for _, w := range waiting {
			switch {
			case !w.finished():
				kept = append(kept, w)
			case w.err == nil:
				held = append(held, heldLease{w.lease.Pool, w.lease.FencingToken})
			}
		}
		waiting = kept
	}
	pick := func(remove bool) (heldLease, bool) {
		if len(held) == 0 {
			return heldLease{}, false
		}
		i := rng.IntN(len(held))
		h := held[i]
		if remove {
			held[i] = held[len(held)-1]
			held = held[:len(held)-1]
		}
		return h, true
	}
	// someIDs returns 1 to 3 ids of the pool's instances (of provider h,
	// if not nil), or a made-up one now and then.
	someIDs := func(pool string, h *Provider) []string {
		states, _, err := te.ListResources(pool)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, s := range states {
			if (h == nil || s.Provider == h.ID()) && rng.IntN(3) == 0 && len(ids) < 3 {
				ids = append(ids, s.ID)
			}
		}
		if len(ids) == 0 || rng.IntN(10) == 0 {
			ids = append(ids, "no-such-instance")
		}
		return ids
	}
	anyProvider := func(pool string) *Provider {
		ps := providers[pool]
		if len(ps) == 0 {
			return nil
		}
		return ps[rng.IntN(len(ps))]
	}
	allowed := func(err error, kinds ...*apierr.Error) {
		t.Helper()
		if err == nil {
			return
		}
		for _, k := range kinds {
			if errors.Is(err, k) {
				return
			}
		}
		t.Fatalf("seed %d: unexpected error %v", seed, err)
	}

	prevHeld := map[string]int64{}
	ctx := context.Background()
	for step := 0; step < steps; step++ {
		cfg := configs[rng.IntN(len(configs))]
		passive := cfg.ResourceKind == ResourcePassive
		switch op := rng.IntN(100); {
		case op < 18:
			l, err := te.Acquire(ctx, AcquireRequest{Pool: cfg.Name, Weight: 1 + rng.Int64N(2), NoWait: true, TTL: time.Duration(1+rng.IntN(8)) * time.Second})
			if err == nil {
				held = append(held, heldLease{l.Pool, l.FencingToken})
			}
		case op < 28:
			req := AcquireRequest{Pool: cfg.Name, Weight: 1 + rng.Int64N(2), Priority: int32(rng.IntN(3)), TTL: time.Duration(1+rng.IntN(8)) * time.Second}
			if rng.IntN(2) == 0 {
				req.WaitTimeout = time.Duration(1+rng.IntN(3000)) * time.Millisecond
			}
			if err := checkAcquireRequest(&req); err == nil {
				waiting = append(waiting, te.startAcquire(t, req))
			}
		case op < 32:
			if len(waiting) > 0 {
				w := waiting[rng.IntN(len(waiting))]
				w.cancel()
				_, _ = w.result(t)
			}
		case op < 44:
			if h, ok := pick(true); ok {
				_, _ = te.Release(h.pool, h.token)
			}
		case op < 50:
			if h, ok := pick(false); ok {
				_, _ = te.Renew(h.pool, h.token, 0, nil)
			}
		case op < 60:
			te.clk.Advance(time.Duration(rng.IntN(1500)) * time.Millisecond)
		case op < 65 && !passive:
			_, err := te.AddResources(cfg.Name, newResources(1+rng.IntN(2)))
			allowed(err, apierr.ErrTooManyResources)
		case op < 70 && !passive:
			_, err := te.RemoveResources(cfg.Name, someIDs(cfg.Name, nil), rng.IntN(3) == 0, "random removal")
			allowed(err, apierr.ErrResourceNotFound)
		case op < 65: // passive: a provider registers, with a short TTL
			h, err := te.RegisterProvider(cfg.Name, ProviderSpec{ID: fmt.Sprintf("p%d", rng.IntN(6)), TTL: time.Duration(2+rng.IntN(4)) * time.Second}, newResources(rng.IntN(4)))
			allowed(err, apierr.ErrProviderExists)
			if err == nil {
				providers[cfg.Name] = append(providers[cfg.Name], h)
			}
		case op < 70: // passive: offer or withdraw
			if h := anyProvider(cfg.Name); h != nil {
				if rng.IntN(2) == 0 {
					_, err := h.Offer(newResources(1 + rng.IntN(2)))
					allowed(err, apierr.ErrProviderNotFound)
				} else {
					_, _, err := h.Withdraw(someIDs(cfg.Name, h), rng.IntN(3) == 0)
					allowed(err, apierr.ErrProviderNotFound, apierr.ErrResourceNotFound)
				}
			}
		case op < 74 && passive: // keep a provider alive, or let it leave
			if h := anyProvider(cfg.Name); h != nil {
				if rng.IntN(4) == 0 {
					allowed(h.Leave("random leave"), apierr.ErrProviderNotFound)
				} else {
					_, err := h.KeepAlive()
					allowed(err, apierr.ErrProviderNotFound)
				}
			}
		case op < 78: // change the limit of the pool that has one
			if cfg.ConcurrencyLimit > 0 {
				info, err := te.UpdatePool(cfg.Name, func(c *PoolConfig) { c.ConcurrencyLimit = 1 + rng.Int64N(5) })
				if err != nil {
					t.Fatalf("seed %d step %d: update: %v", seed, step, err)
				}
				if s := info.Status; s.Held > s.EffectiveConcurrencyLimit {
					t.Fatalf("seed %d step %d: %s holds %d after its limit was lowered to %d, but it revokes", seed, step, cfg.Name, s.Held, s.EffectiveConcurrencyLimit)
				}
			}
		case op < 88:
			if h, ok := pick(true); ok {
				allowed(te.RevokeLease(h.pool, h.token, "random revoke"), apierr.ErrLeaseExpired, apierr.ErrLeaseRevoked, apierr.ErrLeaseNotFound)
			}
		case op < 92:
			if _, err := te.SuspendPool(cfg.Name, rng.IntN(3) == 0); err != nil {
				t.Fatal(err)
			}
		case op < 97:
			if _, err := te.ResumePool(cfg.Name); err != nil {
				t.Fatal(err)
			}
		default: // the selection policy changes live
			if _, err := te.UpdatePool(cfg.Name, func(c *PoolConfig) { c.Selection = SelectionPolicy(rng.IntN(2)) }); err != nil {
				t.Fatal(err)
			}
		}
		collect()
		if err := te.checkInvariants(prevHeld); err != nil {
			t.Fatalf("seed %d step %d: %v", seed, step, err)
		}
	}

	for _, w := range waiting {
		w.cancel()
		_, _ = w.result(t)
	}
	collect()
	for _, h := range held {
		_, _ = te.Release(h.pool, h.token)
	}
	for _, c := range configs {
		s := te.status(t, c.Name)
		t.Logf("%s: %+v", c.Name, s)
		if s.Held != 0 || s.Leases != 0 || s.Waiting != 0 || s.ResourcesFree != s.Resources {
			t.Fatalf("pool %s after releasing everything the test holds: %+v (an instance or permit leaked)", c.Name, s)
		}
	}
	if err := te.checkInvariants(prevHeld); err != nil {
		t.Fatal(err)
	}
}
