package adaptivesim

import (
	"bytes"
	"flag"
	"os"
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

var update = flag.Bool("update", false, "rewrite docs/adaptive-trace.svg from the simulation")

// chartPath is the committed chart, from this package's directory.
const chartPath = "../../docs/adaptive-trace.svg"

const chartTitle = "Adaptive rate limit against a backend of changing capacity (simulation)"

// TestAdaptiveConvergesBelowCapacity runs DefaultConfig (adaptive limits
// at their defaults) and checks, window by window:
//   - the effective rate starts at the configured 400/s and is below the
//     true capacity (200/s) within 5 windows of the default 2s cooldown
//     (10s), and the error rate falls from near 100% well under the
//     threshold;
//   - in the steady state (30s to 70s) the effective rate averages below
//     the capacity, never exceeds it by more than one raise step, and
//     the error rate averages under the threshold;
//   - when the backend degrades to 120/s, the effective rate is below it
//     within 5s and averages below it while degraded;
//   - when it heals (500/s, above the configured rate), the effective
//     rate is back at the configured 400/s within 50s (20 raise
//     intervals, and a probe interval at the level where a raise failed
//     while degraded), with errors at the backend's base rate.
func TestAdaptiveConvergesBelowCapacity(t *testing.T) {
	tr, err := Run(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	const s = time.Second
	if p := tr.Points[0]; p.Configured != 400 || p.ErrorRate < 0.3 {
		t.Fatalf("first second: %+v; want the configured rate overloading the backend", p)
	}
	at, ok := tr.FirstAtOrBelow(0, 200)
	if !ok || at > 10*s {
		t.Fatalf("effective rate below the capacity of 200/s at %v (found %v); want within 10s", at, ok)
	}
	start := tr.Between(0, 5*s)
	steady := tr.Between(30*s, 70*s)
	if steady.MeanEffective >= 200 || steady.MaxEffective > 220 || steady.MeanErrorRate >= 0.1 || steady.MeanErrorRate > start.MeanErrorRate/5 {
		t.Fatalf("steady state against 200/s: %+v (first 5s: %+v)", steady, start)
	}
	at, ok = tr.FirstAtOrBelow(70*s, 120)
	if !ok || at > 75*s {
		t.Fatalf("below the degraded capacity of 120/s at %v (found %v); want by 75s", at, ok)
	}
	if d := tr.Between(80*s, 110*s); d.MeanEffective >= 120 || d.MeanErrorRate >= 0.2 {
		t.Fatalf("while degraded to 120/s: %+v", d)
	}
	at, ok = tr.FirstAtOrAbove(110*s, 400)
	if !ok || at > 160*s {
		t.Fatalf("back at the configured 400/s at %v (found %v); want within 50s of healing", at, ok)
	}
	if h := tr.Between(160*s, 180*s); h.MeanEffective != 400 || h.MeanErrorRate > 0.02 {
		t.Fatalf("healed: %+v", h)
	}
	if len(tr.Events) == 0 {
		t.Fatal("no pool events")
	}
}

// TestLatencyModeCatchesOverloadEarlier: with latency_tolerance 2, the
// error rate is clearly lower than with errors alone (both probing at one
// pace, so that the modes are compared, not gentler probing).
func TestLatencyModeCatchesOverloadEarlier(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Pool.Adaptive.ProbeInterval = limiter.DefaultAdaptiveInterval
	plain, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Pool.Adaptive.LatencyTolerance = 2
	lat, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p, l := plain.Between(30*time.Second, 110*time.Second), lat.Between(30*time.Second, 110*time.Second)
	if l.MeanErrorRate >= 0.7*p.MeanErrorRate {
		t.Fatalf("error rate with latency mode %.3f, without %.3f; want clearly less", l.MeanErrorRate, p.MeanErrorRate)
	}
	var throttledForLatency bool
	for _, ev := range lat.Events {
		throttledForLatency = throttledForLatency || ev.Reason.String() == "latency"
	}
	if !throttledForLatency {
		t.Fatal("no cut for latency")
	}
}

// TestRunIsDeterministic: the same seed gives the same trace.
func TestRunIsDeterministic(t *testing.T) {
	a, _ := Run(DefaultConfig())
	b, _ := Run(DefaultConfig())
	var x, y bytes.Buffer
	if err := a.WriteSVG(&x, chartTitle); err != nil {
		t.Fatal(err)
	}
	_ = b.WriteSVG(&y, chartTitle)
	if !bytes.Equal(x.Bytes(), y.Bytes()) {
		t.Fatal("two runs of one config differ")
	}
}

// TestTraceChart writes docs/adaptive-trace.svg with -update; without, it
// checks that the chart draws. The chart shows DefaultConfig next to the
// same run probing at one pace (ProbeInterval = Interval), as before
// gentler probing.
func TestTraceChart(t *testing.T) {
	tr, err := Run(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Pool.Adaptive.ProbeInterval = limiter.DefaultAdaptiveInterval
	onePace, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tr.Compare, tr.CompareName = onePace.Points, "probing at one pace"
	var buf bytes.Buffer
	if err := tr.WriteSVG(&buf, chartTitle); err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(buf.Bytes(), []byte("<svg")) || !bytes.Contains(buf.Bytes(), []byte("effective rate")) {
		t.Fatal("not a chart")
	}
	if *update {
		if err := os.WriteFile(chartPath, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", chartPath)
	}
}

// TestFastFailingBackend runs DefaultFastFail, the field report of a
// backend that refuses at once what it cannot serve (4 in flight), and
// checks the targets of docs/adaptive.md:
//   - at the true capacity, the error rate averages at most 2% (probing
//     at one pace, a raise to 5 every 2s, it was 5%);
//   - from the configured 16, the limit is at the capacity within 10s
//     (five cuts, one per cooldown), and within 6s of the capacity
//     dropping to 2;
//   - within 5s of the backend healing after a hang, it is back at 4.
func TestFastFailingBackend(t *testing.T) {
	tr, err := RunFastFail(DefaultFastFail())
	if err != nil {
		t.Fatal(err)
	}
	const s = time.Second
	if st := tr.Between(30*s, 90*s); st.MeanErrorRate > 0.02 || st.MeanEffective < 4 || st.MaxEffective > 5 {
		t.Fatalf("steady state at the capacity of 4: %+v; want errors at most 2%%", st)
	}
	if st := tr.Between(140*s, 180*s); st.MeanErrorRate > 0.02 {
		t.Fatalf("steady state after healing: %+v; want errors at most 2%%", st)
	}
	if at, ok := tr.FirstAtOrBelow(0, 4); !ok || at > 10*s {
		t.Fatalf("at the capacity of 4 at %v (found %v); want within 10s", at, ok)
	}
	if at, ok := tr.FirstAtOrBelow(90*s, 2); !ok || at > 96*s {
		t.Fatalf("at the degraded capacity of 2 at %v (found %v); want within 6s", at, ok)
	}
	if at, ok := tr.FirstAtOrAbove(125*s, 4); !ok || at > 130*s {
		t.Fatalf("back at 4 at %v (found %v); want within 5s of healing", at, ok)
	}
}
