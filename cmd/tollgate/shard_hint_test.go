package main

import (
	"context"
	"net"
	"regexp"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/proto"

	"github.com/tollgate/tollgate/internal/cluster"
	"github.com/tollgate/tollgate/limiter"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// notOwner serves a server that leads no shard: every call, unary or
// stream, is answered NOT_LEADER naming owner as the leader of shard 3,
// as a server of a sharded cluster answers a call about a pool of a
// shard it does not lead. It returns its address.
func notOwner(t *testing.T, owner string) string {
	t.Helper()
	lis := listen(t)
	self := lis.Addr().String()
	srv := grpc.NewServer(grpc.UnknownServiceHandler(func(any, grpc.ServerStream) error {
		return cluster.NotLeader(self, cluster.Owner{Shard: 3, Owner: owner, Epoch: 9})
	}))
	hs := health.NewServer() // a server of a sharded cluster serves (the shards it leads)
	hs.SetServingStatus(tollgatev1.LimiterService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus(tollgatev1.AdminService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(srv, hs)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return self
}

// Every command about a pool, given only a server that does not lead the
// pool's shard, is sent again to the server its NOT_LEADER answer names,
// and says so on stderr; nothing is applied twice.
func TestEveryPoolCommandFollowsTheShardHint(t *testing.T) {
	ts := newCLIServer(t)
	ts.pool(t, limiter.PoolConfig{Name: "gpus", ResourceKind: limiter.ResourcePassive})
	other := notOwner(t, ts.addr)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, args := range [][]string{
		{"pool", "create", "db", "--concurrency", "3", "--rate", "100"},
		{"pool", "get", "db"},
		{"pool", "update", "db", "--concurrency", "4"},
		{"pool", "suspend", "db"},
		{"pool", "resume", "db"},
		{"take", "db", "-n", "2"},
		{"run", "db", "--try", "--", "true"},
		{"lease", "list", "db"},
		{"pool", "create", "act", "--kind", "active"},
		{"resource", "add", "act", "r1", "r2"},
		{"resource", "list", "act"},
		{"resource", "remove", "act", "r2"},
		{"pool", "drain", "act", "--timeout", "5s"},
		{"pool", "delete", "db"},
	} {
		r := runCLICtx(t, ctx, other, append([]string{"--timeout", "20s"}, args...)...)
		if r.code != 0 {
			t.Fatalf("%v: exit status %d\nstdout:\n%s\nstderr:\n%s", args, r.code, r.stdout, r.stderr)
		}
		if want := other + " does not lead shard 3; following its answer to its leader, " + ts.addr; !strings.Contains(r.stderr, want) {
			t.Fatalf("%v: stderr lacks %q:\n%s", args, want, r.stderr)
		}
	}

	// Commands that hold a stream: the lease's Session, the provider's.
	for _, args := range [][]string{
		{"acquire", "db2", "--try"},
		{"resource", "provide", "gpus", "g1", "--id", "w1"},
	} {
		if args[0] == "acquire" {
			runCLI(t, ts.addr, "pool", "create", "db2", "--concurrency", "1").mustSucceed(t)
		}
		var stdout, stderr cliBuffer
		sctx, stop := context.WithCancel(ctx)
		done := make(chan int, 1)
		go func() {
			done <- run(sctx, append([]string{"--server", other, "--timeout", "20s"}, args...), &stdout, &stderr, func(string) string { return "" })
		}()
		defer func() {
			if t.Failed() {
				t.Logf("%v stderr:\n%s", args, stderr.String())
			}
		}()
		waitOutput(t, &stdout, done, map[string]string{"acquire": "acquired", "resource": "providing 1 instances"}[args[0]])
		stop()
		if code := exitStatus(t, done); code != 0 {
			t.Fatalf("%v: exit status %d\nstderr:\n%s", args, code, stderr.String())
		}
		if want := other + " does not lead shard 3; following its answer to its leader, " + ts.addr; !strings.Contains(stderr.String(), want) {
			t.Fatalf("%v: stderr lacks %q:\n%s", args, want, stderr.String())
		}
	}
}

// shardMapServer answers GetCluster with resp (Self set to its address).
type shardMapServer struct {
	tollgatev1.UnimplementedAdminServiceServer
	resp *tollgatev1.GetClusterResponse
}

func (s shardMapServer) GetCluster(context.Context, *tollgatev1.GetClusterRequest) (*tollgatev1.GetClusterResponse, error) {
	return s.resp, nil
}

// serveShardMap serves resp's GetCluster on lis.
func serveShardMap(t *testing.T, lis net.Listener, resp *tollgatev1.GetClusterResponse) {
	t.Helper()
	resp = proto.Clone(resp).(*tollgatev1.GetClusterResponse)
	resp.Self = lis.Addr().String()
	srv := grpc.NewServer()
	tollgatev1.RegisterAdminServiceServer(srv, shardMapServer{resp: resp})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
}

// status prints each server's role and shards, then the shard map:
// once when the servers agree, once per different map while a shard moves.
func TestStatusShowsTheShardMap(t *testing.T) {
	la, lb := listen(t), listen(t)
	a, b := la.Addr().String(), lb.Addr().String()
	const c = "10.0.0.3:7070" // a member that leads nothing
	owners := []string{a, a, b, a, b, b}
	const leads = tollgatev1.ClusterRole_CLUSTER_ROLE_LEADER
	resp := &tollgatev1.GetClusterResponse{ShardCount: 6, Leader: a, Epoch: 5,
		Members: []*tollgatev1.ClusterMember{{Address: a, ShardsLed: 3, Role: leads}, {Address: b, ShardsLed: 3, Role: leads}, {Address: c, Role: tollgatev1.ClusterRole_CLUSTER_ROLE_FOLLOWER}}}
	for i, o := range owners {
		resp.Shards = append(resp.Shards, &tollgatev1.ShardOwner{Shard: int32(i), Owner: o, Epoch: int64(10 + i)})
	}
	moving := proto.Clone(resp).(*tollgatev1.GetClusterResponse)
	moving.Shards[4].MovingTo = c
	moving.Shards[5].Owner, moving.Shards[5].Epoch = "", 0
	serveShardMap(t, la, resp)
	serveShardMap(t, lb, resp)
	r := runCLI(t, a+","+b, "status").mustSucceed(t)
	q := regexp.QuoteMeta
	want := `(?s)\ASERVER +ROLE +SHARDS_LED +LEADERSHIP_LEFT\n` +
		q(a) + ` +leader +3 +-\n` + q(b) + ` +leader +3 +-\n` +
		`\nshard map of ` + q(a+", "+b) + `: 6 shards\nOWNER +SHARDS_LED +SHARDS\n` +
		q(a) + ` +3 +0-1,3\n` + q(b) + ` +3 +2,4-5\n` + q(c) + ` +0 +-\n\z`
	if !regexp.MustCompile(want).MatchString(r.stdout) {
		t.Fatalf("status:\n%s", r.stdout)
	}

	lc := listen(t)
	serveShardMap(t, lc, moving)
	r = runCLI(t, a+","+lc.Addr().String(), "status").mustSucceed(t)
	for _, w := range []string{
		"shard map of " + a + ": 6 shards\n",
		"shard map of " + lc.Addr().String() + ": 6 shards\n",
		`(?m)^` + q(b) + ` +2 +2,4$`,
		`(?m)^SHARD +OWNER +EPOCH +MOVING_TO\n4 +` + q(b) + ` +14 +` + q(c) + `\n5 +- +0 +-$`,
	} {
		if !regexp.MustCompile(w).MatchString(r.stdout) && !strings.Contains(r.stdout, w) {
			t.Fatalf("status lacks %q:\n%s", w, r.stdout)
		}
	}
}

// Given several servers, none of which leads the pool's shard, a pool
// command's calls are sent to the server their NOT_LEADER answers name
// (the client does not route the admin calls by pool itself), and every
// command succeeds there.
func TestPoolCommandsOfAListFollowTheShardHint(t *testing.T) {
	ts := newCLIServer(t)
	list := notOwner(t, ts.addr) + "," + notOwner(t, ts.addr)
	for _, args := range [][]string{
		{"pool", "create", "db", "--concurrency", "3"},
		{"pool", "get", "db"},
		{"pool", "update", "db", "--concurrency", "4"},
		{"pool", "suspend", "db"},
		{"pool", "resume", "db"},
		{"lease", "list", "db"},
		{"pool", "delete", "db"},
	} {
		r := runCLI(t, list, append([]string{"--timeout", "20s"}, args...)...)
		if r.code != 0 {
			t.Fatalf("%v: exit status %d\nstdout:\n%s\nstderr:\n%s", args, r.code, r.stdout, r.stderr)
		}
	}
	if _, err := ts.srv.Engine().GetPool("db"); err == nil {
		t.Fatal("pool db is still there after pool delete")
	}
}
