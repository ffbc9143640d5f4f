package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

func TestTakeCommand(t *testing.T) {
	ts := newCLIServer(t)
	ts.pool(t, limiter.PoolConfig{Name: "api", Rate: 10, Burst: 3})
	ts.pool(t, limiter.PoolConfig{Name: "db", ConcurrencyLimit: 1})

	r := runCLI(t, ts.addr, "take", "api", "-n", "2").mustSucceed(t)
	if !strings.HasPrefix(r.stdout, "took 2 tokens from api") {
		t.Fatalf("take output %q", r.stdout)
	}
	r = runCLI(t, ts.addr, "take", "api").mustSucceed(t)
	if !strings.HasPrefix(r.stdout, "took 1 token from api") {
		t.Fatalf("take output %q", r.stdout)
	}
	ts.clock.Advance(time.Second) // the bucket refills
	r = runCLI(t, ts.addr, "take", "api", "-n", "2", "-o", "json").mustSucceed(t)
	var resp map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &resp); err != nil || resp["tokens"] != float64(2) {
		t.Fatalf("take -o json: %q (%v)", r.stdout, err)
	}
	runCLI(t, ts.addr, "take", "api", "-n", "2").mustFail(t, 1, "(RESOURCE_EXHAUSTED RATE_LIMITED)")
	runCLI(t, ts.addr, "take", "api", "-n", "4").mustFail(t, 1, "INVALID_ARGUMENT")
	runCLI(t, ts.addr, "take", "db").mustFail(t, 1, "(FAILED_PRECONDITION NO_RATE_LIMIT)")
	runCLI(t, ts.addr, "take", "nope").mustFail(t, 1, "(NOT_FOUND POOL_NOT_FOUND)")
	if st := ts.info(t, "api").Status; st.TokensGranted != 5 {
		t.Fatalf("tokens granted %d", st.TokensGranted)
	}
}
