package main

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/tollgate/tollgate/limiter"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

func TestLeaseListGetRevoke(t *testing.T) {
	ts := newCLIServer(t)
	ts.pool(t, limiter.PoolConfig{Name: "db", ConcurrencyLimit: 5})
	eng := ts.srv.Engine()
	var toks []uint64
	for _, c := range []string{"alpha", "beta", "alpha"} {
		l, err := eng.Acquire(context.Background(), limiter.AcquireRequest{Pool: "db", Weight: 1, ClientID: c, Description: "job of " + c})
		if err != nil {
			t.Fatal(err)
		}
		toks = append(toks, l.FencingToken)
	}
	id := func(i int) string { return strconv.FormatUint(toks[i], 10) }

	r := runCLI(t, ts.addr, "lease", "list", "db").mustSucceed(t)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "ID") || !strings.HasPrefix(lines[1], id(0)+".") || !strings.Contains(lines[2], "beta") {
		t.Fatalf("list output:\n%s", r.stdout)
	}
	r = runCLI(t, ts.addr, "lease", "list", "db", "--client", "alpha", "-o", "json").mustSucceed(t)
	var list tollgatev1.ListLeasesResponse
	if err := protojson.Unmarshal([]byte(r.stdout), &list); err != nil {
		t.Fatalf("list -o json: %v\n%s", err, r.stdout)
	}
	if len(list.GetLeases()) != 2 || list.GetLeases()[1].GetFencingToken() != toks[2] {
		t.Fatalf("list --client alpha: %v", &list)
	}

	r = runCLI(t, ts.addr, "lease", "get", "db", id(1)).mustSucceed(t)
	for _, want := range []string{"client_id:", "beta", "weight:", "job of beta", "expire_time:"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("get output lacks %q:\n%s", want, r.stdout)
		}
	}

	r = runCLI(t, ts.addr, "lease", "revoke", "db", id(1), "--reason", "stuck job").mustSucceed(t)
	if !strings.Contains(r.stdout, "revoked lease "+id(1)) {
		t.Fatalf("revoke output:\n%s", r.stdout)
	}
	if s := ts.info(t, "db").Status; s.Held != 2 || s.Revoked != 1 {
		t.Fatalf("status after revoke: %+v", s)
	}
	runCLI(t, ts.addr, "lease", "get", "db", id(1)).mustFail(t, 1, "stuck job", "(NOT_FOUND LEASE_REVOKED)")
	runCLI(t, ts.addr, "lease", "revoke", "db", id(1)).mustFail(t, 1, "(NOT_FOUND LEASE_REVOKED)")
	runCLI(t, ts.addr, "lease", "revoke", "db", "x").mustFail(t, 1, "(INVALID_ARGUMENT)")
	runCLI(t, ts.addr, "lease", "get", "db", "999").mustFail(t, 1, "(NOT_FOUND LEASE_NOT_FOUND)")
	runCLI(t, ts.addr, "lease", "list", "nope").mustFail(t, 1, "(NOT_FOUND POOL_NOT_FOUND)")
	runCLI(t, ts.addr, "lease", "get", "db").mustFail(t, 2)
	runCLI(t, ts.addr, "lease", "list", "db", "-o", "yaml").mustFail(t, 2)
	r = runCLI(t, ts.addr, "pool", "get", "db").mustSucceed(t)
	if !strings.Contains(r.stdout, "revoked:") {
		t.Fatalf("pool get lacks revoked:\n%s", r.stdout)
	}
}

func TestPoolRevocationPolicyFlag(t *testing.T) {
	ts := newCLIServer(t)
	r := runCLI(t, ts.addr, "pool", "create", "db", "--concurrency", "2", "--revocation-policy", "revoke").mustSucceed(t)
	if !strings.Contains(r.stdout, "revocation_policy:") || !strings.Contains(r.stdout, "revoke") {
		t.Fatalf("create output:\n%s", r.stdout)
	}
	if p := ts.info(t, "db").Config.RevocationPolicy; p != limiter.RevocationRevoke {
		t.Fatalf("policy = %v", p)
	}
	runCLI(t, ts.addr, "pool", "update", "db", "--revocation-policy", "wait").mustSucceed(t)
	if p := ts.info(t, "db").Config.RevocationPolicy; p != limiter.RevocationWait {
		t.Fatalf("policy after update = %v", p)
	}
	runCLI(t, ts.addr, "pool", "update", "db", "--revocation-policy", "kill").mustFail(t, 2, "wait or revoke")
}

func TestPoolSuspendResumeDrain(t *testing.T) {
	ts := newCLIServer(t)
	ts.pool(t, limiter.PoolConfig{Name: "db", ConcurrencyLimit: 2})
	l, err := ts.srv.Engine().Acquire(context.Background(), limiter.AcquireRequest{Pool: "db", Weight: 1})
	if err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, ts.addr, "pool", "suspend", "db").mustSucceed(t)
	if !strings.Contains(r.stdout, "suspended pool db: held 1 in 1 leases") {
		t.Fatalf("suspend output:\n%s", r.stdout)
	}
	if !ts.info(t, "db").Status.Suspended {
		t.Fatal("not suspended")
	}
	r = runCLI(t, ts.addr, "pool", "get", "db").mustSucceed(t)
	if !strings.Contains(r.stdout, "suspended:") {
		t.Fatalf("get output lacks suspended:\n%s", r.stdout)
	}
	runCLI(t, ts.addr, "pool", "drain", "db", "--timeout", "1s").mustFail(t, 1, "holds 1 permits in 1 leases", "(DEADLINE_EXCEEDED WAIT_TIMEOUT)")
	if _, err := ts.srv.Engine().Release("db", l.FencingToken); err != nil {
		t.Fatal(err)
	}
	r = runCLI(t, ts.addr, "pool", "drain", "db", "-o", "json").mustSucceed(t)
	var dr tollgatev1.DrainPoolResponse
	if err := protojson.Unmarshal([]byte(r.stdout), &dr); err != nil || !dr.GetStatus().GetSuspended() {
		t.Fatalf("drain -o json: %v\n%s", err, r.stdout)
	}
	runCLI(t, ts.addr, "pool", "resume", "db").mustSucceed(t)
	if ts.info(t, "db").Status.Suspended {
		t.Fatal("still suspended")
	}
	if _, err := ts.srv.Engine().Acquire(context.Background(), limiter.AcquireRequest{Pool: "db", Weight: 1}); err != nil {
		t.Fatal(err)
	}
	runCLI(t, ts.addr, "pool", "suspend", "db", "--revoke-held").mustSucceed(t)
	if s := ts.info(t, "db").Status; s.Held != 0 || s.Revoked != 1 {
		t.Fatalf("after suspend --revoke-held: %+v", s)
	}
	runCLI(t, ts.addr, "pool", "resume", "nope").mustFail(t, 1, "(NOT_FOUND POOL_NOT_FOUND)")
}
