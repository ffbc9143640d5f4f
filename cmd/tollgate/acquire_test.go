package main

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/testwait"
	"github.com/tollgate/tollgate/limiter"
)

// startAcquire runs "tollgate acquire args..." in the background until
// ctx ends; it returns the command's output and a channel of its cliResult.
func startAcquire(t *testing.T, ctx context.Context, addr string, args ...string) (*cliBuffer, <-chan int) {
	t.Helper()
	var stdout, stderr cliBuffer
	done := make(chan int, 1)
	go func() {
		args := append([]string{"--server", addr, "acquire"}, args...)
		code := run(ctx, args, &stdout, &stderr, func(string) string { return "" })
		if code != 0 {
			t.Logf("acquire stderr: %s", stderr.String())
		}
		done <- code
	}()
	return &stdout, done
}

func waitOutput(t *testing.T, out *cliBuffer, done <-chan int, want string) {
	t.Helper()
	deadline := time.Now().Add(cliWaitLimit)
	for !strings.Contains(out.String(), want) {
		select {
		case code := <-done:
			t.Fatalf("acquire exited (%d) before printing %q:\n%s", code, want, out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q in output:\n%s", want, out.String())
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func TestAcquireHoldsUntilInterrupted(t *testing.T) {
	ts := newCLIServer(t)
	ts.pool(t, limiter.PoolConfig{Name: "db", ConcurrencyLimit: 3})

	ctx, interrupt := context.WithCancel(context.Background())
	defer interrupt()
	out, done := startAcquire(t, ctx, ts.addr, "db", "--weight", "2", "--ttl", "1m", "--priority", "3", "--description", "cli test")
	waitOutput(t, out, done, "acquired lease ")
	if !strings.Contains(out.String(), "fencing_token=1 weight=2 expires ") {
		t.Fatalf("acquire output:\n%s", out.String())
	}
	if st := ts.info(t, "db").Status; st.Held != 2 {
		t.Fatalf("held %d while acquire runs", st.Held)
	}
	r := runCLI(t, ts.addr, "acquire", "db", "--try", "--weight", "2")
	r.mustFail(t, 1, "(RESOURCE_EXHAUSTED NO_CAPACITY)", "does not wait", "without --try, tollgate waits")
	if strings.Contains(r.stderr, "no_wait") {
		t.Errorf("the CLI's message names the API's field: %s", r.stderr)
	}

	interrupt() // Ctrl-C
	if code := <-done; code != 0 {
		t.Fatalf("acquire exited %d after Ctrl-C", code)
	}
	if !regexp.MustCompile(`released lease 1\.[A-Za-z0-9_-]{16}\n`).MatchString(out.String()) {
		t.Fatalf("acquire output:\n%s", out.String())
	}
	if st := ts.info(t, "db").Status; st.Held != 0 || st.Released != 1 {
		t.Fatalf("after Ctrl-C: held %d, released %d", st.Held, st.Released)
	}
}

func TestAcquireReportsLoss(t *testing.T) {
	ts := newCLIServer(t)
	ts.pool(t, limiter.PoolConfig{Name: "db", ConcurrencyLimit: 1})

	var stdout, stderr cliBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(context.Background(), []string{"--server", ts.addr, "acquire", "db", "--ttl", "1m"}, &stdout, &stderr, func(string) string { return "" })
	}()
	waitOutput(t, &stdout, done, "acquired lease ")
	ts.clock.Advance(2 * time.Minute) // the server expires it
	if code := <-done; code != 1 {
		t.Fatalf("acquire of a lost lease exited %d", code)
	}
	r := cliResult{stdout.String(), stderr.String(), 1}
	r.mustFail(t, 1, "lease lost", "(NOT_FOUND LEASE_EXPIRED)")
	if strings.Count(r.stderr, "tollgate: ") != 1 {
		t.Fatalf("stderr repeats the prefix: %q", r.stderr)
	}
}

// With -o json, a lost lease is a JSON line on stdout too.
func TestAcquireReportsLossAsJSON(t *testing.T) {
	ts := newCLIServer(t)
	ts.pool(t, limiter.PoolConfig{Name: "db", ConcurrencyLimit: 1})

	var stdout, stderr cliBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(context.Background(), []string{"--server", ts.addr, "acquire", "db", "--ttl", "1m", "-o", "json"}, &stdout, &stderr, func(string) string { return "" })
	}()
	waitOutput(t, &stdout, done, `"event":"acquired"`)
	ts.clock.Advance(2 * time.Minute) // the server expires it
	if code := <-done; code != 1 {
		t.Fatalf("acquire of a lost lease exited %d", code)
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	var lost map[string]any
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &lost); err != nil {
		t.Fatalf("last line %q: %v", lines[len(lines)-1], err)
	}
	if lost["event"] != "lost" || lost["pool"] != "db" || lost["reason"] != "LEASE_EXPIRED" || lost["code"] != "NOT_FOUND" || !strings.Contains(lost["message"].(string), "lease lost") {
		t.Fatalf("lost line: %v", lost)
	}
}

func TestAcquireCommandErrors(t *testing.T) {
	ts := newCLIServer(t)
	ts.pool(t, limiter.PoolConfig{Name: "db", ConcurrencyLimit: 1})
	runCLI(t, ts.addr, "acquire", "nope").mustFail(t, 1, `pool "nope" not found; create it first (tollgate pool create nope --concurrency N) (NOT_FOUND POOL_NOT_FOUND)`)
	runCLI(t, ts.addr, "acquire", "db", "--weight", "2").mustFail(t, 1, "INVALID_ARGUMENT")
	runCLI(t, ts.addr, "acquire", "db", "--ttl", "1ms").mustFail(t, 1, "INVALID_ARGUMENT")

	// A wait that is given up (Ctrl-C) leaves no waiter.
	if _, err := ts.srv.Engine().Acquire(t.Context(), limiter.AcquireRequest{Pool: "db", Weight: 1}); err != nil {
		t.Fatal(err)
	}
	ctx, interrupt := context.WithCancel(context.Background())
	defer interrupt()
	_, done := startAcquire(t, ctx, ts.addr, "db")
	testwait.For(t, "the acquire to wait", func() bool { return ts.info(t, "db").Status.Waiting == 1 })
	interrupt()
	if code := <-done; code != 1 {
		t.Fatalf("interrupted wait exited %d", code)
	}
	testwait.For(t, "the interrupted waiter to leave the queue", func() bool { return ts.info(t, "db").Status.Waiting == 0 })
}

func TestAcquireJSON(t *testing.T) {
	ts := newCLIServer(t)
	runCLI(t, ts.addr, "pool", "create", "db", "--kind", "active", "--resources", "conn-1", "--attr", "addr=db-{id}:5432").mustSucceed(t)
	ctx, interrupt := context.WithCancel(context.Background())
	defer interrupt()
	out, done := startAcquire(t, ctx, ts.addr, "db", "--ttl", "1m", "-o", "json")
	waitOutput(t, out, done, "\n")
	var got leaseJSON
	if err := json.Unmarshal([]byte(out.String()), &got); err != nil {
		t.Fatalf("%v:\n%s", err, out.String())
	}
	if got.Event != "acquired" || got.Pool != "db" || got.FencingToken != 1 || got.Weight != 1 || got.TTL != "1m0s" ||
		len(got.Resources) != 1 || got.Resources[0].ID != "conn-1" || got.Resources[0].Attributes["addr"] != "db-conn-1:5432" {
		t.Fatalf("acquired: %+v", got)
	}
	interrupt()
	if code := <-done; code != 0 {
		t.Fatalf("acquire exited %d", code)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var released map[string]string
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &released); err != nil || len(lines) != 2 ||
		released["event"] != "released" || released["lease_id"] != got.LeaseID {
		t.Fatalf("output:\n%s (%v)", out.String(), err)
	}
}

// While it waits, acquire reports its place in the queue, and then the
// grant.
func TestAcquireShowsQueuePosition(t *testing.T) {
	ts := newCLIServer(t)
	ts.pool(t, limiter.PoolConfig{Name: "db", ConcurrencyLimit: 1})
	ctx, interrupt := context.WithCancel(context.Background())
	defer interrupt()
	holder, held := startAcquire(t, ctx, ts.addr, "db", "--ttl", "1m")
	waitOutput(t, holder, held, "acquired lease ")

	wctx, stopWaiter := context.WithCancel(context.Background())
	defer stopWaiter()
	out, done := startAcquire(t, wctx, ts.addr, "db", "--ttl", "1m", "-o", "json")
	waitOutput(t, out, done, "\n")
	var waiting map[string]any
	if err := json.Unmarshal([]byte(strings.SplitN(out.String(), "\n", 2)[0]), &waiting); err != nil ||
		waiting["event"] != "waiting" || waiting["pool"] != "db" || waiting["position"] != 1.0 || waiting["waiting"] != 1.0 {
		t.Fatalf("first line while waiting: %v (%v)\n%s", waiting, err, out.String())
	}
	interrupt() // the holder releases: the waiter is granted
	if code := <-held; code != 0 {
		t.Fatalf("holder exited %d", code)
	}
	waitOutput(t, out, done, `"event":"acquired"`)
	stopWaiter()
	if code := <-done; code != 0 {
		t.Fatalf("waiter exited %d", code)
	}
}
