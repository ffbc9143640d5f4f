package fanout

import (
	"cmp"
	"context"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tollgate/tollgate/internal/refuse"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// fakeAdmin answers ListPools with its pools and records the metadata
// of the calls it gets; block makes it wait until the call's end.
type fakeAdmin struct {
	tollgatev1.UnimplementedAdminServiceServer
	pools []string
	block bool
	err   error
	seen  chan metadata.MD
}

func (f *fakeAdmin) ListPools(ctx context.Context, _ *tollgatev1.ListPoolsRequest) (*tollgatev1.ListPoolsResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	f.seen <- md
	if f.block {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if f.err != nil {
		return nil, f.err
	}
	resp := &tollgatev1.ListPoolsResponse{}
	for _, p := range f.pools {
		resp.Pools = append(resp.Pools, &tollgatev1.Pool{Name: p})
	}
	return resp, nil
}

func serveFake(t *testing.T, f *fakeAdmin) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.seen = make(chan metadata.MD, 16)
	g := grpc.NewServer()
	tollgatev1.RegisterAdminServiceServer(g, f)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	return lis.Addr().String()
}

func listPools(ctx context.Context, _ string, cc *grpc.ClientConn) (*tollgatev1.ListPoolsResponse, error) {
	return tollgatev1.NewAdminServiceClient(cc).ListPools(ctx, &tollgatev1.ListPoolsRequest{})
}

func TestAskForwardsCredentialsAndScopeOnly(t *testing.T) {
	a, b := &fakeAdmin{pools: []string{"a"}}, &fakeAdmin{pools: []string{"b"}}
	addrA, addrB := serveFake(t, a), serveFake(t, b)
	f := New(Config{Self: "self:1", Members: func() []string { return []string{addrB, "self:1", addrA, addrA} },
		DialOptions: []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}})
	defer f.Close()
	peers := f.Peers()
	if want := []string{addrA, addrB}; !slices.Equal(peers, slices.Sorted(slices.Values(want))) {
		t.Fatalf("Peers = %v, want %v sorted, without self or repeats", peers, want)
	}
	in := metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer t0ken", "x-other", "no"))
	parts := Ask(in, f, peers, listPools)
	for _, p := range parts {
		if p.Err != nil || len(p.Resp.GetPools()) != 1 {
			t.Fatalf("part %v", p)
		}
	}
	for _, fa := range []*fakeAdmin{a, b} {
		md := <-fa.seen
		if !slices.Equal(md.Get("authorization"), []string{"Bearer t0ken"}) || !slices.Equal(md.Get(ScopeHeader), []string{ScopeLocal}) || len(md.Get("x-other")) != 0 {
			t.Fatalf("the forwarded call's metadata: %v", md)
		}
		if !Local(metadata.NewIncomingContext(context.Background(), md)) {
			t.Fatal("a forwarded call is not local at its receiver")
		}
	}
	if Local(in) {
		t.Fatal("a caller's call is local")
	}
}

func TestAskBoundsEachPartAndNamesTheMissing(t *testing.T) {
	slow, refusing, leaderless := &fakeAdmin{block: true}, &fakeAdmin{err: status.Error(codes.PermissionDenied, "no")}, &fakeAdmin{}
	leaderless.err = refuse.StatusOf(&apierr.Error{Code: apierr.CodeUnavailable, Reason: apierr.ReasonNotLeader, Message: "not the leader"}, refuse.About{}).Err()
	ok := &fakeAdmin{pools: []string{"x"}}
	addrs := []string{serveFake(t, slow), serveFake(t, refusing), serveFake(t, leaderless), serveFake(t, ok)}
	f := New(Config{Self: "self:1", Members: func() []string { return addrs }, Timeout: 200 * time.Millisecond,
		DialOptions: []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}})
	defer f.Close()
	parts := Ask(context.Background(), f, addrs, listPools)
	if status.Code(parts[0].Err) != codes.DeadlineExceeded || parts[3].Err != nil || len(parts[3].Resp.GetPools()) != 1 {
		t.Fatalf("parts %v", parts)
	}
	if got, want := Missing(parts), []string{addrs[0], addrs[1]}; !slices.Equal(got, want) {
		t.Fatalf("Missing = %v, want %v (a NOT_LEADER part is empty, not missing)", got, want)
	}
}

func TestPeersClosesTheConnectionsOfMembersGone(t *testing.T) {
	a := &fakeAdmin{}
	addr := serveFake(t, a)
	members := []string{addr}
	f := New(Config{Self: "self:1", Members: func() []string { return members },
		DialOptions: []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}})
	defer f.Close()
	cc, err := f.Conn(addr)
	if err != nil {
		t.Fatal(err)
	}
	f.Peers()
	if again, _ := f.Conn(addr); again != cc {
		t.Fatal("a member's connection is not kept")
	}
	members = nil
	f.Peers()
	if _, err := tollgatev1.NewAdminServiceClient(cc).ListPools(context.Background(), &tollgatev1.ListPoolsRequest{}); status.Code(err) != codes.Canceled {
		t.Fatalf("the connection of a member gone still works: %v", err)
	}
}

func TestBeginBoundsPerCallerAndServer(t *testing.T) {
	f := New(Config{Self: "s", Members: func() []string { return nil }, MaxInFlight: 3, MaxPerCaller: 2})
	r1, err1 := f.Begin("a")
	_, err2 := f.Begin("a")
	_, err3 := f.Begin("a")
	if err1 != nil || err2 != nil || status.Code(err3) != codes.ResourceExhausted || !strings.Contains(err3.Error(), "this client has 2") {
		t.Fatalf("per caller: %v %v %v", err1, err2, err3)
	}
	_, err4 := f.Begin("b")
	_, err5 := f.Begin("c")
	if err4 != nil || status.Code(err5) != codes.ResourceExhausted || !strings.Contains(err5.Error(), "3 cluster-wide") {
		t.Fatalf("per server: %v %v", err4, err5)
	}
	r1()
	r1() // idempotent
	if _, err := f.Begin("c"); err != nil {
		t.Fatalf("after a release: %v", err)
	}
	if _, err := f.Begin("d"); err == nil {
		t.Fatal("a second release freed two slots")
	}
}

func TestMerge(t *testing.T) {
	byName := func(a, b string) int { return cmp.Compare(a, b) }
	id := func(s string) string { return s }
	l := func(more bool, items ...string) List[string] { return List[string]{Items: items, More: more} }
	for _, c := range []struct {
		lists    []List[string]
		size     int
		want     []string
		wantMore bool
	}{
		{[]List[string]{l(false, "a", "c"), l(false, "b", "d")}, 3, []string{"a", "b", "c"}, true},
		{[]List[string]{l(false, "a", "c"), l(false, "b", "d")}, 4, []string{"a", "b", "c", "d"}, false},
		{[]List[string]{l(false, "a", "c"), l(true, "b")}, 3, []string{"a", "b"}, true}, // c may follow b's server's b
		{[]List[string]{l(true, "a", "c"), l(true, "b", "d")}, 9, []string{"a", "b", "c"}, true},
		{[]List[string]{l(false, "a", "b"), l(false, "b")}, 5, []string{"a", "b"}, false}, // a pool listed twice during a move
		{nil, 3, nil, false},
	} {
		got, more := Merge(c.lists, byName, id, c.size)
		if !slices.Equal(got, c.want) || more != c.wantMore {
			t.Errorf("Merge(%v, %d) = %v, %v; want %v, %v", c.lists, c.size, got, more, c.want, c.wantMore)
		}
	}
}
