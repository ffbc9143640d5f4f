package main

import (
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// TestPoolAdaptiveFlags: pool create and update set adaptive settings and
// the safe rate; pool get shows the effective limits beside the
// configured ones.
func TestPoolAdaptiveFlags(t *testing.T) {
	ts := newCLIServer(t)
	r := runCLI(t, ts.addr, "pool", "create", "api", "--rate", "100", "--concurrency", "10", "--safe-rate", "5",
		"--adaptive-backoff", "0.5", "--adaptive-target", "concurrency", "--adaptive-min-samples", "2").mustSucceed(t)
	for _, want := range []string{"safe_rate:", "5/s", "adaptive:", "on: target concurrency", "cut ×0.5", "≥2 outcomes"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("create output lacks %q:\n%s", want, r.stdout)
		}
	}
	cfg := ts.info(t, "api").Config
	if a := cfg.Adaptive; !a.Enabled || a.Backoff != 0.5 || a.Target != limiter.AdaptConcurrency || a.MinSamples != 2 || cfg.SafeRate != 5 {
		t.Fatalf("created %+v", cfg)
	}
	if err := ts.srv.Engine().Report([]limiter.OutcomeReport{{Pool: "api", Errors: 2}}); err != nil {
		t.Fatal(err)
	}
	r = runCLI(t, ts.addr, "pool", "get", "api").mustSucceed(t)
	for _, want := range []string{"effective_concurrency_limit:", "5 of configured 10 (throttled: errors)", "effective_rate:", "100/s of configured 100/s",
		"outcomes_reported:", "0 successes, 2 errors, 0 timeouts", "adaptive_window:", "rate_shares:", "0 holding 0/s"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("get output lacks %q:\n%s", want, r.stdout)
		}
	}
	// update changes one setting and keeps the others; --adaptive=false
	// turns it off and restores the configured limit.
	runCLI(t, ts.addr, "pool", "update", "api", "--adaptive-interval", "5s", "--adaptive-latency-tolerance", "3").mustSucceed(t)
	if a := ts.info(t, "api").Config.Adaptive; a.Interval != 5*time.Second || a.LatencyTolerance != 3 || a.Backoff != 0.5 {
		t.Fatalf("after update: %+v", a)
	}
	runCLI(t, ts.addr, "pool", "update", "api", "--adaptive=false").mustSucceed(t)
	info := ts.info(t, "api")
	if info.Config.Adaptive.Enabled || info.Status.EffectiveConcurrencyLimit != 10 {
		t.Fatalf("after --adaptive=false: %+v %+v", info.Config.Adaptive, info.Status.AdaptiveStatus)
	}
	r = runCLI(t, ts.addr, "pool", "get", "api").mustSucceed(t)
	if !strings.Contains(r.stdout, "adaptive:") || !strings.Contains(r.stdout, "off") {
		t.Fatalf("get output after turning adaptive off:\n%s", r.stdout)
	}
	runCLI(t, ts.addr, "pool", "update", "api", "--adaptive-target", "sideways").mustFail(t, 2, "--adaptive-target")
	runCLI(t, ts.addr, "pool", "update", "api", "--adaptive-backoff", "1.5").mustFail(t, 1, "adaptive.backoff", "INVALID_ARGUMENT")
	runCLI(t, ts.addr, "pool", "update", "api", "--safe-rate", "500").mustFail(t, 1, "safe_rate", "INVALID_ARGUMENT")
}
