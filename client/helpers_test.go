package client_test

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/tollgate/tollgate/client"
	"github.com/tollgate/tollgate/internal/limits"
	"github.com/tollgate/tollgate/internal/testwait"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/limiter/fakeclock"
	"github.com/tollgate/tollgate/server"
)

// waitLimit bounds every wait of the tests; nothing should come near it.
const waitLimit = 10 * time.Second

// testServer is a Tollgate server on a loopback port with a fake clock. Its
// gRPC server can be stopped and started again on the same address over
// the same engine (a network outage or a restart of the front end that
// keeps the leases).
type testServer struct {
	t        testing.TB
	srv      *server.Server
	clock    *fakeclock.Clock
	addr     string
	gs       *grpc.Server
	served   chan struct{}
	sessions atomic.Int64 // Session streams opened
	// wrap, when set before serving, wraps every stream the server serves.
	wrap func(grpc.ServerStream) grpc.ServerStream
}

// newTestServer starts a server; it is closed at the end of the test.
func newTestServer(t testing.TB) *testServer {
	t.Helper()
	ts := &testServer{
		t:     t,
		clock: fakeclock.New(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)),
	}
	return ts.open(server.Config{Clock: ts.clock})
}

// newBenchServer is a testServer on the real clock, with no per-client
// request rate, for benchmarks.
func newBenchServer(b *testing.B) *testServer {
	b.Helper()
	ts := &testServer{t: b}
	return ts.open(server.Config{Limits: limits.Limits{ClientRate: -1}})
}

// open creates ts's server from cfg and serves it.
func (ts *testServer) open(cfg server.Config) *testServer {
	t := ts.t
	ts.srv = server.New(cfg)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ts.addr = lis.Addr().String()
	ts.serve(lis)
	t.Cleanup(func() {
		ts.stop()
		ts.srv.Close()
	})
	return ts
}

func (ts *testServer) serve(lis net.Listener) {
	wrap := ts.wrap
	count := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		if info.FullMethod == "/tollgate.v1.LimiterService/Session" {
			ts.sessions.Add(1)
		}
		if wrap != nil {
			ss = wrap(ss)
		}
		return h(srv, ss)
	}
	ts.gs = ts.srv.GRPCServer(grpc.ChainStreamInterceptor(count))
	ts.served = make(chan struct{})
	gs, served := ts.gs, ts.served
	go func() {
		defer close(served)
		_ = gs.Serve(lis)
	}()
}

// stop stops the gRPC server (connections are cut; the engine and its
// leases stay).
func (ts *testServer) stop() {
	if ts.gs == nil {
		return
	}
	ts.gs.Stop()
	<-ts.served
	ts.gs = nil
}

// start serves again on the same address.
func (ts *testServer) start() {
	ts.t.Helper()
	var lis net.Listener
	var err error
	waitFor(ts.t, "listening again on "+ts.addr, func() bool {
		lis, err = net.Listen("tcp", ts.addr)
		return err == nil
	})
	ts.serve(lis)
}

// pool creates a pool on the engine.
func (ts *testServer) pool(cfg limiter.PoolConfig) {
	ts.t.Helper()
	if _, err := ts.srv.Engine().CreatePool(cfg); err != nil {
		ts.t.Fatal(err)
	}
}

// status returns a pool's live state.
func (ts *testServer) status(pool string) limiter.PoolStatus {
	ts.t.Helper()
	info, err := ts.srv.Engine().GetPool(pool)
	if err != nil {
		ts.t.Fatal(err)
	}
	return info.Status
}

// dial returns a Client of ts, closed at the end of the test (before the
// server).
func (ts *testServer) dial() *client.Client {
	ts.t.Helper()
	return dialTarget(ts.t, ts.addr)
}

// dialWith is dial with d's settings.
func (ts *testServer) dialWith(d client.Dialer) *client.Client {
	ts.t.Helper()
	return dialTargetWith(ts.t, d, ts.addr)
}

// dialTarget returns a Client of addrs, closed at the end of the test.
func dialTarget(t testing.TB, addrs ...string) *client.Client {
	t.Helper()
	return dialTargetWith(t, client.Dialer{}, addrs...)
}

// dialTargetWith is dialTarget with d's settings.
func dialTargetWith(t testing.TB, d client.Dialer, addrs ...string) *client.Client {
	t.Helper()
	c, err := d.Dial(addrs...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return c
}

// newSemaphore returns c.NewSemaphore(pool, opts...), failing the test on
// an error.
func newSemaphore(t testing.TB, c *client.Client, pool string, opts ...client.SemaphoreOption) *client.Semaphore {
	t.Helper()
	s, err := c.NewSemaphore(pool, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// newGroup returns c.NewGroup(ctx, pool, opts...), failing the test on an
// error.
func newGroup(t testing.TB, c *client.Client, ctx context.Context, pool string, opts ...client.GroupOption) *client.Group {
	t.Helper()
	g, err := c.NewGroup(ctx, pool, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// ctx returns a context bounded by waitLimit.
func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), waitLimit)
	t.Cleanup(cancel)
	return c
}

// waitFor is testwait.For, under the name this package's tests use.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testwait.For(t, what, cond)
}

// waitDone waits for a lease to end and returns its Err.
func waitDone(t *testing.T, l *client.Lease) error {
	t.Helper()
	select {
	case <-l.Done():
	case <-time.After(waitLimit):
		t.Fatalf("lease %s was not lost within %v", l.ID(), waitLimit)
	}
	err := l.Err()
	if err == nil {
		t.Fatal("Err is nil after Done")
	}
	return err
}

// isDone reports whether a lease has ended.
func isDone(l *client.Lease) bool {
	select {
	case <-l.Done():
		return true
	default:
		return false
	}
}

// mustIs fails unless errors.Is(err, target).
func mustIs(t *testing.T, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("error %v (%T) does not match %v", err, err, target)
	}
}
