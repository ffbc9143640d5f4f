package limiter

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// TestRecoveryPart: the recovery window as a part, on its own: outside a
// window it holds nothing back; in one it names the tokens from before
// the restart, counts what their leases may hold, and holds back every
// grant only when that is not bounded.
func TestRecoveryPart(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	var r recovery
	r.configure(true)
	if r.active() || r.blocks() || !r.admits(0, 1, now) || r.mayName(1) || r.describe(0, now) != "" {
		t.Fatal("a pool not recovering holds grants back")
	}
	if w := r.weightHeld(3); w.held != 3 || !w.bounded {
		t.Fatalf("weight held outside a window: %+v", w)
	}

	until := now.Add(time.Minute)
	r.begin(now, until, 100, 5, false)
	if !r.active() || !r.blocks() {
		t.Fatal("the window does not hold grants back")
	}
	if !r.admits(0, 1, now) {
		t.Fatal("a bounded window refuses: the limit's gate decides, with what old leases may hold counted as held")
	}
	if w := r.weightHeld(3); w.held != 8 || !w.bounded {
		t.Fatalf("weight held in a bounded window: %+v, want 3+5", w)
	}
	if !r.mayName(100) || r.mayName(101) || r.mayName(0) {
		t.Fatal("mayName: only tokens 1 to the ceiling 100 may be from before the restart")
	}
	r.readopted(2)
	if got := r.unknownHeld(); got != 3 {
		t.Fatalf("unknown weight after re-adopting 2 of 5: %d", got)
	}
	if d := r.describe(0, now); !strings.Contains(d, "may hold up to 3") {
		t.Fatalf("describe: %q", d)
	}
	var e *apierr.Error
	if err := r.refusal("p", 4, 16, now.Add(time.Second)); !errors.As(err, &e) || !errors.Is(err, apierr.ErrRecovering) || e.RetryAfter != 59*time.Second ||
		!strings.Contains(e.Message, "up to 3 of its limit 16 (held now 4)") {
		t.Fatalf("refusal: %v", err)
	}
	var s PoolStatus
	r.status(&s, now)
	if !s.RecoveringUntil.Equal(until) {
		t.Fatalf("status: recovering until %v", s.RecoveringUntil)
	}
	r.end()
	if r.active() || r.unknownHeld() != 0 || !r.admits(0, 1, now) {
		t.Fatal("the window did not end")
	}

	r.begin(now, until, 100, -1, false) // no bound was kept
	if r.admits(0, 1, now) || !r.unboundedHeld() || r.weightHeld(2).bounded {
		t.Fatal("a window with no held-weight bound grants")
	}
	r.configure(false) // a pool with only a rate: nothing held to protect
	if !r.admits(0, 1, now) || r.describe(0, now) != "" {
		t.Fatal("a window holds back a pool with only a rate")
	}
}

// TestReadoptRefusal: a re-adoption is refused for a receipt that does
// not vouch for the lease, one past its expiry, another weight, a lease
// the live set says ended (saying how, when it ended since the restart),
// or a weight above the one it was resized to.
func TestReadoptRefusal(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	ok := Readopt{Weight: 2, Receipt: Receipt{Expiry: now.Add(time.Second), Weight: 2}}
	endedSince := errorf(apierr.ErrLeaseRevoked, "revoked since")
	for _, c := range []struct {
		name       string
		ra         Readopt
		live       bool
		resized    int64
		endedSince error
		want       error
		says       string
	}{
		{"fits", ok, true, 0, nil, nil, ""},
		{"resized to it", ok, true, 2, nil, nil, ""},
		{"a bad receipt", Readopt{Weight: 2, Receipt: Receipt{Problem: "its signature is wrong"}}, true, 0, nil, apierr.ErrLeaseNotReadopted, "its signature is wrong"},
		{"no receipt", Readopt{Weight: 2}, true, 0, nil, apierr.ErrLeaseNotReadopted, "did not carry the lease's expiry receipt"},
		{"another weight", Readopt{Weight: 3, Receipt: ok.Receipt}, true, 0, nil, apierr.ErrLeaseNotReadopted, "signed for weight 2"},
		{"expired", Readopt{Weight: 2, Receipt: Receipt{Expiry: now, Weight: 2}}, true, 0, nil, apierr.ErrLeaseExpired, "expired at"},
		{"ended before", ok, false, 0, nil, apierr.ErrLeaseNotReadopted, "ended before the restart"},
		{"ended since", ok, false, 0, endedSince, apierr.ErrLeaseRevoked, "revoked since"},
		{"shrunk", ok, true, 1, nil, apierr.ErrLeaseNotReadopted, "resized to weight 1"},
	} {
		err := readoptRefusal("p", 7, &c.ra, now, c.live, c.resized, c.endedSince)
		if c.want == nil {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
			continue
		}
		if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v, want %v saying %q", c.name, err, c.want, c.says)
		}
	}
}

// TestSuspensionPart: a suspension holds back every grant while on, and
// wakes the callers waiting for the pool to drain once.
func TestSuspensionPart(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	var su suspension
	if !su.admits(0, 1, now) || su.describe(0, now) != "" {
		t.Fatal("a pool not suspended holds grants back")
	}
	su.on = true
	var s PoolStatus
	su.status(&s, now)
	if su.admits(0, 1, now) || su.describe(0, now) == "" || !s.Suspended {
		t.Fatal("a suspended pool grants")
	}
	su.notifyDrained() // nobody waits: nothing to close
	ch := make(chan struct{})
	su.drained = ch
	su.notifyDrained()
	su.notifyDrained()
	select {
	case <-ch:
	default:
		t.Fatal("the drain's waiters were not woken")
	}
}
