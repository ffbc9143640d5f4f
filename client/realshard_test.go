package client_test

import (
	"context"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/tollgate/tollgate/client"
	"github.com/tollgate/tollgate/internal/election"
	"github.com/tollgate/tollgate/internal/etcdtest"
	"github.com/tollgate/tollgate/limiter"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/proto/tollgate/v1/shard"
	"github.com/tollgate/tollgate/server"
)

// realMember is one server of a real sharded cluster on etcd.
type realMember struct {
	addr     string
	etcd     *clientv3.Client
	srv      *server.Server
	stop     context.CancelFunc
	done     chan error
	sessions atomic.Int64 // Session streams open
}

// startReal starts a server of a cluster of shards shards on etcd, with
// seed as its pools file, and counts its open Session streams.
func startReal(t *testing.T, etcd *etcdtest.Etcd, shards int, seed []limiter.PoolConfig) *realMember {
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{etcd.Endpoint()}, DialTimeout: 2 * time.Second,
		Logger: zap.NewNop(), DialOptions: election.DialOptions(2 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := &realMember{addr: lis.Addr().String(), etcd: c, done: make(chan error, 1)}
	m.srv, err = server.OpenCluster(server.Config{ShutdownTimeout: 2 * time.Second, Advertise: m.addr},
		server.ClusterConfig{Client: c, SessionTTL: 2 * time.Second, Shards: shards}, seed)
	if err != nil {
		t.Fatal(err)
	}
	count := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		if info.FullMethod == tollgatev1.LimiterService_Session_FullMethodName {
			m.sessions.Add(1)
			defer m.sessions.Add(-1)
		}
		return h(srv, ss)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m.stop = cancel
	gs := m.srv.GRPCServer(grpc.ChainStreamInterceptor(count))
	go func() { m.done <- m.srv.ServeGRPC(ctx, gs, lis) }()
	t.Cleanup(func() {
		cancel()
		if err := <-m.done; err != nil {
			t.Logf("server %s: %v", m.addr, err)
		}
	})
	return m
}

// TestRealShardedCluster routes by a real cluster's map, keeps one
// stream per server, and keeps a held lease across a SIGTERM'd owner's
// hand-off and a killed owner's expiry.
func TestRealShardedCluster(t *testing.T) {
	etcd := etcdtest.Start(t)
	const shards = 8
	var seed []limiter.PoolConfig
	for i := range 16 {
		seed = append(seed, limiter.PoolConfig{Name: "pool-" + strconv.Itoa(i), ConcurrencyLimit: 4})
	}
	var ms []*realMember
	for range 3 {
		ms = append(ms, startReal(t, etcd, shards, seed))
	}
	c := dialTarget(t, ms[0].addr)
	adm := tollgatev1.NewAdminServiceClient(c.Conn())
	owners := func() map[int]string {
		cl, err := adm.GetCluster(ctx(t), &tollgatev1.GetClusterRequest{})
		if err != nil {
			return nil
		}
		o := make(map[int]string)
		for _, s := range cl.GetShards() {
			if s.GetOwner() != "" && s.GetMovingTo() == "" {
				o[int(s.GetShard())] = s.GetOwner()
			}
		}
		return o
	}
	waitFor(t, "every shard owned, by all three servers", func() bool {
		o := owners()
		led := map[string]bool{}
		for _, a := range o {
			led[a] = true
		}
		return len(o) == shards && len(led) == 3
	})
	for _, p := range seed {
		l, err := c.Acquire(ctx(t), p.Name)
		if err != nil {
			t.Fatalf("acquire %s: %v", p.Name, err)
		}
		if err := l.Release(ctx(t)); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "one session per server", func() bool {
		for _, m := range ms {
			if m.sessions.Load() != 1 {
				return false
			}
		}
		return true
	})

	// Hold a lease in a pool of a shard of server 2, then stop server 2
	// (SIGTERM: it hands its shards off).
	o := owners()
	var pool string
	for _, p := range seed {
		if o[shard.Of(p.Name, shards)] == ms[2].addr {
			pool = p.Name
			break
		}
	}
	l, err := c.Acquire(ctx(t), pool, client.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	token := l.FencingToken()
	start := time.Now()
	ms[2].stop()
	if err := <-ms[2].done; err != nil {
		t.Logf("server stopped: %v", err)
	}
	ms[2].done <- nil
	t.Logf("stopped in %v", time.Since(start))
	waitFor(t, "shard moved", func() bool {
		a := owners()[shard.Of(pool, shards)]
		return a != "" && a != ms[2].addr
	})
	t.Logf("map moved %v after the stop", time.Since(start))
	astart := time.Now()
	l2, err := c.Acquire(ctx(t), pool, client.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("a new grant %v after the stop (the acquire took %v)", time.Since(start), time.Since(astart))
	expiry := l.Expiry()
	waitFor(t, "the held lease renewed at the new owner", func() bool { return l.Expiry().After(expiry) })
	if err := l.Err(); err != nil {
		t.Fatalf("lease lost: %v", err)
	}
	if l.FencingToken() != token || l2.FencingToken() <= token {
		t.Errorf("tokens: held %d (was %d), new %d", l.FencingToken(), token, l2.FencingToken())
	}
	_ = l2.Release(ctx(t))
	_ = l.Release(ctx(t))

	// kill -9 of server 1, as etcd sees it: its etcd connection goes first
	// (no hand-off, no resignation), then it stops serving.
	o = owners()
	pool = ""
	for _, p := range seed {
		if o[shard.Of(p.Name, shards)] == ms[1].addr {
			pool = p.Name
			break
		}
	}
	l, err = c.Acquire(ctx(t), pool, client.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	token = l.FencingToken()
	start = time.Now()
	ms[1].etcd.Close()
	ms[1].stop()
	if err := <-ms[1].done; err != nil {
		t.Logf("server stopped: %v", err)
	}
	ms[1].done <- nil
	expiry = l.Expiry()
	waitFor(t, "the held lease renewed at the dead server's successor", func() bool { return l.Expiry().After(expiry) || l.Err() != nil })
	t.Logf("renewed %v after the kill", time.Since(start))
	if err := l.Err(); err != nil {
		t.Fatalf("lease lost: %v", err)
	}
	if l.FencingToken() != token {
		t.Errorf("token %d, was %d", l.FencingToken(), token)
	}
	_ = l.Release(ctx(t))
}
