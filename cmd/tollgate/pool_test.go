package main

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/tollgate/tollgate/limiter"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

func TestPoolLifecycle(t *testing.T) {
	ts := newCLIServer(t)

	r := runCLI(t, ts.addr, "pool", "create", "orders-db", "--concurrency", "5", "--ttl", "30s", "--max-ttl", "10m",
		"--max-waiters", "7", "--description", "primary database").mustSucceed(t)
	for _, want := range []string{"name:", "orders-db", "concurrency_limit:", "5", "default_lease_ttl:", "30s", "max_lease_ttl:", "10m0s", "max_waiters:", "7", "primary database"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("create output lacks %q:\n%s", want, r.stdout)
		}
	}
	cfg := ts.info(t, "orders-db").Config
	if cfg.ConcurrencyLimit != 5 || cfg.DefaultLeaseTTL != 30*time.Second || cfg.MaxLeaseTTL != 10*time.Minute || cfg.MaxWaiters != 7 || cfg.Description != "primary database" {
		t.Fatalf("created %+v", cfg)
	}
	runCLI(t, ts.addr, "pool", "create", "api", "--rate", "2.5", "--burst", "4").mustSucceed(t)
	runCLI(t, ts.addr, "pool", "create", "orders-db", "--concurrency", "1").mustFail(t, 1, "(ALREADY_EXISTS POOL_EXISTS)")
	runCLI(t, ts.addr, "pool", "create", "bad name", "--concurrency", "1").mustFail(t, 1, "(INVALID_ARGUMENT)")
	runCLI(t, ts.addr, "pool", "create", "nolimit").mustFail(t, 1, "concurrency_limit, rate, or both", "INVALID_ARGUMENT")
	runCLI(t, ts.addr, "pool", "create", "x", "--concurrency", "1", "--ttl", "-1s").mustFail(t, 1, "INVALID_ARGUMENT")

	// get, text and JSON
	r = runCLI(t, ts.addr, "pool", "get", "orders-db").mustSucceed(t)
	for _, want := range []string{"held:", "0 of 5", "waiting:", "last_fencing_token:"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("get output lacks %q:\n%s", want, r.stdout)
		}
	}
	r = runCLI(t, ts.addr, "pool", "get", "api", "-o", "json").mustSucceed(t)
	var got tollgatev1.GetPoolResponse
	if err := protojson.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("get -o json is not a GetPoolResponse: %v\n%s", err, r.stdout)
	}
	if got.GetPool().GetRate() != 2.5 || got.GetPool().GetBurst() != 4 || got.GetStatus().GetTokensAvailable() != 4 {
		t.Fatalf("get -o json: %v", &got)
	}
	runCLI(t, ts.addr, "pool", "get", "nope").mustFail(t, 1, `pool "nope"`, "(NOT_FOUND POOL_NOT_FOUND)")

	// list, text and JSON
	r = runCLI(t, ts.addr, "pool", "list").mustSucceed(t)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "NAME") || !strings.HasPrefix(lines[1], "api ") || !strings.HasPrefix(lines[2], "orders-db ") {
		t.Fatalf("list output:\n%s", r.stdout)
	}
	r = runCLI(t, ts.addr, "pool", "list", "-o", "json").mustSucceed(t)
	var list tollgatev1.ListPoolsResponse
	if err := protojson.Unmarshal([]byte(r.stdout), &list); err != nil {
		t.Fatalf("list -o json: %v\n%s", err, r.stdout)
	}
	if len(list.GetPools()) != 2 || len(list.GetStatuses()) != 2 {
		t.Fatalf("list -o json: %v", &list)
	}

	// update sends only the flags given
	runCLI(t, ts.addr, "pool", "update", "orders-db", "--concurrency", "9").mustSucceed(t)
	cfg = ts.info(t, "orders-db").Config
	if cfg.ConcurrencyLimit != 9 || cfg.Description != "primary database" || cfg.DefaultLeaseTTL != 30*time.Second || cfg.MaxWaiters != 7 {
		t.Fatalf("after update --concurrency 9: %+v", cfg)
	}
	r = runCLI(t, ts.addr, "pool", "update", "orders-db", "--description", "", "--max-waiters", "0", "-o", "json").mustSucceed(t)
	var upd tollgatev1.UpdatePoolResponse
	if err := protojson.Unmarshal([]byte(r.stdout), &upd); err != nil {
		t.Fatalf("update -o json: %v\n%s", err, r.stdout)
	}
	if upd.GetPool().GetDescription() != "" || upd.GetPool().GetMaxWaiters() != 1024 || upd.GetPool().GetConcurrencyLimit() != 9 {
		t.Fatalf("update resetting description and max_waiters: %v", &upd)
	}
	runCLI(t, ts.addr, "pool", "update", "nope", "--concurrency", "1").mustFail(t, 1, "(NOT_FOUND POOL_NOT_FOUND)")

	// delete, with and without force
	if _, err := ts.srv.Engine().Acquire(t.Context(), limiter.AcquireRequest{Pool: "orders-db", Weight: 1}); err != nil {
		t.Fatal(err)
	}
	runCLI(t, ts.addr, "pool", "delete", "orders-db").mustFail(t, 1, "(FAILED_PRECONDITION POOL_BUSY)")
	r = runCLI(t, ts.addr, "pool", "delete", "orders-db", "--force").mustSucceed(t)
	if r.stdout != "deleted pool orders-db\n" {
		t.Fatalf("delete output %q", r.stdout)
	}
	runCLI(t, ts.addr, "pool", "delete", "orders-db").mustFail(t, 1, "(NOT_FOUND POOL_NOT_FOUND)")
	r = runCLI(t, ts.addr, "pool", "delete", "api", "-o", "json").mustSucceed(t)
	if strings.TrimSpace(r.stdout) != "{}" {
		t.Fatalf("delete -o json: %q", r.stdout)
	}
	r = runCLI(t, ts.addr, "pool", "list").mustSucceed(t)
	if r.stdout != "no pools\n" {
		t.Fatalf("empty list: %q", r.stdout)
	}
}
