package main

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/tollgate/tollgate/limiter"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// The operator's path through an active pool from the CLI alone: create
// it with instances, see a lease bound to one, remove it, list.
func TestResourceCommands(t *testing.T) {
	ts := newCLIServer(t)
	r := runCLI(t, ts.addr, "pool", "create", "db", "--kind", "active", "--selection", "spread",
		"--resources", "conn-1,conn-2,conn-3", "--attr", "addr=db-{id}:5432").mustSucceed(t)
	for _, want := range []string{"resource_kind:", "active", "spread", "instances:", "3 (3 free)"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("create output lacks %q:\n%s", want, r.stdout)
		}
	}
	l, err := ts.srv.Engine().Acquire(context.Background(), limiter.AcquireRequest{Pool: "db", Weight: 1, ClientID: "billing"})
	if err != nil || len(l.Resources) != 1 || l.Resources[0].ID != "conn-1" || l.Resources[0].Attributes["addr"] != "db-conn-1:5432" {
		t.Fatalf("lease %+v, %v", l, err)
	}
	r = runCLI(t, ts.addr, "resource", "list", "db").mustSucceed(t)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 4 || !strings.Contains(lines[1], "conn-1") || !strings.Contains(lines[1], "held") || !strings.Contains(lines[1], "billing") || !strings.Contains(lines[2], "free") {
		t.Fatalf("list output:\n%s", r.stdout)
	}
	r = runCLI(t, ts.addr, "lease", "list", "db").mustSucceed(t)
	if !strings.Contains(r.stdout, "conn-1") {
		t.Fatalf("lease list does not show the instance:\n%s", r.stdout)
	}
	r = runCLI(t, ts.addr, "resource", "add", "db", "conn-4").mustSucceed(t)
	if !strings.Contains(r.stdout, "it has 4, 3 free") {
		t.Fatalf("add output:\n%s", r.stdout)
	}
	r = runCLI(t, ts.addr, "resource", "remove", "db", "conn-1", "conn-2", "--reason", "failover").mustSucceed(t)
	if !strings.Contains(r.stdout, "removed 2 instances from pool db (1 leases revoked)") {
		t.Fatalf("remove output:\n%s", r.stdout)
	}
	r = runCLI(t, ts.addr, "resource", "list", "db", "-o", "json").mustSucceed(t)
	var list tollgatev1.ListResourcesResponse
	if err := protojson.Unmarshal([]byte(r.stdout), &list); err != nil || len(list.GetResources()) != 2 {
		t.Fatalf("list -o json: %v\n%s", err, r.stdout)
	}

	runCLI(t, ts.addr, "resource", "remove", "db", "conn-9").mustFail(t, 1, "(NOT_FOUND RESOURCE_NOT_FOUND)")
	runCLI(t, ts.addr, "resource", "add", "db", "conn-3").mustFail(t, 1, "(ALREADY_EXISTS RESOURCE_EXISTS)")
	runCLI(t, ts.addr, "resource", "add", "db").mustFail(t, 2, "missing ID")
	runCLI(t, ts.addr, "resource", "add", "db", "x", "--attr", "novalue").mustFail(t, 2, "not key=value")
	runCLI(t, ts.addr, "pool", "create", "p", "--kind", "lots").mustFail(t, 2, "not a kind")
	runCLI(t, ts.addr, "pool", "update", "db", "--kind", "free").mustFail(t, 2, "unknown flag: --kind")
	runCLI(t, ts.addr, "resource", "provide", "db", "x").mustFail(t, 2, "--id is required")
	runCLI(t, ts.addr, "resource", "provide", "db", "x", "--id", "w").mustFail(t, 1, "(FAILED_PRECONDITION NOT_PASSIVE)")
}
