package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/tollgate/tollgate/limiter"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/server"
)

// A standalone server reports itself alone, as leader: "standalone", epoch 0.
func TestStatusOfAStandaloneServer(t *testing.T) {
	ts := newCLIServer(t)
	r := runCLI(t, ts.addr, "status").mustSucceed(t)
	want := `(?m)\ASERVER +ROLE +LEADER +EPOCH +LEADERSHIP_LEFT\n` + regexp.QuoteMeta(ts.addr) + ` +standalone +` + regexp.QuoteMeta(ts.addr) + ` +0 +-\n\z`
	if !regexp.MustCompile(want).MatchString(r.stdout) {
		t.Fatalf("status:\n%s", r.stdout)
	}

	out, resp := statusJSON(t, runCLI(t, ts.addr, "cluster", "-o", "json"), 1)
	if out.Servers[0].Server != ts.addr || !resp.GetStandalone() || len(resp.GetMembers()) != 1 || resp.GetMembers()[0].GetRole() != tollgatev1.ClusterRole_CLUSTER_ROLE_LEADER {
		t.Fatalf("cluster -o json: %+v", out)
	}
}

// statusOutput is what status -o json prints.
type statusOutput struct {
	Servers []struct {
		Server  string          `json:"server"`
		Cluster json.RawMessage `json:"cluster"`
		Error   string          `json:"error"`
	} `json:"servers"`
}

// statusJSON decodes the output of a successful status -o json with n
// servers, and the first one's answer.
func statusJSON(t *testing.T, r cliResult, n int) (statusOutput, *tollgatev1.GetClusterResponse) {
	t.Helper()
	r.mustSucceed(t)
	var out statusOutput
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || len(out.Servers) != n {
		t.Fatalf("status -o json: %v\n%s", err, r.stdout)
	}
	var resp tollgatev1.GetClusterResponse
	if err := protojson.Unmarshal(out.Servers[0].Cluster, &resp); err != nil {
		t.Fatal(err)
	}
	return out, &resp
}

// fakeLeadership is a server's fixed account of a cluster.
type fakeLeadership struct {
	view    server.ClusterView
	deposed bool // its view names itself leader, but its deadline passed
}

func (f fakeLeadership) Leading() bool               { return f.view.Leader == f.view.Self && !f.deposed }
func (f fakeLeadership) Cluster() server.ClusterView { return f.view }

// clusterServer serves a server whose Leadership reports view, with
// view.Self set to its address.
func clusterServer(t *testing.T, lis net.Listener, view server.ClusterView) {
	t.Helper()
	view.Self = lis.Addr().String()
	clusterServerOf(t, lis, fakeLeadership{view: view})
}

// clusterServerOf serves a server whose Leadership is f, on lis.
func clusterServerOf(t *testing.T, lis net.Listener, f fakeLeadership) {
	t.Helper()
	view := f.view
	srv := server.New(server.Config{Leadership: f, Advertise: view.Self, ShutdownTimeout: time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serving %s: %v", view.Self, err)
		}
	})
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return lis
}

// Each server of the list answers for itself: the leader, with the time
// left on its leadership; a follower, naming the leader; and a server
// that does not answer is shown as unreachable.
func TestStatusOfACluster(t *testing.T) {
	ll, fl := listen(t), listen(t)
	leader, follower := ll.Addr().String(), fl.Addr().String()
	members := []string{leader, follower}
	clusterServer(t, ll, server.ClusterView{Members: members, Leader: leader, Epoch: 42, Remaining: 1500 * time.Millisecond})
	clusterServer(t, fl, server.ClusterView{Members: members, Leader: leader, Epoch: 42})
	const down = "127.0.0.1:1" // nothing listens there

	r := runCLI(t, leader+","+follower+","+down, "status").mustSucceed(t)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	q := regexp.QuoteMeta
	for i, want := range []string{
		`^SERVER +ROLE +LEADER +EPOCH +LEADERSHIP_LEFT$`,
		`^` + q(leader) + ` +leader +` + q(leader) + ` +42 +1\.5s$`,
		`^` + q(follower) + ` +follower +` + q(leader) + ` +42 +-$`,
		`^` + q(down) + ` +unreachable +- +- +-$`,
		`^` + q(down) + `: .*\(UNAVAILABLE\)`,
	} {
		if i >= len(lines) || !regexp.MustCompile(want).MatchString(lines[i]) {
			t.Fatalf("line %d does not match %s:\n%s", i, want, r.stdout)
		}
	}

	out, resp := statusJSON(t, runCLI(t, follower+","+down, "status", "-o", "json"), 2)
	if resp.GetLeader() != leader || resp.GetEpoch() != 42 || resp.GetSelf() != follower || len(resp.GetMembers()) != 2 ||
		out.Servers[1].Server != down || !strings.Contains(out.Servers[1].Error, "UNAVAILABLE") {
		t.Fatalf("status -o json: %+v", out)
	}

	runCLI(t, down, "status").mustFail(t, 1, "no server answered")

	// TOLLGATE_SERVER holds the list as --server does.
	var stdout, stderr bytes.Buffer
	env := func(k string) string {
		if k == "TOLLGATE_SERVER" {
			return follower + "," + leader
		}
		return ""
	}
	if code := run(context.Background(), []string{"cluster"}, &stdout, &stderr, env); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if lines := strings.Split(strings.TrimSpace(stdout.String()), "\n"); len(lines) != 3 ||
		!strings.HasPrefix(lines[1], follower+" ") || !strings.HasPrefix(lines[2], leader+" ") {
		t.Fatalf("cluster with TOLLGATE_SERVER=%s,%s:\n%s", follower, leader, stdout.String())
	}
}

// tollgate serve reports its listen address to GetCluster: status shows
// the server as the leader it knows.
func TestStatusOfServe(t *testing.T) {
	addr, _ := startServe(t)
	_, resp := statusJSON(t, runCLI(t, addr, "status", "-o", "json"), 1)
	if resp.GetLeader() != addr || resp.GetSelf() != addr || resp.GetMembers()[0].GetAddress() != addr {
		t.Fatalf("status of serve on %s: %v", addr, resp)
	}
}

// Every client command takes a list of servers and talks to the one that
// serves; here the first address has no server.
func TestCommandsTakeAListOfServers(t *testing.T) {
	ts := newCLIServer(t)
	ts.pool(t, limiter.PoolConfig{Name: "db", ConcurrencyLimit: 1})
	r := runCLI(t, "127.0.0.1:1,"+ts.addr, "pool", "list").mustSucceed(t)
	if !strings.Contains(r.stdout, "db") {
		t.Fatalf("pool list:\n%s", r.stdout)
	}
	runCLI(t, "127.0.0.1:1,"+ts.addr, "take", "db").mustFail(t, 1, "NO_RATE_LIMIT")
}

// A server whose leadership deadline passed (etcd down) while its
// election still names it leader shows no leader, not itself.
func TestStatusOfADeposedLeader(t *testing.T) {
	lis := listen(t)
	self := lis.Addr().String()
	clusterServerOf(t, lis, fakeLeadership{view: server.ClusterView{Self: self, Members: []string{self}, Leader: self, Epoch: 7, Remaining: time.Second}, deposed: true})
	r := runCLI(t, self, "status").mustSucceed(t)
	if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(self) + ` +follower +- +7 +-$`).MatchString(r.stdout) {
		t.Fatalf("status of a deposed leader:\n%s", r.stdout)
	}
}

// Given only a follower's address, a command follows its NOT_LEADER
// answer to the leader, and says so.
func TestCommandFollowsTheLeaderHint(t *testing.T) {
	ll, fl := listen(t), listen(t)
	leader, follower := ll.Addr().String(), fl.Addr().String()
	members := []string{leader, follower}
	clusterServer(t, ll, server.ClusterView{Members: members, Leader: leader, Epoch: 3, Remaining: time.Minute})
	clusterServer(t, fl, server.ClusterView{Members: members, Leader: leader, Epoch: 3})
	r := runCLI(t, follower, "--timeout", "1m", "pool", "create", "db", "--concurrency", "1").mustSucceed(t)
	if !strings.Contains(r.stderr, follower+" does not lead shard 0; following its answer to its leader, "+leader) {
		t.Fatalf("stderr: %q", r.stderr)
	}
	r = runCLI(t, leader, "pool", "get", "db").mustSucceed(t)
	runCLI(t, follower, "--timeout", "1m", "take", "db").mustFail(t, 1, "NO_RATE_LIMIT") // a limiter call too
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out, done := startCLI(t, ctx, follower, "events", "--recent") // and a stream
	waitOutput(t, out, done, "pool_created  db")
	cancel()
	if code := exitStatus(t, done); code != 0 {
		t.Fatalf("events exited with %d", code)
	}
	if got := withServer([]string{"--server", "a", "run", "db", "--server=b", "--", "x", "--server", "c"}, "l"); strings.Join(got, " ") != "--server l run db -- x --server c" {
		t.Fatalf("withServer: %q", got)
	}
}
