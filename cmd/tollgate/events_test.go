package main

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tollgate/tollgate/limiter"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// startCLI runs "tollgate args..." against addr in the background until
// ctx ends; it returns the command's stdout and a channel of its exit
// status.
func startCLI(t *testing.T, ctx context.Context, addr string, args ...string) (*cliBuffer, <-chan int) {
	t.Helper()
	var stdout, stderr cliBuffer
	done := make(chan int, 1)
	go func() {
		code := run(ctx, append([]string{"--server", addr}, args...), &stdout, &stderr, func(string) string { return "" })
		if code != 0 {
			t.Logf("%v stderr: %s", args, stderr.String())
		}
		done <- code
	}()
	return &stdout, done
}

// exitStatus waits for a background command's exit status.
func exitStatus(t *testing.T, done <-chan int) int {
	t.Helper()
	select {
	case code := <-done:
		return code
	case <-time.After(cliWaitLimit):
		t.Fatal("the command did not exit")
		return -1
	}
}

// "tollgate events --recent" prints the kept events, then live ones, one
// line each, until Ctrl-C, which exits 0.
func TestEventsTailsUntilInterrupted(t *testing.T) {
	ts := newCLIServer(t)
	runCLI(t, ts.addr, "pool", "create", "a", "--concurrency", "1").mustSucceed(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out, done := startCLI(t, ctx, ts.addr, "events", "--recent")
	// The recent events come from the same snapshot that subscribes the
	// watch, so once one is printed, later events cannot be missed.
	waitOutput(t, out, done, "pool_created  a")
	runCLI(t, ts.addr, "pool", "create", "b", "--concurrency", "2").mustSucceed(t)
	waitOutput(t, out, done, "pool_created  b")
	cancel()
	if code := exitStatus(t, done); code != 0 {
		t.Fatalf("exit status after Ctrl-C: %d", code)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "2030-") || !strings.Contains(lines[1], "concurrency_limit") {
		t.Fatalf("output:\n%s", out.String())
	}
}

// --pool keeps one pool's events; -o json prints one PoolEvent a line.
func TestEventsPoolFilterJSON(t *testing.T) {
	ts := newCLIServer(t)
	runCLI(t, ts.addr, "pool", "create", "a", "--concurrency", "1").mustSucceed(t)
	runCLI(t, ts.addr, "pool", "create", "b", "--concurrency", "1").mustSucceed(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out, done := startCLI(t, ctx, ts.addr, "events", "--pool", "b", "--recent", "-o", "json")
	waitOutput(t, out, done, `"pool_created"`)
	runCLI(t, ts.addr, "pool", "delete", "a").mustSucceed(t)
	runCLI(t, ts.addr, "pool", "delete", "b").mustSucceed(t)
	waitOutput(t, out, done, `"pool_deleted"`)
	cancel()
	exitStatus(t, done)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("want 2 lines, got:\n%s", out.String())
	}
	for i, want := range []string{"pool_created", "pool_deleted"} {
		var ev tollgatev1.PoolEvent
		if err := protojson.Unmarshal([]byte(lines[i]), &ev); err != nil {
			t.Fatalf("line %d: %v\n%s", i, err, lines[i])
		}
		if ev.GetType() != want || ev.GetPool() != "b" {
			t.Fatalf("line %d = %v, want %s of b", i, &ev, want)
		}
	}
	runCLI(t, ts.addr, "events", "--pool", "bad name").mustFail(t, 1, "(INVALID_ARGUMENT)")
	runCLI(t, ts.addr, "events", "-o", "yaml").mustFail(t, 2, "not an output format")
}

// Off a terminal, "tollgate stats" prints the table once; -o json prints
// a GetStatsResponse.
func TestStatsOnce(t *testing.T) {
	ts := newCLIServer(t)
	ts.pool(t, limiter.PoolConfig{Name: "db", ConcurrencyLimit: 4})
	ts.pool(t, limiter.PoolConfig{Name: "api", Rate: 10, Burst: 10})
	for range 2 {
		if _, err := ts.srv.Engine().Acquire(context.Background(), limiter.AcquireRequest{Pool: "db", Weight: 1}); err != nil {
			t.Fatal(err)
		}
	}
	r := runCLI(t, ts.addr, "stats").mustSucceed(t)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "POOL") || !strings.Contains(lines[0], "WAIT_TIMEOUTS") ||
		!strings.HasPrefix(lines[1], "api ") || !strings.HasSuffix(lines[1], " 0%") ||
		!strings.HasPrefix(lines[2], "db ") || !strings.Contains(lines[2], "2/4") || !strings.HasSuffix(lines[2], "50%") ||
		strings.Contains(r.stdout, clearScreen) {
		t.Fatalf("stats output:\n%s", r.stdout)
	}
	r = runCLI(t, ts.addr, "stats", "db", "-o", "json").mustSucceed(t)
	var resp tollgatev1.GetStatsResponse
	if err := protojson.Unmarshal([]byte(r.stdout), &resp); err != nil {
		t.Fatalf("stats -o json: %v\n%s", err, r.stdout)
	}
	if len(resp.GetStats()) != 1 || resp.GetStats()[0].GetStatus().GetHeld() != 2 || resp.GetStats()[0].GetStatus().GetGranted() != 2 ||
		resp.GetStats()[0].GetUtilisation() != 0.5 || resp.GetStats()[0].GetWaitTimes().GetCount() != 2 {
		t.Fatalf("stats db -o json: %v", &resp)
	}
	runCLI(t, ts.addr, "stats", "nope").mustFail(t, 1, "(NOT_FOUND POOL_NOT_FOUND)")
	runCLI(t, ts.addr, "stats", "--interval", "0s").mustFail(t, 2, "--interval")
}

// The table shows the effective limit when adaptive control lowered it,
// and utilisation against it.
func TestStatsEffectiveLimit(t *testing.T) {
	var out strings.Builder
	p := &printer{w: &out}
	err := p.stats(&tollgatev1.GetStatsResponse{Stats: []*tollgatev1.PoolStats{{
		Pool: "db", ConcurrencyLimit: 10, Utilisation: 0.75,
		Status: &tollgatev1.PoolStatus{Held: 3, EffectiveConcurrencyLimit: 4, Granted: 7},
	}}})
	if err != nil || !strings.Contains(out.String(), "3/10 (eff 4)") || !strings.HasSuffix(strings.TrimSpace(out.String()), "75%") {
		t.Fatalf("stats: %v\n%s", err, out.String())
	}
}

// The table shows the wait-time percentiles GetStats returns, and "-"
// when nothing was granted in the window.
func TestStatsWaitColumns(t *testing.T) {
	var out strings.Builder
	p := &printer{w: &out}
	err := p.stats(&tollgatev1.GetStatsResponse{Stats: []*tollgatev1.PoolStats{
		{Pool: "busy", ConcurrencyLimit: 2, Utilisation: 1, Status: &tollgatev1.PoolStatus{Held: 2, EffectiveConcurrencyLimit: 2},
			WaitTimes: &tollgatev1.WaitTimes{Count: 9, P50: durationpb.New(0), P90: durationpb.New(1234567 * time.Nanosecond),
				P99: durationpb.New(2500 * time.Millisecond), Max: durationpb.New(3 * time.Second)}},
		{Pool: "idle", ConcurrencyLimit: 2, Status: &tollgatev1.PoolStatus{EffectiveConcurrencyLimit: 2}, WaitTimes: &tollgatev1.WaitTimes{}},
	}})
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if err != nil || len(lines) != 3 || !strings.Contains(lines[0], "WAIT_P50  WAIT_P90  WAIT_P99  WAIT_MAX  UTIL") {
		t.Fatalf("stats: %v\n%s", err, out.String())
	}
	if f := strings.Fields(lines[1]); strings.Join(f[len(f)-5:], " ") != "0 1.2ms 2.5s 3s 100%" {
		t.Fatalf("busy row %q: want waits 0 1.2ms 2.5s 3s, util 100%%", lines[1])
	}
	if f := strings.Fields(lines[2]); strings.Join(f[len(f)-5:], " ") != "- - - - 0%" {
		t.Fatalf("idle row %q: want no waits, util 0%%", lines[2])
	}
}

// On a terminal, the table is redrawn in place every --interval until
// Ctrl-C.
func TestStatsRefreshesOnTerminal(t *testing.T) {
	old := isTerminal
	isTerminal = func(io.Writer) bool { return true }
	defer func() { isTerminal = old }()
	ts := newCLIServer(t)
	ts.pool(t, limiter.PoolConfig{Name: "db", ConcurrencyLimit: 4})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out, done := startCLI(t, ctx, ts.addr, "stats", "--interval", "10ms")
	deadline := time.Now().Add(cliWaitLimit)
	for strings.Count(out.String(), clearScreen) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the table was not redrawn:\n%q", out.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if code := exitStatus(t, done); code != 0 {
		t.Fatalf("exit status after Ctrl-C: %d", code)
	}
	if !strings.Contains(out.String(), "0/4") {
		t.Fatalf("output:\n%q", out.String())
	}
}
