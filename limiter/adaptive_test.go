package limiter

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter/fakeclock"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// adaptiveConc is an adaptive pool of 10 permits with small, round
// settings.
var adaptiveConc = PoolConfig{Name: "db", ConcurrencyLimit: 10, Adaptive: AdaptiveConfig{Enabled: true,
	MinSamples: 10, ErrorThreshold: 0.2, Cooldown: 2 * time.Second, Interval: time.Second, Window: 10 * time.Second, Backoff: 0.9},
	LowUtilisationMark: MarkOff} // its period's timer would count among the adaptive timers the tests check are stopped

func TestAdaptiveOffByDefault(t *testing.T) {
	ee := newEventEngine(t)
	info := ee.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 4, Rate: 10})
	if info.Config.Adaptive != (AdaptiveConfig{}) {
		t.Fatalf("adaptive config of a pool without it: %+v", info.Config.Adaptive)
	}
	ee.report(t, "db", OutcomeError, 1000)
	ee.report(t, "db", OutcomeTimeout, 10)
	ee.report(t, "db", OutcomeSuccess, 5)
	s := ee.status(t, "db")
	if s.EffectiveConcurrencyLimit != 4 || s.EffectiveRate != 10 || s.ErrorsReported != 1000 || s.TimeoutsReported != 10 || s.SuccessesReported != 5 {
		t.Fatalf("status after reports without adaptive control: %+v", s.AdaptiveStatus)
	}
	if evs := ee.takeEvents(); len(evs) != 0 {
		t.Fatalf("events without adaptive control: %+v", evs)
	}
}

func TestAdaptiveCutsOnErrorsAndRecovers(t *testing.T) {
	ee := newEventEngine(t)
	info := ee.mustCreate(t, adaptiveConc)
	if a := info.Config.Adaptive; a.Increase != DefaultAdaptiveIncrease || a.MinConcurrency != 1 || a.LatencyTolerance != 0 {
		t.Fatalf("defaults not filled in: %+v", a)
	}
	// Too few samples: nothing happens, however bad.
	ee.report(t, "db", OutcomeError, 9)
	if l, _ := ee.effective(t, "db"); l != 10 {
		t.Fatalf("cut on 9 samples (min 10): limit %d", l)
	}
	ee.report(t, "db", OutcomeSuccess, 1) // 9 of 10 bad
	if l, _ := ee.effective(t, "db"); l != 9 {
		t.Fatalf("after 90%% errors: effective limit %d, want 9", l)
	}
	evs := ee.takeEvents()
	if len(evs) != 1 || evs[0].Type != PoolThrottled || evs[0].Reason != ThrottleErrors || evs[0].PrevConcurrencyLimit != 10 ||
		evs[0].ConcurrencyLimit != 9 || evs[0].ConfiguredConcurrencyLimit != 10 || evs[0].Samples != 10 || evs[0].ErrorRatio != 0.9 {
		t.Fatalf("throttle event: %+v", evs)
	}
	if s := ee.status(t, "db"); s.ThrottleReason != ThrottleErrors || !s.LastAdaptiveChange.Equal(epoch) || s.WindowSamples != 0 {
		t.Fatalf("status after the cut: %+v", s.AdaptiveStatus)
	}
	// Within the cooldown, more errors do not cut again (nor raise).
	ee.clk.Advance(1500 * time.Millisecond)
	ee.report(t, "db", OutcomeTimeout, 50)
	if l, _ := ee.effective(t, "db"); l != 9 {
		t.Fatalf("cut again within the cooldown: %d", l)
	}
	// After it, they do: 9 × 0.9 = 8.1 → 8.
	ee.clk.Advance(500 * time.Millisecond)
	ee.report(t, "db", OutcomeError, 1)
	if l, _ := ee.effective(t, "db"); l != 8 {
		t.Fatalf("after the cooldown: %d, want 8", l)
	}
	ee.takeEvents()
	// Healthy: +ceil(5% of 10) = 1 per interval once the cooldown of the
	// last cut has passed, up to 10 and no more.
	ee.clk.Advance(time.Second)
	if l, _ := ee.effective(t, "db"); l != 8 {
		t.Fatalf("raised within the cooldown: %d", l)
	}
	for want := int64(9); want <= 10; want++ {
		ee.report(t, "db", OutcomeSuccess, 20)
		ee.clk.Advance(time.Second) // the timer evaluates
		if l, _ := ee.effective(t, "db"); l != want {
			t.Fatalf("raising: %d, want %d", l, want)
		}
	}
	ee.report(t, "db", OutcomeSuccess, 20)
	ee.clk.Advance(5 * time.Second)
	evs = ee.takeEvents()
	if len(evs) != 2 || evs[0].Type != PoolRelieved || evs[1].ConcurrencyLimit != 10 || evs[1].Reason != ThrottleNone {
		t.Fatalf("relieved events: %+v", evs)
	}
	if s := ee.status(t, "db"); s.EffectiveConcurrencyLimit != 10 || s.ThrottleReason != ThrottleNone {
		t.Fatalf("status after recovery: %+v", s.AdaptiveStatus)
	}
	if ee.clk.Pending() != 0 {
		t.Fatalf("%d timers pending with the limits back at their configured values", ee.clk.Pending())
	}
}

// TestAdaptiveLoweredLimitHoldsGrants: held leases continue under a lowered
// effective limit and nothing is granted until held is under it.
func TestAdaptiveLoweredLimitHoldsGrants(t *testing.T) {
	ee := newEventEngine(t)
	ee.mustCreate(t, adaptiveConc)
	prev := map[string]int64{}
	var leases []Lease
	for i := 0; i < 10; i++ {
		leases = append(leases, ee.mustAcquire(t, AcquireRequest{Pool: "db"}))
	}
	w := ee.startAcquire(t, AcquireRequest{Pool: "db"})
	ee.checkAll(t, prev)
	ee.report(t, "db", OutcomeError, 10) // 10 → 9
	ee.clk.Advance(1900 * time.Millisecond)
	ee.report(t, "db", OutcomeError, 10)   // within the cooldown
	ee.clk.Advance(100 * time.Millisecond) // the timer judges them: 9 → 8
	if l, _ := ee.effective(t, "db"); l != 8 {
		t.Fatalf("effective limit %d, want 8", l)
	}
	ee.checkAll(t, prev)
	_, err := ee.Acquire(context.Background(), AcquireRequest{Pool: "db", Weight: 1, NoWait: true})
	wantReason(t, err, apierr.ErrNoCapacity)
	if !strings.Contains(err.Error(), "held 10 of limit 8 (lowered from 10 by adaptive control)") {
		t.Fatalf("message does not explain the lowered limit: %v", err)
	}
	for i := 0; i < 3; i++ { // held 10 → 7: below 8, the waiter is granted (8)
		if _, err := ee.Release("db", leases[i].FencingToken); err != nil {
			t.Fatal(err)
		}
		ee.checkAll(t, prev)
		if i < 2 && w.finished() {
			t.Fatalf("after %d releases (held %d, limit 8): the waiter was granted", i+1, 10-i-1)
		}
	}
	if _, err := w.result(t); err != nil {
		t.Fatal(err)
	}
	if s := ee.status(t, "db"); s.Held != 8 {
		t.Fatalf("held %d, want 8", s.Held)
	}
}

func TestAdaptiveRateCutAndFloor(t *testing.T) {
	ee := newEventEngine(t)
	ee.mustCreate(t, PoolConfig{Name: "api", Rate: 100, ConcurrencyLimit: 5, Adaptive: AdaptiveConfig{Enabled: true, Target: AdaptRate,
		MinSamples: 1, Cooldown: time.Millisecond, MinRate: 50, Backoff: 0.9}})
	for i := 0; i < 20; i++ {
		ee.report(t, "api", OutcomeError, 1)
		ee.clk.Advance(time.Millisecond)
	}
	l, r := ee.effective(t, "api")
	if l != 5 || r != 50 {
		t.Fatalf("after many cuts: limit %d rate %v; want 5 (not adapted) and the floor 50", l, r)
	}
	evs := ee.takeEvents()
	if len(evs) != 7 { // 100 90 81 72.9 65.61 59.049 53.14 → 50
		t.Fatalf("%d throttle events, want 7 (none once at the floor): %+v", len(evs), evs)
	}
	ee.checkAll(t, map[string]int64{})
}

func TestAdaptiveIdlePoolRecovers(t *testing.T) {
	ee := newEventEngine(t)
	ee.mustCreate(t, PoolConfig{Name: "api", Rate: 100, Adaptive: AdaptiveConfig{Enabled: true, MinSamples: 5, Increase: 0.25, Interval: 2 * time.Second, Backoff: 0.9}})
	ee.report(t, "api", OutcomeTimeout, 5)
	if _, r := ee.effective(t, "api"); r != 90 {
		t.Fatalf("rate %v, want 90", r)
	}
	ee.clk.Advance(time.Second)
	if _, r := ee.effective(t, "api"); r != 90 {
		t.Fatalf("raised before the interval: %v", r)
	}
	ee.clk.Advance(time.Second)
	if _, r := ee.effective(t, "api"); r != 100 {
		t.Fatalf("an idle pool did not come back: %v", r)
	}
}

func TestAdaptiveInconclusiveWindowHolds(t *testing.T) {
	ee := newEventEngine(t)
	ee.mustCreate(t, adaptiveConc)
	ee.report(t, "db", OutcomeError, 10)
	// 3 errors among 5: too few samples to cut, too many errors to raise.
	ee.report(t, "db", OutcomeError, 3)
	ee.report(t, "db", OutcomeSuccess, 2)
	ee.clk.Advance(5 * time.Second)
	if l, _ := ee.effective(t, "db"); l != 9 {
		t.Fatalf("limit %d; an inconclusive window must hold it at 9", l)
	}
}

func TestAdaptiveLatency(t *testing.T) {
	ee := newEventEngine(t)
	ee.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 20, Adaptive: AdaptiveConfig{Enabled: true, MinSamples: 5,
		Window: 10 * time.Second, LatencyTolerance: 2, Backoff: 0.9}})
	ms := time.Millisecond
	// A baseline of 10ms over a few buckets.
	for i := 0; i < 5; i++ {
		if err := ee.Report([]OutcomeReport{{Pool: "db", Successes: 10, LatencyCount: 10, LatencySum: 100 * ms, LatencyMax: 12 * ms}}); err != nil {
			t.Fatal(err)
		}
		ee.clk.Advance(time.Second)
	}
	if s := ee.status(t, "db"); s.LatencyBaseline != 10*ms || s.WindowLatency != 10*ms {
		t.Fatalf("baseline %v window %v, want 10ms", s.LatencyBaseline, s.WindowLatency)
	}
	// Latency climbs to 50ms with no errors: throttled for latency.
	for i := 0; i < 20; i++ {
		if err := ee.RecordOutcome("db", OutcomeSuccess, 50*ms); err != nil {
			t.Fatal(err)
		}
	}
	evs := ee.takeEvents()
	if len(evs) != 1 || evs[0].Reason != ThrottleLatency || evs[0].ConcurrencyLimit != 18 || evs[0].Baseline != 10*ms || evs[0].Latency <= 20*ms {
		t.Fatalf("latency throttle: %+v", evs)
	}
}

func TestAdaptiveUpdatePool(t *testing.T) {
	ee := newEventEngine(t)
	ee.mustCreate(t, adaptiveConc)
	ee.report(t, "db", OutcomeError, 10)
	// Raising the configured limit keeps the lowered effective one.
	info, err := ee.UpdatePool("db", func(c *PoolConfig) { c.ConcurrencyLimit = 20 })
	if err != nil {
		t.Fatal(err)
	}
	if s := info.Status; s.EffectiveConcurrencyLimit != 9 {
		t.Fatalf("effective limit after raising the configured one: %d, want 9", s.EffectiveConcurrencyLimit)
	}
	// Lowering it below the effective one clamps.
	if info, err = ee.UpdatePool("db", func(c *PoolConfig) { c.ConcurrencyLimit = 5 }); err != nil || info.Status.EffectiveConcurrencyLimit != 5 {
		t.Fatalf("after lowering to 5: %v %+v", err, info.Status.AdaptiveStatus)
	}
	ee.report(t, "db", OutcomeError, 10) // no cut: within the cooldown of the first
	ee.clk.Advance(2 * time.Second)
	ee.report(t, "db", OutcomeError, 10) // 5 → 4
	// Turning adaptive control off restores the configured limit at once.
	if info, err = ee.UpdatePool("db", func(c *PoolConfig) { c.Adaptive = AdaptiveConfig{} }); err != nil || info.Status.EffectiveConcurrencyLimit != 5 || info.Status.ThrottleReason != ThrottleNone {
		t.Fatalf("after turning adaptive off: %v %+v", err, info.Status.AdaptiveStatus)
	}
	if ee.clk.Pending() != 0 {
		t.Fatalf("%d timers pending without adaptive control", ee.clk.Pending())
	}
}

func TestAdaptiveConfigValidation(t *testing.T) {
	ee := newEventEngine(t)
	for _, tc := range []struct {
		cfg  PoolConfig
		want string
	}{
		{PoolConfig{Name: "a", ConcurrencyLimit: 5, Adaptive: AdaptiveConfig{Enabled: true, Backoff: 1}}, "adaptive.backoff"},
		{PoolConfig{Name: "a", ConcurrencyLimit: 5, Adaptive: AdaptiveConfig{Enabled: true, ErrorThreshold: 1.5}}, "adaptive.error_threshold"},
		{PoolConfig{Name: "a", ConcurrencyLimit: 5, Adaptive: AdaptiveConfig{Enabled: true, MinConcurrency: 6}}, "adaptive.min_concurrency"},
		{PoolConfig{Name: "a", ConcurrencyLimit: 5, Adaptive: AdaptiveConfig{Enabled: true, MinRate: 1}}, "adaptive.min_rate"},
		{PoolConfig{Name: "a", Rate: 5, Adaptive: AdaptiveConfig{Enabled: true, MinRate: 6}}, "adaptive.min_rate"},
		{PoolConfig{Name: "a", Rate: 5, Adaptive: AdaptiveConfig{Enabled: true, Target: AdaptConcurrency}}, "adaptive.target"},
		{PoolConfig{Name: "a", Rate: 5, Adaptive: AdaptiveConfig{Enabled: true, Window: time.Millisecond}}, "adaptive.window"},
		{PoolConfig{Name: "a", Rate: 5, Adaptive: AdaptiveConfig{Enabled: true, LatencyTolerance: 0.5}}, "adaptive.latency_tolerance"},
		{PoolConfig{Name: "a", Rate: 5, Adaptive: AdaptiveConfig{Enabled: true, Increase: 2}}, "adaptive.increase"},
		{PoolConfig{Name: "a", Rate: 5, Adaptive: AdaptiveConfig{Enabled: true, MinSamples: -1}}, "adaptive.min_samples"},
		{PoolConfig{Name: "a", Rate: 5, SafeRate: 6}, "safe_rate"},
		{PoolConfig{Name: "a", ConcurrencyLimit: 5, SafeRate: 1}, "safe_rate"},
	} {
		_, err := ee.CreatePool(tc.cfg)
		wantReason(t, err, apierr.ErrInvalidArgument)
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v; want it to name %s", tc.cfg, err, tc.want)
		}
	}
	// A disabled configuration is cleared, whatever it holds.
	info := ee.mustCreate(t, PoolConfig{Name: "b", Rate: 5, SafeRate: 1, Adaptive: AdaptiveConfig{Backoff: 7}})
	if info.Config.Adaptive != (AdaptiveConfig{}) || info.Config.SafeRate != 1 {
		t.Fatalf("config: %+v", info.Config)
	}
}

func TestReportAndOutcomeErrors(t *testing.T) {
	ee := newEventEngine(t)
	ee.mustCreate(t, PoolConfig{Name: "a", ConcurrencyLimit: 5})
	err := ee.Report([]OutcomeReport{{Pool: "a", Errors: 5}, {Pool: "nope", Errors: 1}})
	wantReason(t, err, apierr.ErrPoolNotFound)
	if s := ee.status(t, "a"); s.ErrorsReported != 0 {
		t.Fatalf("a batch with an unknown pool counted %d errors", s.ErrorsReported)
	}
	for _, rs := range [][]OutcomeReport{
		{{Pool: "a", Errors: -1}},
		{{Pool: "a", Successes: MaxReportCount + 1}},
		{{Pool: "a", Successes: 1}, {Pool: "a", Errors: 1}},
		{{Pool: "a", Successes: 1, LatencyCount: 2, LatencySum: 2, LatencyMax: 1}},
		{{Pool: "a", Successes: 1, LatencyCount: 1, LatencySum: 1, LatencyMax: 2}},
		{{Pool: "a", Successes: 1, LatencySum: 1}},
		{{Pool: "bad name", Successes: 1}},
	} {
		wantReason(t, ee.Report(rs), apierr.ErrInvalidArgument)
	}
	wantReason(t, ee.Report(make([]OutcomeReport, MaxReportPools+1)), apierr.ErrInvalidArgument)
	wantReason(t, ee.RecordOutcome("a", 0, 0), apierr.ErrInvalidArgument)
	wantReason(t, ee.RecordOutcome("a", 4, 0), apierr.ErrInvalidArgument)
	wantReason(t, ee.RecordOutcome("a", OutcomeError, -1), apierr.ErrInvalidArgument)
	wantReason(t, ee.RecordOutcome("nope", OutcomeError, 0), apierr.ErrPoolNotFound)
	if err := ee.Report(nil); err != nil {
		t.Fatalf("empty report: %v", err)
	}
}

func TestReleaseWithOutcome(t *testing.T) {
	ee := newEventEngine(t)
	ee.mustCreate(t, PoolConfig{Name: "a", ConcurrencyLimit: 5})
	l := ee.mustAcquire(t, AcquireRequest{Pool: "a"})
	wantReason(t, errOf(ee.Release("a", l.FencingToken, WithOutcome(9, 0))), apierr.ErrInvalidArgument)
	if s := ee.status(t, "a"); s.Held != 1 {
		t.Fatal("a release with a bad outcome released the lease")
	}
	if _, err := ee.Release("a", l.FencingToken, WithOutcome(OutcomeTimeout, time.Second)); err != nil {
		t.Fatal(err)
	}
	// A retried release counts nothing more.
	wantReason(t, errOf(ee.Release("a", l.FencingToken, WithOutcome(OutcomeTimeout, time.Second))), apierr.ErrLeaseNotFound)
	// An expired lease's outcome still counts.
	l2 := ee.mustAcquire(t, AcquireRequest{Pool: "a", TTL: time.Second})
	ee.clk.Advance(time.Second)
	wantReason(t, errOf(ee.Release("a", l2.FencingToken, WithOutcome(OutcomeError, 0))), apierr.ErrLeaseExpired)
	if s := ee.status(t, "a"); s.TimeoutsReported != 1 || s.ErrorsReported != 1 || s.Held != 0 || s.Released != 1 {
		t.Fatalf("status: %+v", s)
	}
}

// TestAdaptiveProbesGentlyAtTheLearnedCapacity: a cut within a window of
// a raise remembers the level that failed; the next raise to it waits
// ProbeInterval rather than Interval, and a window at it is judged
// against half the error threshold.
func TestAdaptiveProbesGentlyAtTheLearnedCapacity(t *testing.T) {
	ee := newEventEngine(t)
	info := ee.mustCreate(t, adaptiveConc)
	if pi := info.Config.Adaptive.ProbeInterval; pi != 5*time.Second {
		t.Fatalf("probe interval %v; want 5 intervals of 1s", pi)
	}
	ee.report(t, "db", OutcomeError, 10) // 10 → 9: no raise before it, nothing learned
	ee.clk.Advance(2 * time.Second)      // cooldown over: 9 → 10 at the usual pace
	if l, _ := ee.effective(t, "db"); l != 10 {
		t.Fatalf("limit %d after a cut with nothing learned and a cooldown; want 10", l)
	}
	ee.report(t, "db", OutcomeError, 10) // the raise to 10 failed: 10 → 9, 10 learned
	ee.clk.Advance(2 * time.Second)
	if l, _ := ee.effective(t, "db"); l != 9 {
		t.Fatalf("limit %d 2s after a failed raise to 10; want 9 until the probe interval", l)
	}
	ee.clk.Advance(3 * time.Second)
	if l, _ := ee.effective(t, "db"); l != 10 {
		t.Fatalf("limit %d a probe interval after the failed raise; want 10", l)
	}
	// At the learned level, 15% errors (under the threshold of 20%, over
	// half of it) cut.
	ee.report(t, "db", OutcomeSuccess, 17)
	ee.report(t, "db", OutcomeError, 3)
	if l, _ := ee.effective(t, "db"); l != 9 {
		t.Fatalf("limit %d after 15%% errors at the learned level; want 9", l)
	}
	// A cut soon after (outcomes of the failed probe reported late) keeps
	// what was learned: back to 9 at the usual pace, to 10 only a probe
	// interval later.
	ee.clk.Advance(2 * time.Second)
	ee.report(t, "db", OutcomeError, 10) // 9 → 8
	ee.clk.Advance(2 * time.Second)
	if l, _ := ee.effective(t, "db"); l != 9 {
		t.Fatalf("limit %d after a cut of a steady limit and a cooldown; want 9", l)
	}
	ee.clk.Advance(2 * time.Second)
	if l, _ := ee.effective(t, "db"); l != 9 {
		t.Fatalf("limit %d 2s after the raise to 9; want 9 until the probe interval", l)
	}
	ee.clk.Advance(3 * time.Second)
	if l, _ := ee.effective(t, "db"); l != 10 {
		t.Fatalf("limit %d a probe interval after the raise to 9; want 10", l)
	}
}

// newAdaptivePart returns an adaptive part, on its own, of a pool with
// limit and rate and adaptive control on (defaults), on a fake clock; the
// count of its timer's firings is in *fired.
func newAdaptivePart(limit int64, rate float64) (*adaptive, *fakeclock.Clock, *int) {
	clk := fakeclock.New(time.Unix(1_700_000_000, 0))
	timers := new(fakeTimers)
	a := new(adaptive)
	cfg := PoolConfig{Name: "p", ConcurrencyLimit: limit, Rate: rate, Adaptive: AdaptiveConfig{Enabled: true}.withDefaults(limit, rate)}
	a.init(cfg, clk, timers)
	return a, clk, &timers.adaptive
}

// TestAdaptivePartCutsRaisesAndArms drives the adaptive part alone: a
// window of errors cuts both limits by Backoff and says what the pool must
// do; the timer is armed for the next raise; a healthy tick after Interval
// raises by Increase.
func TestAdaptivePartCutsRaisesAndArms(t *testing.T) {
	a, clk, fired := newAdaptivePart(10, 100)
	now := clk.Now()
	if ch := a.record(outcomeBucket{successes: 5, errors: 5}, now); ch != nil {
		t.Fatalf("a cut below MinSamples: %+v", ch)
	}
	ch := a.record(outcomeBucket{errors: 20}, now)
	if ch == nil || ch.ev.Type != PoolThrottled || ch.ev.Reason != ThrottleErrors || !ch.lowered || !ch.rateChanged || ch.raised {
		t.Fatalf("cut: %+v", ch)
	}
	if a.limit != 8 || a.rate != 80 || ch.ev.PrevConcurrencyLimit != 10 || ch.ev.ConfiguredRate != 100 || ch.ev.Samples != 30 {
		t.Fatalf("cut to limit %d rate %v; event %+v", a.limit, a.rate, ch.ev)
	}
	if !a.lowered() || a.admits(7, 2, now) || !a.admits(7, 1, now) {
		t.Fatalf("lowered %v; admits 7+2 %v, 7+1 %v", a.lowered(), a.admits(7, 2, now), a.admits(7, 1, now))
	}
	if d := a.describe(8, now); d != "held 8 of limit 8 (lowered from 10 by adaptive control)" {
		t.Fatalf("describe: %q", d)
	}
	a.arm(now)
	if clk.Pending() != 1 {
		t.Fatalf("timer not armed: %d pending", clk.Pending())
	}
	clk.Advance(a.cfg.Interval)
	if *fired != 1 {
		t.Fatalf("timer fired %d times by Interval", *fired)
	}
	a.fired()
	ch = a.tick(clk.Now())
	if ch == nil || ch.ev.Type != PoolRelieved || !ch.raised || a.limit != 9 || a.rate != 85 {
		t.Fatalf("raise: %+v, limit %d rate %v", ch, a.limit, a.rate)
	}
	if conc, rate := a.recorded(); conc != 9 || rate != 85 {
		t.Fatalf("recorded %d, %v", conc, rate)
	}
	a.stop()
	a.arm(clk.Now())
	if clk.Pending() != 0 {
		t.Fatal("a stopped part armed its timer")
	}
}

// TestAdaptivePartConfigure: a lowered value stays lowered, within its new
// configured value, across an update; turning adaptive control off gives
// the configured values back.
func TestAdaptivePartConfigure(t *testing.T) {
	a, clk, _ := newAdaptivePart(10, 100)
	a.record(outcomeBucket{errors: 20}, clk.Now())
	cfg := PoolConfig{Name: "p", ConcurrencyLimit: 20, Rate: 50, Adaptive: a.cfg}
	if !a.configure(cfg) || a.limit != 8 || a.rate != 50 {
		t.Fatalf("update: limit %d rate %v", a.limit, a.rate)
	}
	cfg.Adaptive = AdaptiveConfig{}
	if a.configure(cfg) || a.limit != 20 || a.rate != 50 || a.lowered() || a.adaptiveControl != nil {
		t.Fatalf("off: limit %d rate %v control %+v", a.limit, a.rate, a.adaptiveControl)
	}
	var s PoolStatus
	a.status(&s, clk.Now())
	if s.EffectiveConcurrencyLimit != 20 || s.EffectiveRate != 50 || s.WindowSamples != 0 {
		t.Fatalf("status %+v", s)
	}
}

// TestAdaptivePartRestore: recorded limits come back within the floors;
// the concurrency limit only when applied (the end of recovery).
func TestAdaptivePartRestore(t *testing.T) {
	a, clk, _ := newAdaptivePart(10, 100)
	if !a.restore(0, 0.5, clk.Now()) || a.rate != 1 { // the floor: 1% of 100
		t.Fatalf("rate restored to %v", a.rate)
	}
	a.restore(4, 0, clk.Now())
	if a.limit != 10 {
		t.Fatalf("limit %d before it is applied", a.limit)
	}
	if !a.applyRestored(clk.Now()) || a.limit != 4 || a.applyRestored(clk.Now()) {
		t.Fatalf("limit %d after apply", a.limit)
	}
}
