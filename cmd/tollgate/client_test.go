package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/tollgate/tollgate/client"
	"github.com/tollgate/tollgate/limiter"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// holdWith connects a Go client as clientID and acquires a lease of
// weight in pool on its session; both end with the test.
func holdWith(t *testing.T, addr, clientID, pool string, weight int64) {
	t.Helper()
	c, err := client.Dialer{ClientID: clientID}.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), cliWaitLimit)
	defer cancel()
	if _, err := c.Acquire(ctx, pool, client.WithWeight(weight), client.WithTTL(time.Minute)); err != nil {
		t.Fatalf("%s: Acquire(%s): %v", clientID, pool, err)
	}
}

func TestClientList(t *testing.T) {
	ts := newCLIServer(t)
	ts.pool(t, limiter.PoolConfig{Name: "db", ConcurrencyLimit: 10})
	ts.pool(t, limiter.PoolConfig{Name: "api", ConcurrencyLimit: 10})
	runCLI(t, ts.addr, "client", "list").mustSucceed(t) // nobody yet
	holdWith(t, ts.addr, "worker-1", "db", 2)
	holdWith(t, ts.addr, "worker-2", "api", 3)
	if _, err := ts.srv.Engine().Acquire(context.Background(), limiter.AcquireRequest{Pool: "db", Weight: 4, ClientID: "unary"}); err != nil {
		t.Fatal(err)
	}

	r := runCLI(t, ts.addr, "client", "list").mustSucceed(t)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "SESSION") ||
		!strings.Contains(lines[1], "worker-1") || !strings.Contains(lines[1], "127.0.0.1:") || !strings.Contains(lines[1], "db 1/2") ||
		!strings.Contains(lines[2], "worker-2") || !strings.Contains(lines[2], "api 1/3") ||
		!strings.Contains(lines[3], "1 lease (weight 4) is held without a session") {
		t.Fatalf("client list:\n%s", r.stdout)
	}

	r = runCLI(t, ts.addr, "client", "list", "--pool", "api", "-o", "json").mustSucceed(t)
	var list tollgatev1.ListClientsResponse
	if err := protojson.Unmarshal([]byte(r.stdout), &list); err != nil {
		t.Fatalf("client list -o json: %v\n%s", err, r.stdout)
	}
	if len(list.GetClients()) != 1 || list.GetClients()[0].GetClientId() != "worker-2" || list.GetClients()[0].GetWeight() != 3 || list.GetUnattachedLeases() != 0 {
		t.Fatalf("client list --pool api: %v", &list)
	}
	r = runCLI(t, ts.addr, "client", "list", "--client", "worker-1").mustSucceed(t)
	if lines := strings.Split(strings.TrimSpace(r.stdout), "\n"); len(lines) != 2 || !strings.Contains(lines[1], "worker-1") {
		t.Fatalf("client list --client worker-1:\n%s", r.stdout)
	}
	r = runCLI(t, ts.addr, "client", "list", "--client", "nobody").mustSucceed(t)
	if strings.TrimSpace(r.stdout) != "no client sessions" {
		t.Fatalf("client list --client nobody:\n%s", r.stdout)
	}
	runCLI(t, ts.addr, "client", "list", "--pool", "nope").mustFail(t, 1, "(NOT_FOUND POOL_NOT_FOUND)")
	runCLI(t, ts.addr, "client", "list", "extra").mustFail(t, 2)
	runCLI(t, ts.addr, "client", "list", "-o", "yaml").mustFail(t, 2)
}
