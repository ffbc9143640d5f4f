// Package node holds the test of the Node.js example client (client.js):
// it runs the client against an in-process Tollgate server.
package node

import (
	"context"
	"maps"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tollgate/tollgate/internal/citest"
	"github.com/tollgate/tollgate/limiter"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/server"
)

// nodeBinary returns the path of node, skipping the test (failing it
// under CI) when node or the example's packages are missing.
func nodeBinary(t *testing.T) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		citest.SkipOrFail(t, "node is not installed; install Node.js 18 or later to run the Node.js example")
	}
	for _, dir := range []string{"node_modules/@tollgate/client", "../../clients/node/node_modules/@grpc/grpc-js"} {
		if _, err := os.Stat(dir); err != nil {
			citest.SkipOrFail(t, "examples/node/"+dir+" is missing: run `npm ci` in clients/node and in examples/node")
		}
	}
	return node
}

func TestNodeClient(t *testing.T) {
	node := nodeBinary(t)
	out, calls, srv := runAgainstServer(t, node, nil)
	checkRun(t, out, calls, srv)
}

// runAgainstServer runs client.js against an in-process server with pool
// orders-db, given the server's address and the extra addresses that
// first(addr) returns (nil: none), and returns its output, the calls the
// server answered by method and code, and the server.
func runAgainstServer(t *testing.T, node string, first func(leader string) []string) ([]byte, map[string]int, *server.Server) {
	t.Helper()

	// Count the calls the server answered, by method and code.
	var mu sync.Mutex
	calls := map[string]int{}
	count := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		resp, err := h(ctx, req)
		mu.Lock()
		calls[info.FullMethod+" "+status.Code(err).String()]++
		mu.Unlock()
		return resp, err
	}
	srv := server.New(server.Config{})
	if _, err := srv.Engine().CreatePool(limiter.PoolConfig{Name: "orders-db", ConcurrencyLimit: 2}); err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := srv.GRPCServer(grpc.ChainUnaryInterceptor(count))
	go func() { _ = gs.Serve(lis) }()

	t.Cleanup(func() {
		gs.Stop()
		srv.Close()
	})

	addrs := []string{lis.Addr().String()}
	if first != nil {
		addrs = first(addrs[0])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, node, "client.js", strings.Join(addrs, ","), "orders-db").CombinedOutput()
	t.Logf("node client.js:\n%s", out)
	if err != nil {
		t.Fatalf("node client.js: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	return out, maps.Clone(calls), srv
}

// checkRun checks the output of a run and the calls the server answered.
func checkRun(t *testing.T, out []byte, calls map[string]int, srv *server.Server) {
	t.Helper()

	acquired := regexp.MustCompile(`(?m)^acquired lease (\S+) pool=orders-db weight=1 fencing_token=(\d+) ttl=3s$`).FindSubmatch(out)
	if acquired == nil {
		t.Fatal("no acquired line")
	}
	id, token := string(acquired[1]), string(acquired[2])
	for _, want := range []string{
		`(?m)^released lease ` + regexp.QuoteMeta(id) + `$`,
		`(?m)^error code=NOT_FOUND reason=POOL_NOT_FOUND message=".*not found`,
	} {
		if !regexp.MustCompile(want).Match(out) {
			t.Errorf("output does not match %s", want)
		}
	}

	// The server saw the acquire, the renew(s) and the release.
	for method, want := range map[string]int{
		"/tollgate.v1.LimiterService/Acquire OK":       1,
		"/tollgate.v1.LimiterService/Release OK":       1,
		"/tollgate.v1.LimiterService/Acquire NotFound": 1,
	} {
		if calls[method] != want {
			t.Errorf("%s: %d calls; want %d (all: %v)", method, calls[method], want, calls)
		}
	}
	if calls["/tollgate.v1.LimiterService/Renew OK"] < 1 {
		t.Errorf("no successful Renew (all: %v)", calls)
	}
	info, err := srv.Engine().GetPool("orders-db")
	if err != nil {
		t.Fatal(err)
	}
	st := info.Status
	if st.Granted != 1 || st.Released != 1 || st.Held != 0 || strconv.FormatUint(st.LastFencingToken, 10) != token {
		t.Fatalf("pool status granted=%d released=%d held=%d last_fencing_token=%d; want 1, 1, 0 and %s",
			st.Granted, st.Released, st.Held, st.LastFencingToken, token)
	}
}

// Given a follower first (a server of a cluster that does not lead), the
// client follows its NOT_LEADER answer to the leader it names, and does
// all its work there.
func TestNodeClientFollowsTheLeaderHint(t *testing.T) {
	node := nodeBinary(t)
	var follower *notLeaderServer
	out, calls, srv := runAgainstServer(t, node, func(leader string) []string {
		follower = startNotLeader(t, leader)
		return []string{follower.addr}
	})
	checkRun(t, out, calls, srv)
	if follower.answered.Load() != 1 {
		t.Errorf("the follower answered %d calls; want 1 (the first acquire)", follower.answered.Load())
	}
}

// followerCluster answers GetCluster as a follower of a cluster of one
// shard does (the client reads it before its first call about a pool).
type followerCluster struct {
	tollgatev1.UnimplementedAdminServiceServer
	leader, self string
}

func (f followerCluster) GetCluster(context.Context, *tollgatev1.GetClusterRequest) (*tollgatev1.GetClusterResponse, error) {
	return &tollgatev1.GetClusterResponse{Leader: f.leader, Self: f.self, Epoch: 7, ShardCount: 1,
		Members: []*tollgatev1.ClusterMember{{Address: f.leader, Role: tollgatev1.ClusterRole_CLUSTER_ROLE_LEADER}, {Address: f.self, Role: tollgatev1.ClusterRole_CLUSTER_ROLE_FOLLOWER}},
		Shards:  []*tollgatev1.ShardOwner{{Owner: f.leader, Epoch: 7}}}, nil
}

// notLeaderServer answers every limiter call as a follower of a cluster
// does: UNAVAILABLE, reason NOT_LEADER, naming the leader, with a
// RetryInfo; and GetCluster as it does.
type notLeaderServer struct {
	addr     string
	answered atomic.Int64
}

func startNotLeader(t *testing.T, leader string) *notLeaderServer {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &notLeaderServer{addr: lis.Addr().String()}
	st, err := status.New(codes.Unavailable, "this server is not the leader").WithDetails(
		&errdetails.ErrorInfo{Domain: "tollgate.dev", Reason: "NOT_LEADER", Metadata: map[string]string{"leader": leader, "epoch": "7"}},
		&errdetails.RetryInfo{RetryDelay: durationpb.New(50 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(grpc.UnknownServiceHandler(func(any, grpc.ServerStream) error {
		f.answered.Add(1)
		return st.Err()
	}))
	tollgatev1.RegisterAdminServiceServer(gs, followerCluster{leader: leader, self: f.addr})
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	return f
}
