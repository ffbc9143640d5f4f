package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tollgate/tollgate/internal/etcdtest"
	"github.com/tollgate/tollgate/internal/hatest"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

func TestServeEtcdFlags(t *testing.T) {
	base := []string{"serve", "--data-dir", t.TempDir(), "--http", ""}
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--etcd", "http://127.0.0.1:1"}, []string{"--etcd needs --advertise"}},
		{[]string{"--advertise", "a:1"}, []string{"--advertise needs --etcd"}},
		{[]string{"--etcd", "http://127.0.0.1:1", "--advertise", "a:1", "--etcd-session-ttl", "1500ms"}, []string{"--etcd-session-ttl", "whole number of seconds"}},
		{[]string{"--etcd", "http://127.0.0.1:1", "--advertise", "a:1", "--etcd-cert", "c.pem"}, []string{"--etcd-cert and --etcd-key go together"}},
		{[]string{"--shards", "4"}, []string{"--shards needs --etcd"}},
		{[]string{"--etcd", "http://127.0.0.1:1", "--advertise", "a:1", "--shards", "0"}, []string{"--shards must be 1 to 4096, not 0"}},
		{[]string{"--etcd", "http://127.0.0.1:1", "--advertise", "a:1", "--shards", "4097"}, []string{"--shards must be 1 to 4096, not 4097"}},
	} {
		runCLI(t, "", append(base, c.args...)...).mustFail(t, 1, c.want...)
	}
}

// insecureCall calls call on a plaintext connection to addr, with a
// context bounded by cliWaitLimit.
func insecureCall[T any](t *testing.T, addr string, call func(context.Context, *grpc.ClientConn) (T, error)) (T, error) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), cliWaitLimit)
	defer cancel()
	return call(ctx, conn)
}

// Two "tollgate serve --etcd" agree on one leader, which reports itself
// in /metrics; the follower names it.
func TestServeEtcd(t *testing.T) {
	etcd := etcdtest.Start(t)
	type srv struct{ addr, http string }
	var ss []srv
	for i := 0; i < 2; i++ {
		addr := hatest.FreeAddr(t)
		_, h := startServe(t, "--listen", addr, "--advertise", addr, "--etcd", etcd.Endpoint(), "--etcd-session-ttl", "2s")
		ss = append(ss, srv{addr, h})
	}
	cluster := func(addr string) *tollgatev1.GetClusterResponse {
		resp, err := insecureCall(t, addr, func(ctx context.Context, conn *grpc.ClientConn) (*tollgatev1.GetClusterResponse, error) {
			return tollgatev1.NewAdminServiceClient(conn).GetCluster(ctx, &tollgatev1.GetClusterRequest{})
		})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	var leader string
	deadline := time.Now().Add(cliWaitLimit)
	for {
		a, b := cluster(ss[0].addr), cluster(ss[1].addr)
		serving := a.GetLeadershipRemaining() != nil || b.GetLeadershipRemaining() != nil // the leader's term has started
		if serving && a.GetLeader() != "" && a.GetLeader() == b.GetLeader() && len(a.GetMembers()) == 2 && len(b.GetMembers()) == 2 {
			leader = a.GetLeader()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no agreed leader: %v / %v", a, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, s := range ss {
		resp, err := http.Get("http://" + s.http + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		want := "tollgate_leader 0"
		if s.addr == leader {
			want = "tollgate_leader 1"
		}
		if !strings.Contains(string(body), want+"\n") || !strings.Contains(string(body), "tollgate_leader_changes_total") || !strings.Contains(string(body), "tollgate_leadership_remaining_seconds") {
			t.Fatalf("%s /metrics lacks %q or the other leadership metrics", s.addr, want)
		}
	}
}

// "tollgate events" on a cluster follows the leader: when the server it
// watches hands off, it goes on with the successor's events, the
// successor's leader_changed among them.
func TestEventsFollowTheLeader(t *testing.T) {
	etcd := etcdtest.Start(t)
	var addrs []string
	stops := map[string]func(){}
	for i := 0; i < 2; i++ {
		addr := hatest.FreeAddr(t)
		_, _, stop := startStoppableServe(t, "--listen", addr, "--advertise", addr, "--etcd", etcd.Endpoint(), "--etcd-session-ttl", "2s")
		addrs = append(addrs, addr)
		stops[addr] = stop
	}
	list := strings.Join(addrs, ",")
	leader := func(not string) string {
		t.Helper()
		deadline := time.Now().Add(cliWaitLimit)
		for {
			for _, a := range addrs {
				resp, err := insecureCall(t, a, func(ctx context.Context, conn *grpc.ClientConn) (*tollgatev1.GetClusterResponse, error) {
					return tollgatev1.NewAdminServiceClient(conn).GetCluster(ctx, &tollgatev1.GetClusterRequest{})
				})
				if err == nil && resp.GetLeadershipRemaining() != nil && a != not {
					return a
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("no leader other than %q", not)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	first := leader("")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out, done := startCLI(t, ctx, list, "events", "--recent")
	waitOutput(t, out, done, "leader_changed")
	stops[first]()
	second := leader(first)
	waitOutput(t, out, done, second+" leads, epoch")
	runCLI(t, list, "pool", "create", "after-failover", "--concurrency", "1").mustSucceed(t)
	waitOutput(t, out, done, "pool_created  after-failover")
	cancel()
	if code := exitStatus(t, done); code != 0 {
		t.Fatalf("events exited with %d", code)
	}
}

// "tollgate events" on a cluster follows the leader when the one it
// watches is killed with SIGKILL (its connection breaks, no hand-off): it
// goes on with the successor's events.
func TestEventsFollowTheLeaderAfterKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the tollgate binary and runs a cluster of two")
	}
	c := hatest.StartCluster(t, buildTollgate(t), etcdtest.Start(t), 2)
	first, _ := c.WaitLeader(cliWaitLimit)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out, done := startCLI(t, ctx, strings.Join(c.Addrs(), ","), "events", "--recent")
	waitOutput(t, out, done, "leader_changed")
	first.Kill()
	second, _ := c.WaitLeader(4*hatest.SessionTTL+cliWaitLimit, first)
	waitOutput(t, out, done, second.Addr+" leads, epoch")
	runCLI(t, second.Addr, "pool", "create", "after-kill", "--concurrency", "1").mustSucceed(t)
	waitOutput(t, out, done, "pool_created  after-kill")
	cancel()
	if code := exitStatus(t, done); code != 0 {
		t.Fatalf("events exited with %d", code)
	}
}
