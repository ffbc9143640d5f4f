package main

import (
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// TestPoolMarkFlags: pool create and update set the event marks ("off"
// turns one off), pool get shows them as they apply, and bad values are
// refused naming the flag or field.
func TestPoolMarkFlags(t *testing.T) {
	ts := newCLIServer(t)
	r := runCLI(t, ts.addr, "pool", "create", "gpu", "--concurrency", "8", "--overload-mark", "20", "--near-full-mark", "off").mustSucceed(t)
	for _, want := range []string{"overload_mark:", "20 waiting", "near_full_mark:", "off", "low_utilisation_mark:", "10% (default) for 10m0s (default)"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("create output lacks %q:\n%s", want, r.stdout)
		}
	}
	cfg := ts.info(t, "gpu").Config
	if cfg.OverloadMark != 20 || cfg.NearFullMark != limiter.MarkOff || cfg.LowUtilisationMark != 0 {
		t.Fatalf("created %+v", cfg)
	}
	runCLI(t, ts.addr, "pool", "update", "gpu", "--low-utilisation-mark", "0.25", "--low-utilisation-period", "30m", "--overload-mark", "0").mustSucceed(t)
	cfg = ts.info(t, "gpu").Config
	if cfg.OverloadMark != 0 || cfg.NearFullMark != limiter.MarkOff || cfg.LowUtilisationMark != 0.25 || cfg.LowUtilisationPeriod != 30*time.Minute {
		t.Fatalf("after update %+v", cfg)
	}
	r = runCLI(t, ts.addr, "pool", "get", "gpu").mustSucceed(t)
	for _, want := range []string{"512 waiting (default: half of max_waiters)", "25% for 30m0s", "utilisation:", "0%"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("get output lacks %q:\n%s", want, r.stdout)
		}
	}
	runCLI(t, ts.addr, "pool", "update", "gpu", "--near-full-mark", "high").mustFail(t, 2, "--near-full-mark")
	runCLI(t, ts.addr, "pool", "update", "gpu", "--overload-mark", "many").mustFail(t, 2, "--overload-mark")
	runCLI(t, ts.addr, "pool", "update", "gpu", "--near-full-mark", "1.5").mustFail(t, 1, "near_full_mark", "INVALID_ARGUMENT")
}
