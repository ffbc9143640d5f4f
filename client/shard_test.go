package client_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tollgate/tollgate/client"
	"github.com/tollgate/tollgate/internal/cluster"
	"github.com/tollgate/tollgate/limiter"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/proto/tollgate/v1/shard"
)

// shardMap is the shard map of a fake sharded cluster: several front ends
// (shardFront) over one engine, each serving only the pools of the shards
// the map gives it and answering the others NOT_LEADER as a sharded server
// does (cluster.NotLeader). A move is a change of the map: the lease stays
// in the one engine, so what is tested is where the client sends.
type shardMap struct {
	mu     sync.Mutex
	count  int
	owner  []string
	epoch  []int64
	moving []string
	// providePool, when set, is the pool of every Provide stream: a
	// server that does not serve it ends the stream at once, NOT_LEADER,
	// without reading the registration.
	providePool string
	// hint, when set, answers instead of the map for the pools it knows
	// (ok): a hostile or buggy server.
	hint func(self, pool string) (leader string, epoch int64, ok bool)
}

func newShardMap(count int, owners ...string) *shardMap {
	m := &shardMap{count: count, owner: make([]string, count), epoch: make([]int64, count), moving: make([]string, count)}
	for i := range count {
		m.owner[i], m.epoch[i] = owners[i%len(owners)], 10
	}
	return m
}

// route says whether self serves pool, and if not the NOT_LEADER hint.
func (m *shardMap) route(self, pool string) (mine bool, leader string, epoch int64, sh int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	sh = shard.Of(pool, m.count)
	if m.hint != nil {
		if leader, epoch, ok := m.hint(self, pool); ok {
			return false, leader, epoch, sh
		}
	}
	if m.owner[sh] == self && m.moving[sh] == "" {
		return true, "", 0, sh
	}
	leader, epoch = m.owner[sh], m.epoch[sh]
	if m.moving[sh] != "" {
		leader, epoch = m.moving[sh], 0
	}
	if leader == self {
		leader = ""
	}
	return false, leader, epoch, sh
}

// move starts a planned move of shard sh to addr (the owner answers
// NOT_LEADER naming it, epoch 0), or with done completes it.
func (m *shardMap) move(sh int, addr string, done bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if done {
		m.owner[sh], m.moving[sh] = addr, ""
		m.epoch[sh] += 5
	} else {
		m.moving[sh] = addr
	}
}

func (m *shardMap) cluster(self string) *tollgatev1.GetClusterResponse {
	m.mu.Lock()
	defer m.mu.Unlock()
	resp := &tollgatev1.GetClusterResponse{Self: self, ShardCount: int32(m.count)}
	for i := range m.count {
		resp.Shards = append(resp.Shards, &tollgatev1.ShardOwner{Shard: int32(i), Owner: m.owner[i], Epoch: m.epoch[i], MovingTo: m.moving[i]})
	}
	return resp
}

// shardFront is one server of the fake cluster.
type shardFront struct {
	addr      string
	m         *shardMap
	notLeader atomic.Int64 // NOT_LEADER answers given
	live      atomic.Int64 // Session streams open
	opened    atomic.Int64 // Session streams opened
	// frozen makes the server take requests and answer none (SIGSTOP).
	frozen atomic.Bool
	stop   func() // stops the server (kill -9)
	// stale, when set, is the map it answers GetCluster with (a server
	// cut off from etcd).
	stale   atomic.Pointer[tollgatev1.GetClusterResponse]
	mu      sync.Mutex
	served  map[string]int // "acquire p", "renew p", ...: requests passed to the engine
	refused map[string]int // the same, answered NOT_LEADER
}

func (f *shardFront) count(kind, pool string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.served[kind+" "+pool]
}

// newShardCluster starts n front ends over ts's engine and a map of count
// shards spread over them in turn.
func newShardCluster(t *testing.T, ts *testServer, n, count int) (*shardMap, []*shardFront) {
	t.Helper()
	var lis []net.Listener
	var addrs []string
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lis = append(lis, l)
		addrs = append(addrs, l.Addr().String())
	}
	m := newShardMap(count, addrs...)
	var fronts []*shardFront
	for i, l := range lis {
		f := &shardFront{addr: addrs[i], m: m, served: make(map[string]int), refused: make(map[string]int)}
		gs := ts.srv.GRPCServer(grpc.ChainUnaryInterceptor(f.unary), grpc.ChainStreamInterceptor(f.stream))
		served := make(chan struct{})
		go func() {
			defer close(served)
			_ = gs.Serve(l)
		}()
		t.Cleanup(func() {
			gs.Stop()
			<-served
		})
		f.stop = gs.Stop
		fronts = append(fronts, f)
	}
	return m, fronts
}

func (f *shardFront) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if f.frozen.Load() {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if info.FullMethod == tollgatev1.AdminService_GetCluster_FullMethodName {
		if stale := f.stale.Load(); stale != nil {
			return stale, nil
		}
		return f.m.cluster(f.addr), nil
	}
	return h(ctx, req)
}

func (f *shardFront) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if info.FullMethod == tollgatev1.LimiterService_Provide_FullMethodName {
		f.m.mu.Lock()
		pool := f.m.providePool
		f.m.mu.Unlock()
		if pool != "" {
			mine, leader, epoch, sh := f.m.route(f.addr, pool)
			if !mine {
				f.notLeader.Add(1)
				return cluster.NotLeader(f.addr, cluster.Owner{Shard: sh, Owner: leader, Epoch: epoch})
			}
			f.mu.Lock()
			f.served["provide "+pool]++
			f.mu.Unlock()
		}
	}
	if info.FullMethod != tollgatev1.LimiterService_Session_FullMethodName {
		return h(srv, ss)
	}
	f.opened.Add(1)
	f.live.Add(1)
	defer f.live.Add(-1)
	return h(srv, &shardStream{ServerStream: ss, f: f})
}

// shardStream answers NOT_LEADER, on the stream, the requests for pools
// its server does not serve, and passes the others to the server.
type shardStream struct {
	grpc.ServerStream
	f  *shardFront
	mu sync.Mutex // SendMsg: the server's writer and RecvMsg both send
}

func (s *shardStream) SendMsg(m any) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ServerStream.SendMsg(m)
}

func (s *shardStream) RecvMsg(m any) error {
	for {
		if err := s.ServerStream.RecvMsg(m); err != nil {
			return err
		}
		if s.f.frozen.Load() {
			<-s.Context().Done()
			return s.Context().Err()
		}
		req := m.(*tollgatev1.SessionRequest)
		if b := req.GetBatch(); b != nil {
			var kept []*tollgatev1.SessionRequest
			for _, r := range b.GetRequests() {
				if !s.refuse(r) {
					kept = append(kept, r)
				}
			}
			if len(kept) == 0 {
				continue
			}
			b.Requests = kept
			return nil
		}
		if !s.refuse(req) {
			return nil
		}
	}
}

// refuse answers r NOT_LEADER if its pool is not its server's, and
// reports whether it did; else it counts r as served.
func (s *shardStream) refuse(r *tollgatev1.SessionRequest) bool {
	kind, pools := requestPools(r)
	var mine bool
	var leader string
	var epoch int64
	var sh int
	for _, pool := range pools {
		if mine, leader, epoch, sh = s.f.m.route(s.f.addr, pool); !mine {
			break
		}
	}
	if mine || len(pools) == 0 {
		s.f.mu.Lock()
		for _, pool := range pools {
			s.f.served[kind+" "+pool]++
		}
		s.f.mu.Unlock()
		return false
	}
	s.f.notLeader.Add(1)
	s.f.mu.Lock()
	for _, pool := range pools {
		s.f.refused[kind+" "+pool]++
	}
	s.f.mu.Unlock()
	_ = s.SendMsg(&tollgatev1.SessionResponse{RequestId: r.GetRequestId(), Kind: &tollgatev1.SessionResponse_Error{Error: &tollgatev1.SessionError{
		Code: int32(codes.Unavailable), Reason: "NOT_LEADER", Message: fmt.Sprintf("%s does not lead shard %d", s.f.addr, sh),
		RetryAfter: durationpb.New(20 * time.Millisecond),
		Metadata:   map[string]string{"leader": leader, "epoch": strconv.FormatInt(epoch, 10), "shard": strconv.Itoa(sh)},
	}}})
	return true
}

// requestPools returns the kind of a Session request ("acquire", "renew",
// "report", ...) and the pools it names.
func requestPools(r *tollgatev1.SessionRequest) (kind string, pools []string) {
	if rep := r.GetReport(); rep != nil {
		for _, pr := range rep.GetReports() {
			pools = append(pools, pr.GetPool())
		}
		return "report", pools
	}
	m := r.ProtoReflect()
	fd := m.WhichOneof(m.Descriptor().Oneofs().ByName("kind"))
	if fd == nil || fd.Message() == nil {
		return "", nil
	}
	sub := m.Get(fd).Message()
	pf := sub.Descriptor().Fields().ByName("pool")
	if pf == nil {
		return string(fd.Name()), nil
	}
	return string(fd.Name()), []string{sub.Get(pf).String()}
}

// shardPools returns, for each front end, a pool name whose shard it owns
// under m at the start.
func shardPools(t *testing.T, m *shardMap, fronts []*shardFront) []string {
	t.Helper()
	pools := make([]string, len(fronts))
	for i := 0; i < 1000; i++ {
		p := "pool-" + strconv.Itoa(i)
		for k, f := range fronts {
			if pools[k] == "" && m.owner[shard.Of(p, m.count)] == f.addr {
				pools[k] = p
			}
		}
	}
	for k, p := range pools {
		if p == "" {
			t.Fatalf("no pool of server %d", k)
		}
	}
	return pools
}

func TestShardedCallsGoToTheirShardsOwner(t *testing.T) {
	ts := newTestServer(t)
	m, fronts := newShardCluster(t, ts, 3, 8)
	pools := shardPools(t, m, fronts)
	for _, p := range pools {
		ts.pool(limiter.PoolConfig{Name: p, ConcurrencyLimit: 10, Rate: 1000, Burst: 100})
	}
	c := dialTarget(t, fronts[0].addr) // one address: it learns the others from the map

	for _, p := range pools {
		l, err := c.Acquire(ctx(t), p)
		if err != nil {
			t.Fatalf("acquire %s: %v", p, err)
		}
		if err := l.Release(ctx(t)); err != nil {
			t.Fatal(err)
		}
	}
	// Routed now: no more NOT_LEADER; every call at its shard's owner.
	var before int64
	for _, f := range fronts {
		before += f.notLeader.Load()
	}
	for k, p := range pools {
		acq := fronts[k].count("acquire", p)
		l, err := c.Acquire(ctx(t), p)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Take(ctx(t), p, 1); err != nil {
			t.Fatal(err)
		}
		if err := l.ReleaseAsync(); err != nil {
			t.Fatal(err)
		}
		if got := fronts[k].count("acquire", p); got != acq+1 {
			t.Errorf("pool %s: its owner served %d acquires, want %d", p, got-acq, 1)
		}
		if got := fronts[k].count("take", p); got < 1 {
			t.Errorf("pool %s: its owner served no take", p)
		}
		lim, err := c.NewLimiter(p, 10)
		if err != nil {
			t.Fatal(err)
		}
		if err := lim.Wait(ctx(t)); err != nil {
			t.Fatal(err)
		}
		if got := fronts[k].count("acquire_share", p); got != 1 {
			t.Errorf("pool %s: its owner served %d rate share acquires, want 1", p, got)
		}
		_ = lim.Close()
		c.Report(p, client.OutcomeSuccess, time.Millisecond)
	}
	// Reports of pools of several shards are split by shard.
	for k, p := range pools {
		waitFor(t, "the report of "+p+" at its owner", func() bool { return fronts[k].count("report", p) > 0 })
	}
	var after int64
	for _, f := range fronts {
		after += f.notLeader.Load()
	}
	if after != before {
		t.Errorf("%d NOT_LEADER answers once the map was known, want 0", after-before)
	}
	// One Session stream per server used (the dialed target's first one
	// ended when the map was learned).
	waitFor(t, "one live session per server", func() bool {
		for _, f := range fronts {
			if f.live.Load() != 1 {
				return false
			}
		}
		return true
	})
	if n := client.Links(c); n != 3 {
		t.Errorf("%d server links, want 3", n)
	}
}

func TestShardMoveKeepsTheLease(t *testing.T) {
	ts := newTestServer(t)
	m, fronts := newShardCluster(t, ts, 2, 4)
	pools := shardPools(t, m, fronts)
	p, from, to := pools[0], fronts[0], fronts[1]
	sh := shard.Of(p, m.count)
	ts.pool(limiter.PoolConfig{Name: p, ConcurrencyLimit: 2})
	c := dialTarget(t, from.addr, to.addr)

	l, err := c.Acquire(ctx(t), p, client.WithTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	token := l.FencingToken()
	if from.count("acquire", p) != 1 {
		t.Fatalf("the owner served %d acquires, want 1", from.count("acquire", p))
	}

	// A planned move: the owner refuses, naming the target, which does not
	// lead yet; an acquire made meanwhile waits, then lands at the target.
	m.move(sh, to.addr, false)
	acquired := make(chan error, 1)
	go func() {
		l2, err := c.Acquire(ctx(t), p, client.WithTTL(3*time.Second))
		if err == nil {
			err = l2.Release(ctx(t))
		}
		acquired <- err
	}()
	waitFor(t, "the move's NOT_LEADER answers", func() bool { return from.notLeader.Load() > 0 && to.notLeader.Load() > 0 })
	m.move(sh, to.addr, true)
	if err := <-acquired; err != nil {
		t.Fatalf("acquire across the move: %v", err)
	}
	if to.count("acquire", p) != 1 {
		t.Errorf("the new owner served %d acquires, want 1", to.count("acquire", p))
	}

	// The held lease is renewed at the new owner, keeping its token.
	expiry := l.Expiry()
	waitFor(t, "a renew at the new owner", func() bool { return to.count("renew", p) > 0 && l.Expiry().After(expiry) })
	if err := l.Err(); err != nil {
		t.Fatalf("lease lost across the move: %v", err)
	}
	if l.FencingToken() != token {
		t.Errorf("fencing token %d, was %d", l.FencingToken(), token)
	}
	renewsAtOld := from.count("renew", p)
	notLeader := from.notLeader.Load() + to.notLeader.Load()
	l3, err := c.Acquire(ctx(t), p)
	if err != nil {
		t.Fatal(err)
	}
	if to.count("acquire", p) != 2 || from.notLeader.Load()+to.notLeader.Load() != notLeader {
		t.Errorf("a new acquire after the move: %d at the new owner (want 2), %d NOT_LEADER (want 0)",
			to.count("acquire", p), from.notLeader.Load()+to.notLeader.Load()-notLeader)
	}
	_ = l3.ReleaseAsync()
	if err := l.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if got := from.count("renew", p); got != renewsAtOld {
		t.Errorf("%d renews at the old owner after the move", got-renewsAtOld)
	}
	if n := client.Links(c); n > 2 {
		t.Errorf("%d server links, want at most 2", n)
	}
}

// deadAddr returns a loopback address where nothing listens.
func deadAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

func TestShardHostileHintsDoNotSpin(t *testing.T) {
	for _, tc := range []struct {
		name string
		hint func(dead string, fronts []*shardFront) func(self, pool string) (string, int64, bool)
	}{
		{"names itself", func(_ string, _ []*shardFront) func(string, string) (string, int64, bool) {
			return func(self, _ string) (string, int64, bool) { return self, 99, true }
		}},
		{"names nobody", func(_ string, _ []*shardFront) func(string, string) (string, int64, bool) {
			return func(string, string) (string, int64, bool) { return "", 0, true }
		}},
		{"names a dead server", func(dead string, _ []*shardFront) func(string, string) (string, int64, bool) {
			return func(string, string) (string, int64, bool) { return dead, 99, true }
		}},
		{"flaps", func(_ string, fronts []*shardFront) func(string, string) (string, int64, bool) {
			return func(self, _ string) (string, int64, bool) {
				if self == fronts[0].addr {
					return fronts[1].addr, 0, true
				}
				return fronts[0].addr, 0, true
			}
		}},
		{"names ever newer servers", func(_ string, _ []*shardFront) func(string, string) (string, int64, bool) {
			var n atomic.Int64
			return func(string, string) (string, int64, bool) {
				i := n.Add(1)
				return "127.0.0.1:" + strconv.FormatInt(1+i%200, 10), 100 + i, true
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := newTestServer(t)
			m, fronts := newShardCluster(t, ts, 2, 4)
			pools := shardPools(t, m, fronts)
			ts.pool(limiter.PoolConfig{Name: pools[0], ConcurrencyLimit: 2})
			c := dialTarget(t, fronts[0].addr)
			// Learn the map first, on a pool served as it says.
			ts.pool(limiter.PoolConfig{Name: pools[1], ConcurrencyLimit: 2})
			l, err := c.Acquire(ctx(t), pools[1])
			if err != nil {
				t.Fatal(err)
			}
			_ = l.ReleaseAsync()
			m.mu.Lock()
			hint := tc.hint(deadAddr(t), fronts)
			m.hint = func(self, pool string) (string, int64, bool) {
				if pool != pools[0] {
					return "", 0, false
				}
				return hint(self, pool)
			}
			m.mu.Unlock()

			const wait = 1500 * time.Millisecond
			cctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			start := time.Now()
			_, err = c.Acquire(cctx, pools[0])
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("acquire: %v, want the context's deadline", err)
			}
			if d := time.Since(start); d > wait+time.Second {
				t.Errorf("acquire returned %v after its deadline", d-wait)
			}
			// Each NOT_LEADER is followed by a pause of retryBackoff (25ms
			// doubling, capped by the answer's 20ms retry delay after a
			// hint that moves the shard): at most some tens within 1.5s, not
			// thousands.
			var answers int64
			for _, f := range fronts {
				answers += f.notLeader.Load()
			}
			t.Logf("%d NOT_LEADER answers in %v", answers, wait)
			if answers > 40 {
				t.Errorf("%d NOT_LEADER answers in %v: the client spins", answers, wait)
			}
			if n := client.Links(c); n > 3 {
				t.Errorf("%d server links, want at most 3 (the two servers and one named)", n)
			}
			// Once the servers answer as the map says, the client finds
			// the owner again, whatever epoch the bad hints claimed.
			m.mu.Lock()
			m.hint = nil
			m.mu.Unlock()
			if _, err := c.Acquire(ctx(t), pools[0]); err != nil {
				t.Fatalf("acquire after the bad hints stopped: %v", err)
			}
		})
	}
}

func TestOneShardKeepsTheDialedPath(t *testing.T) {
	ts := newTestServer(t)
	ts.pool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: 2})
	c := ts.dial()
	l, err := c.Acquire(ctx(t), "db")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the map read", func() bool { return client.ShardCount(c) == 1 })
	if err := l.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if n := ts.sessions.Load(); n != 1 {
		t.Errorf("%d Session streams opened, want 1", n)
	}
	if n := client.Links(c); n != 0 {
		t.Errorf("%d server links, want 0", n)
	}
}

// During a planned move the server the shard moves to does not lead it
// until the old owner's hand-off is through, and until then names the old
// owner, as a real server does (its map still shows it). The client waits
// at the target instead of going back to the old owner, which would only
// name the target again: the old owner answers one NOT_LEADER, however
// long the hand-off takes, and the acquire lands at the target.
func TestShardMoveWaitsAtItsTarget(t *testing.T) {
	ts := newTestServer(t)
	m, fronts := newShardCluster(t, ts, 2, 4)
	pools := shardPools(t, m, fronts)
	p, from, to := pools[0], fronts[0], fronts[1]
	sh := shard.Of(p, m.count)
	ts.pool(limiter.PoolConfig{Name: p, ConcurrencyLimit: 2})
	c := dialTarget(t, from.addr, to.addr)
	l, err := c.Acquire(ctx(t), p)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}

	m.mu.Lock()
	m.hint = func(self, pool string) (string, int64, bool) {
		if self == to.addr && shard.Of(pool, m.count) == sh && m.moving[sh] != "" {
			return from.addr, m.epoch[sh], true // the target knows only the old owner yet
		}
		return "", 0, false
	}
	m.mu.Unlock()
	m.move(sh, to.addr, false)
	acquired := make(chan error, 1)
	go func() {
		l2, err := c.Acquire(ctx(t), p)
		if err == nil {
			err = l2.Release(ctx(t))
		}
		acquired <- err
	}()
	waitFor(t, "the target's answers to the acquire during the hand-off", func() bool {
		to.mu.Lock()
		defer to.mu.Unlock()
		return to.refused["acquire "+p] >= 4
	})
	m.move(sh, to.addr, true)
	if err := <-acquired; err != nil {
		t.Fatalf("acquire across the move: %v", err)
	}
	from.mu.Lock()
	n := from.refused["acquire "+p]
	from.mu.Unlock()
	if n != 1 {
		t.Errorf("the old owner answered the acquire NOT_LEADER %d times during the move; want 1 (it went back there)", n)
	}
	if testing.Verbose() {
		t.Logf("NOT_LEADER: old owner %v, target %v", from.refused, to.refused)
	}
	if to.count("acquire", p) != 1 {
		t.Errorf("the new owner served %d acquires, want 1", to.count("acquire", p))
	}
}
