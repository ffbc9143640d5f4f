package server

import (
	"strconv"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"

	"github.com/tollgate/tollgate/internal/election"
	"github.com/tollgate/tollgate/internal/etcdtest"
	"github.com/tollgate/tollgate/internal/testwait"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/limiter/fakeclock"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// startShardCluster starts n servers of a cluster of shards shards on
// etcd sharing the fake clock fc, with seed as their pools file.
func startShardCluster(t *testing.T, etcd *etcdtest.Etcd, fc *fakeclock.Clock, n, shards int, seed []limiter.PoolConfig) []*member {
	t.Helper()
	var ms []*member
	for range n {
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{etcd.Endpoint()}, DialTimeout: 2 * time.Second,
			Logger: zap.NewNop(), DialOptions: election.DialOptions(clusterTTL)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		lis := listen(t)
		cfg := Config{Clock: fc, ShutdownTimeout: 2 * time.Second, Advertise: lis.Addr().String()}
		srv, err := OpenCluster(cfg, ClusterConfig{Client: c, SessionTTL: clusterTTL, Shards: shards}, seed)
		if err != nil {
			t.Fatal(err)
		}
		ms = append(ms, &member{env: serveEnv(t, srv, fc, lis), etcd: c})
	}
	return ms
}

// owners waits until every shard is led by exactly one of ms, at most
// most shards each, every one of them agreeing on the map, and returns
// the leader of each shard.
func owners(t *testing.T, ms []*member, shards, most int) []*member {
	t.Helper()
	var own []*member
	testwait.For(t, "every shard led by one server, the servers agreeing", func() bool {
		own = make([]*member, shards)
		count := make(map[*member]int)
		for i := range shards {
			for _, m := range ms {
				if m.srv.terms.Shard(i).Get().Leading() {
					if own[i] != nil {
						return false
					}
					own[i] = m
					count[m]++
				}
			}
			if own[i] == nil {
				return false
			}
			for _, m := range ms {
				if o := m.srv.campaign.Owner(i); o.Owner != own[i].addr || o.MovingTo != "" {
					return false
				}
			}
		}
		for _, n := range count {
			if n > most {
				return false
			}
		}
		return true
	})
	return own
}

// Three servers of a cluster of 8 shards lead them all between them (at
// most 3 each): each pool's calls are answered by its shard's leader, and
// every other server answers NOT_LEADER naming it (on its Session stream
// too, which goes on); GetCluster answers the same map on every server.
// When one stops (SIGTERM), its shards move to the two others, where a
// lease held across the move is renewed.
func TestShardsClusterRoutes(t *testing.T) {
	const shards = 8
	fc := fakeclock.New(testStart)
	pools := poolsOf(shards)
	var seed []limiter.PoolConfig
	for _, p := range pools {
		seed = append(seed, limiter.PoolConfig{Name: p, ConcurrencyLimit: 4, MaxLeaseTTL: time.Minute})
	}
	ms := startShardCluster(t, etcdtest.Start(t), fc, 3, shards, seed)
	own := owners(t, ms, shards, 3)
	leases := make([]*tollgatev1.Lease, shards)
	for i, p := range pools {
		leases[i] = own[i].acquire(&tollgatev1.AcquireRequest{Pool: p, Weight: i64(1), ClientId: "holder"})
		for _, m := range others(ms, own[i]) {
			_, err := m.lim.Acquire(m.ctx(), &tollgatev1.AcquireRequest{Pool: p, Weight: i64(1)})
			st := wantStatus(t, err, codes.Unavailable, apierr.ReasonNotLeader)
			md := errorInfo(st).GetMetadata()
			if md["leader"] != own[i].addr || md["shard"] != strconv.Itoa(i) || md["epoch"] != strconv.FormatInt(own[i].srv.terms.Shard(i).Get().Epoch(), 10) {
				t.Fatalf("NOT_LEADER of shard %d from %s: %v; want leader %s", i, m.addr, md, own[i].addr)
			}
			sc := m.session()
			r := sc.call(acquireReq(1, &tollgatev1.AcquireRequest{Pool: p, Weight: i64(1)}))
			wantSessionError(t, r, codes.Unavailable, apierr.ReasonNotLeader)
			if r.GetError().GetMetadata()["leader"] != own[i].addr {
				t.Fatalf("NOT_LEADER SessionError of shard %d: %v", i, r.GetError())
			}
		}
	}
	for _, m := range ms {
		cl, err := m.adm.GetCluster(m.ctx(), &tollgatev1.GetClusterRequest{})
		if err != nil || cl.GetShardCount() != shards || len(cl.GetShards()) != shards {
			t.Fatalf("GetCluster on %s: %v, %v", m.addr, cl, err)
		}
		led := int32(0)
		for _, mem := range cl.GetMembers() {
			led += mem.GetShardsLed()
		}
		for i, o := range cl.GetShards() {
			if o.GetOwner() != own[i].addr {
				t.Fatalf("GetCluster on %s names %s the owner of shard %d; want %s", m.addr, o.GetOwner(), i, own[i].addr)
			}
		}
		if led != shards {
			t.Fatalf("GetCluster on %s: %d shards led in all; want %d", m.addr, led, shards)
		}
	}

	gone := ms[0]
	gone.stop()
	if err := <-gone.done; err != nil {
		t.Fatal(err)
	}
	gone.done <- nil
	rest := others(ms, gone)
	own = owners(t, rest, shards, 4)
	for i, p := range pools {
		resp, err := own[i].lim.Renew(own[i].ctx(), &tollgatev1.RenewRequest{Pool: p, LeaseId: leases[i].GetId(), Weight: i64(1), ClientId: "holder", ExpiryReceipt: leases[i].GetExpiryReceipt()})
		if err != nil || resp.GetLease().GetFencingToken() != leases[i].GetFencingToken() {
			t.Fatalf("renew in shard %d on %s after the stop: %v, %v", i, own[i].addr, resp, err)
		}
	}
}
