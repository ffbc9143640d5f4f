package client_test

import (
	"context"
	"errors"
	"net"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tollgate/tollgate/client"
	"github.com/tollgate/tollgate/limiter"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/server"
)

// clusterGate makes a loopback gRPC server act as one server of a cluster,
// as the contract of a server run with --etcd says: while it does not lead
// it answers every call UNAVAILABLE (NOT_LEADER, naming the leader, with a
// RetryInfo) and its health reports tollgate.v1.LimiterService NOT_SERVING;
// when it stops leading, its open streams end with NOT_LEADER.
type clusterGate struct {
	mu          sync.Mutex
	leading     bool
	leader      string        // the leader a follower names
	staleHealth bool          // a follower whose health still says SERVING (a race)
	changed     chan struct{} // closed and replaced at every change
	notLeader   atomic.Int64  // NOT_LEADER answers given
}

type gateState struct {
	leading, healthy bool
	leader           string
	changed          <-chan struct{}
}

func (g *clusterGate) state() gateState {
	g.mu.Lock()
	defer g.mu.Unlock()
	return gateState{leading: g.leading, healthy: g.leading || g.staleHealth, leader: g.leader, changed: g.changed}
}

// set makes the server lead, or follow naming leader.
func (g *clusterGate) set(leading bool, leader string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.leading, g.leader = leading, leader
	close(g.changed)
	g.changed = make(chan struct{})
}

func (g *clusterGate) notLeaderErr(leader string) error {
	g.notLeader.Add(1)
	st, err := status.New(codes.Unavailable, "this server is not the leader").WithDetails(
		&errdetails.ErrorInfo{Domain: client.ErrorDomain, Reason: "NOT_LEADER", Metadata: map[string]string{"leader": leader, "epoch": "7"}},
		&errdetails.RetryInfo{RetryDelay: durationpb.New(10 * time.Millisecond)})
	if err != nil {
		panic(err)
	}
	return st.Err()
}

func (g *clusterGate) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if s := g.state(); !s.leading {
		return nil, g.notLeaderErr(s.leader)
	}
	return h(ctx, req)
}

func (g *clusterGate) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if info.FullMethod == "/grpc.health.v1.Health/Watch" {
		return g.watch(ss)
	}
	s := g.state()
	if !s.leading {
		return g.notLeaderErr(s.leader)
	}
	ctx, cancel := context.WithCancel(ss.Context())
	defer cancel()
	go func() {
		select {
		case <-s.changed:
			cancel()
		case <-ctx.Done():
		}
	}()
	err := h(srv, ctxStream{ServerStream: ss, ctx: ctx})
	if s := g.state(); !s.leading {
		return g.notLeaderErr(s.leader)
	}
	return err
}

// watch answers a client's health watch of the limiter service.
func (g *clusterGate) watch(ss grpc.ServerStream) error {
	var req healthpb.HealthCheckRequest
	if err := ss.RecvMsg(&req); err != nil {
		return err
	}
	for {
		s := g.state()
		st := healthpb.HealthCheckResponse_NOT_SERVING
		if s.healthy {
			st = healthpb.HealthCheckResponse_SERVING
		}
		if err := ss.SendMsg(&healthpb.HealthCheckResponse{Status: st}); err != nil {
			return err
		}
		select {
		case <-s.changed:
		case <-ss.Context().Done():
			return nil
		}
	}
}

type ctxStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s ctxStream) Context() context.Context { return s.ctx }

// clusterNode is one server of a test cluster on a loopback address: a
// follower with no engine, or, once it leads, a real server over the
// cluster's data directory (its take-over is a restart over the same
// state, as a new leader's is).
type clusterNode struct {
	t      *testing.T
	addr   string
	gate   *clusterGate
	srv    *server.Server // while it leads
	gs     *grpc.Server
	served chan struct{}
}

// newClusterNode starts a follower naming leader.
func newClusterNode(t *testing.T, leader string) *clusterNode {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n := &clusterNode{t: t, addr: lis.Addr().String(), gate: &clusterGate{leader: leader, changed: make(chan struct{})}}
	n.serve(lis, grpc.NewServer(n.gateOptions(grpc.UnknownServiceHandler(func(any, grpc.ServerStream) error {
		return status.Error(codes.Unimplemented, "a follower serves nothing")
	}))...))
	t.Cleanup(func() {
		n.stopServing()
		if n.srv != nil {
			n.srv.Close()
		}
	})
	return n
}

func (n *clusterNode) gateOptions(opts ...grpc.ServerOption) []grpc.ServerOption {
	return append(opts, grpc.ChainUnaryInterceptor(n.gate.unary), grpc.ChainStreamInterceptor(n.gate.stream))
}

func (n *clusterNode) serve(lis net.Listener, gs *grpc.Server) {
	n.gs, n.served = gs, make(chan struct{})
	served := n.served
	go func() {
		defer close(served)
		_ = gs.Serve(lis)
	}()
}

func (n *clusterNode) stopServing() {
	n.gs.Stop()
	<-n.served
}

// clusterPools are the pools of the test cluster's data directory.
var clusterPools = []limiter.PoolConfig{
	{Name: "db", ConcurrencyLimit: 1, DefaultLeaseTTL: 6 * time.Second, MaxLeaseTTL: 6 * time.Second},
	{Name: "db2", ConcurrencyLimit: 1, DefaultLeaseTTL: 6 * time.Second, MaxLeaseTTL: 6 * time.Second},
}

// lead makes the follower the leader: it serves a real server over dir on
// its address.
func (n *clusterNode) lead(dir string) {
	n.t.Helper()
	n.stopServing()
	srv, err := server.Open(server.Config{ShutdownTimeout: time.Second, Advertise: n.addr}, dir, clusterPools)
	if err != nil {
		n.t.Fatal(err)
	}
	n.srv = srv
	var lis net.Listener
	waitFor(n.t, "listening again on "+n.addr, func() bool {
		lis, err = net.Listen("tcp", n.addr)
		return err == nil
	})
	n.gate.set(true, n.addr)
	n.serve(lis, srv.GRPCServer(n.gateOptions()...))
}

// follow makes the leader a follower naming leader: its streams end with
// NOT_LEADER, and its engine is closed (the state stays in dir).
func (n *clusterNode) follow(leader string) {
	n.gate.set(false, leader)
	n.srv.Close()
}

func (n *clusterNode) status(pool string) limiter.PoolStatus {
	n.t.Helper()
	info, err := n.srv.Engine().GetPool(pool)
	if err != nil {
		n.t.Fatal(err)
	}
	return info.Status
}

// A client given the addresses of a cluster sends its lease traffic and
// its unary calls to the leader, never to the followers: their health says
// NOT_SERVING.
func TestDialSeveralAddressesFindsTheLeader(t *testing.T) {
	a, b, cn := newClusterNode(t, ""), newClusterNode(t, ""), newClusterNode(t, "")
	b.lead(t.TempDir())
	a.gate.set(false, b.addr)
	cn.gate.set(false, b.addr)
	c := dialTarget(t, a.addr, b.addr, cn.addr)

	if err := c.Do(ctx(t), "db", func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	adm := tollgatev1.NewAdminServiceClient(c.Conn())
	for range 6 {
		if _, err := adm.GetPool(ctx(t), &tollgatev1.GetPoolRequest{Name: "db"}); err != nil {
			t.Fatal(err)
		}
	}
	if got := b.status("db").Granted; got != 1 {
		t.Fatalf("the leader granted %d leases; want 1", got)
	}
	if na, nc := a.gate.notLeader.Load(), cn.gate.notLeader.Load(); na+nc != 0 {
		t.Fatalf("the followers were called: %d and %d NOT_LEADER answers", na, nc)
	}
}

// When the leader changes while a lease is held, the client's Session
// stream (ended by the old leader with NOT_LEADER) moves to the new
// leader, which re-adopts the lease with the same id and fencing token;
// new acquires are granted there.
func TestFailoverKeepsTheLeaseAndGrantsOnTheNewLeader(t *testing.T) {
	dir := t.TempDir()
	a, b, cn := newClusterNode(t, ""), newClusterNode(t, ""), newClusterNode(t, "")
	a.lead(dir)
	b.gate.set(false, a.addr)
	cn.gate.set(false, a.addr)
	c := dialTarget(t, a.addr, b.addr, cn.addr)
	l, err := c.Acquire(ctx(t), "db", client.WithDescription("job"))
	if err != nil {
		t.Fatal(err)
	}

	a.follow("") // the old leader's stream ends: NOT_LEADER, no leader known yet
	b.lead(dir)
	a.gate.set(false, b.addr)
	cn.gate.set(false, b.addr)
	waitFor(t, "the new leader to re-adopt the lease", func() bool { return b.status("db").Readopted == 1 })
	if isDone(l) {
		t.Fatalf("the lease was lost across the failover: %v", l.Err())
	}
	if a.gate.notLeader.Load() == 0 {
		t.Fatal("the old leader answered no NOT_LEADER: its stream did not end with it")
	}
	adm := tollgatev1.NewAdminServiceClient(c.Conn())
	got, err := adm.GetLease(ctx(t), &tollgatev1.GetLeaseRequest{Pool: "db", LeaseId: l.ID()})
	if err != nil {
		t.Fatal(err)
	}
	if got.GetLease().GetFencingToken() != l.FencingToken() {
		t.Fatalf("the new leader has the lease with fencing token %d; the holder has %d", got.GetLease().GetFencingToken(), l.FencingToken())
	}

	l2, err := c.Acquire(ctx(t), "db2")
	if err != nil {
		t.Fatalf("acquire on the new leader: %v", err)
	}
	if b.status("db2").Granted != 1 {
		t.Fatal("the new leader did not grant the new acquire")
	}
	for _, l := range []*client.Lease{l, l2} {
		if err := l.Release(ctx(t)); err != nil {
			t.Fatalf("release on the new leader: %v", err)
		}
	}
	if s := b.status("db"); s.Held != 0 || s.Released != 1 {
		t.Fatalf("after the release: %+v", s)
	}
}

// A call that reaches a follower anyway (its health still said SERVING)
// is answered NOT_LEADER and sent again, after the answer's retry delay,
// to the leader: the caller sees no error.
func TestNotLeaderAnswerIsRetriedOnTheLeader(t *testing.T) {
	a, b := newClusterNode(t, ""), newClusterNode(t, "")
	b.lead(t.TempDir())
	a.gate.mu.Lock()
	a.gate.staleHealth = true
	a.gate.mu.Unlock()
	a.gate.set(false, b.addr)
	c := dialTarget(t, a.addr+","+b.addr)

	// Calls go round both servers once both report SERVING: call until
	// the follower has answered a few.
	adm := tollgatev1.NewAdminServiceClient(c.Conn())
	deadline := time.Now().Add(waitLimit)
	for i := 0; a.gate.notLeader.Load() < 3; i++ {
		if time.Now().After(deadline) {
			t.Fatalf("after %d calls, %d reached the stale follower", i, a.gate.notLeader.Load())
		}
		if _, err := adm.GetPool(ctx(t), &tollgatev1.GetPoolRequest{Name: "db"}); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if err := c.Do(ctx(t), "db", func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if b.status("db").Granted != 1 {
		t.Fatal("the leader granted nothing")
	}
}

// With every server a follower and no leader, a call waits for a leader
// until its context ends, and its error says so: it matches the context's
// error and names the servers.
func TestNoLeaderEndsTheCallAtItsDeadline(t *testing.T) {
	a, b := newClusterNode(t, ""), newClusterNode(t, "")
	c := dialTarget(t, a.addr, b.addr)
	short, cancel := context.WithTimeout(ctx(t), 300*time.Millisecond)
	defer cancel()
	_, err := c.Acquire(short, "db")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire = %v; want an error matching the context's deadline", err)
	}
	for _, want := range []string{"no leader", a.addr, b.addr} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}

	// So does a unary call (an admin call through Conn).
	short, cancel = context.WithTimeout(ctx(t), 300*time.Millisecond)
	defer cancel()
	_, err = tollgatev1.NewAdminServiceClient(c.Conn()).GetPool(short, &tollgatev1.GetPoolRequest{Name: "db"})
	if status.Code(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), "no leader among "+a.addr+", "+b.addr) {
		t.Errorf("GetPool with no leader = %v; want DEADLINE_EXCEEDED saying there is no leader", err)
	}

	// A caller that does not wait hears at once that there is no leader.
	failFast := dialTargetWith(t, client.Dialer{Unavailable: client.FailWhenUnavailable()}, a.addr, b.addr)
	_, err = failFast.Acquire(ctx(t), "db")
	mustIs(t, err, client.ErrUnavailable)
	if !strings.Contains(err.Error(), "no leader") {
		t.Errorf("error %q does not say there is no leader", err)
	}
}

// Each option is typed by the call that takes it, so that one given to the
// wrong call does not compile: no option of one kind is of another kind.
func TestOptionsAreTypedPerCall(t *testing.T) {
	kinds := []reflect.Type{
		reflect.TypeFor[client.AcquireOption](), reflect.TypeFor[client.GroupOption](),
		reflect.TypeFor[client.SemaphoreOption](), reflect.TypeFor[client.LimiterOption](), reflect.TypeFor[client.ProviderOption](),
	}
	opts := []any{
		client.WithWeight(2), client.WithTTL(time.Second), client.WithPriority(1), client.WithWaitTimeout(time.Second), client.WithDescription("d"),
		client.WithMaxInFlight(2), client.WithErrorPolicy(client.FailFast()), client.WithProgress(nil), client.WithAcquireOptions(), client.WithSemaphore(nil),
		client.WithLocalShare(2), client.WithShareLeaseOptions(),
		client.WithShareWeight(2), client.WithShareTTL(time.Second),
		client.WithProviderTTL(time.Second), client.WithResources(),
	}
	for _, o := range opts {
		var fits []string
		for _, k := range kinds {
			if reflect.TypeOf(o).AssignableTo(k) {
				fits = append(fits, k.Name())
			}
		}
		if len(fits) != 1 {
			t.Errorf("option of type %T is a %v; want exactly one option kind", o, fits)
		}
	}
}

// Dial takes the servers of a cluster as separate arguments, or as one
// comma-separated list; both are the same three addresses.
func TestDialTakesSeveralAddresses(t *testing.T) {
	for _, addrs := range [][]string{{"a:7070", "b:7070", "c:7070"}, {"a:7070,b:7070", "c:7070"}, {"a:7070, b:7070, c:7070"}} {
		c, err := client.Dial(addrs...)
		if err != nil {
			t.Fatalf("Dial(%q): %v", addrs, err)
		}
		if got := client.ClusterAddrs(c); !slices.Equal(got, []string{"a:7070", "b:7070", "c:7070"}) {
			t.Errorf("Dial(%q) has servers %q", addrs, got)
		}
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	}
	if _, err := client.Dial(); err == nil {
		t.Error("Dial() with no address succeeded")
	}
}
