// Package shardfake serves fake servers of a sharded cluster, for the
// tests of the clients in other languages: each server answers GetCluster
// with the cluster's shard map, and the unary limiter calls (Acquire,
// Renew, Release, Take) about a pool whose shard it leads with a trivial
// success; about any other pool, with the NOT_LEADER answer a real server
// gives (cluster.NotLeader), naming the shard's owner. It counts both, so
// that a test can tell how many calls went to a server that does not
// lead the pool's shard.
package shardfake

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tollgate/tollgate/internal/cluster"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/proto/tollgate/v1/shard"
)

// Cluster is n fake servers on loopback addresses sharing count shards:
// shard i is led by server i mod n.
type Cluster struct {
	Addrs []string
	Count int

	answered  atomic.Int64 // calls answered by the owner
	notLeader atomic.Int64 // calls answered NOT_LEADER
}

// Start starts the servers; they stop when t ends. With refuseMap,
// GetCluster is refused (PERMISSION_DENIED, as a server that checks admin
// tokens refuses a caller without one), so only the NOT_LEADER answers
// can route a client.
func Start(t testing.TB, n, count int, refuseMap bool) *Cluster {
	t.Helper()
	c := &Cluster{Count: count}
	var lis []net.Listener
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lis = append(lis, l)
		c.Addrs = append(c.Addrs, l.Addr().String())
	}
	for _, l := range lis {
		s := &server{c: c, self: l.Addr().String(), refuseMap: refuseMap}
		gs := grpc.NewServer()
		tollgatev1.RegisterLimiterServiceServer(gs, s)
		tollgatev1.RegisterAdminServiceServer(gs, s)
		go func() { _ = gs.Serve(l) }()
		t.Cleanup(gs.Stop)
	}
	return c
}

// Owner returns the address of the server that leads pool's shard.
func (c *Cluster) Owner(pool string) string {
	return c.Addrs[shard.Of(pool, c.Count)%len(c.Addrs)]
}

// Answered is how many calls the pool's owner answered.
func (c *Cluster) Answered() int64 { return c.answered.Load() }

// NotLeader is how many calls were answered NOT_LEADER.
func (c *Cluster) NotLeader() int64 { return c.notLeader.Load() }

// epoch is every shard's fake epoch.
const epoch = 7

type server struct {
	tollgatev1.UnimplementedLimiterServiceServer
	tollgatev1.UnimplementedAdminServiceServer
	c         *Cluster
	self      string
	refuseMap bool
}

// lead answers nil when s leads pool's shard, else NOT_LEADER.
func (s *server) lead(pool string) error {
	i := shard.Of(pool, s.c.Count)
	if owner := s.c.Owner(pool); owner != s.self {
		s.c.notLeader.Add(1)
		return cluster.NotLeader(s.self, cluster.Owner{Shard: i, Owner: owner, Epoch: epoch})
	}
	s.c.answered.Add(1)
	return nil
}

func (s *server) GetCluster(context.Context, *tollgatev1.GetClusterRequest) (*tollgatev1.GetClusterResponse, error) {
	if s.refuseMap {
		return nil, status.Error(codes.PermissionDenied, "this caller is not an admin")
	}
	resp := &tollgatev1.GetClusterResponse{Self: s.self, ShardCount: int32(s.c.Count), Leader: s.c.Addrs[0], Epoch: epoch}
	for _, a := range s.c.Addrs {
		resp.Members = append(resp.Members, &tollgatev1.ClusterMember{Address: a})
	}
	for i := range s.c.Count {
		resp.Shards = append(resp.Shards, &tollgatev1.ShardOwner{Shard: int32(i), Owner: s.c.Addrs[i%len(s.c.Addrs)], Epoch: epoch})
	}
	return resp, nil
}

func lease(pool string, weight int64, ttl *durationpb.Duration) *tollgatev1.Lease {
	return &tollgatev1.Lease{Id: "lease-of-" + pool, Pool: pool, Weight: max(weight, 1), FencingToken: 1, Ttl: ttl}
}

func (s *server) Acquire(_ context.Context, req *tollgatev1.AcquireRequest) (*tollgatev1.AcquireResponse, error) {
	if err := s.lead(req.GetPool()); err != nil {
		return nil, err
	}
	return &tollgatev1.AcquireResponse{Lease: lease(req.GetPool(), req.GetWeight(), req.GetTtl())}, nil
}

func (s *server) Renew(_ context.Context, req *tollgatev1.RenewRequest) (*tollgatev1.RenewResponse, error) {
	if err := s.lead(req.GetPool()); err != nil {
		return nil, err
	}
	return &tollgatev1.RenewResponse{Lease: lease(req.GetPool(), req.GetWeight(), req.GetTtl())}, nil
}

func (s *server) Release(_ context.Context, req *tollgatev1.ReleaseRequest) (*tollgatev1.ReleaseResponse, error) {
	if err := s.lead(req.GetPool()); err != nil {
		return nil, err
	}
	return &tollgatev1.ReleaseResponse{}, nil
}

func (s *server) Take(_ context.Context, req *tollgatev1.TakeRequest) (*tollgatev1.TakeResponse, error) {
	if err := s.lead(req.GetPool()); err != nil {
		return nil, err
	}
	return &tollgatev1.TakeResponse{Tokens: req.GetTokens(), Waited: durationpb.New(0)}, nil
}

// CheckRouting checks what the clients' routing tests do with 16 pools
// (pool-0 to pool-15), each taken, acquired, released and taken again
// through a client given the first server: with the shard map (withMap),
// every call went straight to the pool's owner; without it (noMap), at
// most one call per pool was answered NOT_LEADER (the first call of each
// pool whose owner is not the server that answered last), and the client
// remembered the answer.
func CheckRouting(t testing.TB, withMap, noMap *Cluster) {
	t.Helper()
	const pools, callsPerPool = 16, 4
	if got := withMap.NotLeader(); got != 0 {
		t.Errorf("with the shard map, %d calls went to a server that does not lead their pool's shard; want 0", got)
	}
	// A client without the map sends a pool's first call to the server
	// that answered last: the first, then the last one named.
	var hops int64
	last := noMap.Addrs[0]
	for i := range pools {
		if owner := noMap.Owner(fmt.Sprintf("pool-%d", i)); owner != last {
			hops++
			last = owner
		}
	}
	if got := noMap.NotLeader(); got != hops {
		t.Errorf("without the shard map, %d calls were answered NOT_LEADER; want %d (one per pool whose owner is not the server that answered last)", got, hops)
	}
	for _, c := range []*Cluster{withMap, noMap} {
		if got := c.Answered(); got < pools*callsPerPool {
			t.Errorf("the owners answered %d calls; want at least %d", got, pools*callsPerPool)
		}
	}
}
