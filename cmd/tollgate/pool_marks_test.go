package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// An active or passive pool's marks apply to its instances, with or
// without a concurrency limit: pool get shows them; a rate-only pool has
// none.
func TestPoolMarksOfInstancePools(t *testing.T) {
	ts := newCLIServer(t)
	for _, kind := range []string{"active", "passive"} {
		runCLI(t, ts.addr, "pool", "create", kind+"-pool", "--kind", kind).mustSucceed(t)
		r := runCLI(t, ts.addr, "pool", "get", kind+"-pool").mustSucceed(t)
		if !strings.Contains(r.stdout, "near_full_mark:") || strings.Contains(r.stdout, "none: they need") {
			t.Errorf("pool get of a %s pool:\n%s", kind, r.stdout)
		}
	}
	runCLI(t, ts.addr, "pool", "create", "feed", "--rate", "10").mustSucceed(t)
	if r := runCLI(t, ts.addr, "pool", "get", "feed").mustSucceed(t); !strings.Contains(r.stdout, "none: they need a concurrency limit or instances") {
		t.Errorf("pool get of a rate-only pool:\n%s", r.stdout)
	}
}

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

// "tollgate events" shows the marks' events: an overload, then the drain
// that follows it.
func TestEventsShowMarks(t *testing.T) {
	ts := newCLIServer(t)
	runCLI(t, ts.addr, "pool", "create", "q", "--concurrency", "1", "--overload-mark", "1", "--near-full-mark", "off").mustSucceed(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out, done := startCLI(t, ctx, ts.addr, "events", "--recent", "--pool", "q")
	waitOutput(t, out, done, "pool_created  q")
	eng := ts.srv.Engine()
	l, err := eng.Acquire(ctx, limiter.AcquireRequest{Pool: "q", Weight: 1})
	if err != nil {
		t.Fatal(err)
	}
	granted := make(chan limiter.Lease, 1)
	go func() {
		l2, err := eng.Acquire(ctx, limiter.AcquireRequest{Pool: "q", Weight: 1})
		if err != nil {
			t.Error(err)
		}
		granted <- l2
	}()
	waitOutput(t, out, done, "pool_overload  q")
	if _, err := eng.Release("q", l.FencingToken); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Release("q", (<-granted).FencingToken); err != nil {
		t.Fatal(err)
	}
	waitOutput(t, out, done, "pool_drained  q")
	cancel()
	exitStatus(t, done)
	if !strings.Contains(out.String(), "1 waiting, at or above the overload mark 1; held 1 of 1") {
		t.Fatalf("output:\n%s", out.String())
	}
}
