// Package node holds the test of the Node.js example client (client.js):
// it runs the client against an in-process Tollgate server.
package node

import (
	"context"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/tollgate/tollgate/internal/citest"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/server"
)

func TestNodeClient(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		citest.SkipOrFail(t, "node is not installed; install Node.js 18 or later to run the Node.js example")
	}
	if _, err := os.Stat("node_modules/@grpc/grpc-js"); err != nil {
		citest.SkipOrFail(t, "examples/node/node_modules is missing: run `npm ci` in examples/node")
	}

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
	defer func() {
		gs.Stop()
		srv.Close()
	}()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, node, "client.js", lis.Addr().String(), "orders-db").CombinedOutput()
	t.Logf("node client.js:\n%s", out)
	if err != nil {
		t.Fatalf("node client.js: %v", err)
	}

	acquired := regexp.MustCompile(`(?m)^acquired lease (\S+) pool=orders-db weight=1 fencing_token=(\d+) ttl=3s$`).FindSubmatch(out)
	if acquired == nil {
		t.Fatal("no acquired line")
	}
	id, token := string(acquired[1]), string(acquired[2])
	for _, want := range []string{
		`(?m)^renewed lease ` + regexp.QuoteMeta(id) + ` ttl=5s fencing_token=` + token + `$`,
		`(?m)^released lease ` + regexp.QuoteMeta(id) + `$`,
		`(?m)^error code=NOT_FOUND reason=POOL_NOT_FOUND domain=tollgate.dev message=".*not found`,
	} {
		if !regexp.MustCompile(want).Match(out) {
			t.Errorf("output does not match %s", want)
		}
	}

	// The server saw the acquire, the renew(s) and the release.
	mu.Lock()
	defer mu.Unlock()
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
