package limiter

import (
	"testing"
	"time"
)

// TestAdaptiveLimitsSurviveRestart: effective limits that adaptive
// control lowered are recorded with the pool, and a restarted engine
// starts from them rather than from the configured ones: the rate at
// once, the concurrency limit when the recovery window ends (until then
// leases from before the restart are re-adopted within the configured
// limit, as they were granted).
func TestAdaptiveLimitsSurviveRestart(t *testing.T) {
	m := newMemPersister()
	te := newPersistentTestEngine(t, m)
	cfg := PoolConfig{Name: "db", ConcurrencyLimit: 10, Rate: 100, DefaultLeaseTTL: 5 * time.Second, Adaptive: AdaptiveConfig{Enabled: true, MinSamples: 10}}
	te.mustCreate(t, cfg)
	cfg.Name = "idle"
	te.mustCreate(t, cfg)
	for _, pool := range []string{"db", "idle"} {
		if err := te.Report([]OutcomeReport{{Pool: pool, Errors: 20}}); err != nil {
			t.Fatal(err)
		}
	}
	s := te.status(t, "db")
	cut, cutRate := s.EffectiveConcurrencyLimit, s.EffectiveRate
	if cut >= 10 || cutRate >= 100 {
		t.Fatalf("after the errors: %+v", s.AdaptiveStatus)
	}
	l := te.mustAcquire(t, AcquireRequest{Pool: "db"})

	te2 := te.restart(t, m, time.Second)
	if s := te2.status(t, "idle"); s.EffectiveConcurrencyLimit != cut || s.EffectiveRate != cutRate {
		t.Fatalf("a pool without leases after the restart: %+v", s.AdaptiveStatus)
	}
	if s := te2.status(t, "db"); s.EffectiveConcurrencyLimit != 10 || s.EffectiveRate != cutRate || s.RecoveringUntil.IsZero() {
		t.Fatalf("a recovering pool after the restart: %+v", s)
	}
	if _, err := te2.RenewOrReadopt("db", l.FencingToken, 0, nil, Readopt{Weight: 1, Receipt: Receipt{Expiry: liveReceipt, Weight: 1}}); err != nil {
		t.Fatal(err)
	}
	te2.clk.Advance(5 * time.Second) // the window ends
	if s := te2.status(t, "db"); s.EffectiveConcurrencyLimit != cut || !s.RecoveringUntil.IsZero() {
		t.Fatalf("after the recovery window: %+v", s)
	}
	if err := te2.checkInvariants(map[string]int64{}); err != nil {
		t.Fatal(err)
	}
}
