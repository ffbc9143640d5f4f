package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"

	"github.com/tollgate/tollgate/internal/cluster"
	"github.com/tollgate/tollgate/internal/etcdtest"
	"github.com/tollgate/tollgate/internal/httpapi"
	"github.com/tollgate/tollgate/internal/term"
	"github.com/tollgate/tollgate/internal/testwait"
	"github.com/tollgate/tollgate/limiter/fakeclock"
	commonv3 "github.com/tollgate/tollgate/proto/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/tollgate/tollgate/proto/envoy/service/ratelimit/v3"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
	"github.com/tollgate/tollgate/proto/tollgate/v1/shard"
	"github.com/tollgate/tollgate/server/store/etcdstore"
)

// shardView is a Leadership of a cluster of several shards (and its
// ShardOwners): this server and "other:1", each leading the shards owners
// names. Whether this server leads a shard is its term's to say.
type shardView struct {
	self   string
	mu     sync.Mutex
	owners []cluster.Owner
}

func (l *shardView) Leading() bool { return true }
func (l *shardView) Cluster() ClusterView {
	return ClusterView{Self: l.self, Members: []string{l.self, "other:1"}, Leader: l.self, Epoch: 10}
}

func (l *shardView) Owner(i int) cluster.Owner {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.owners[i]
}

func (l *shardView) Map() []cluster.Owner {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]cluster.Owner(nil), l.owners...)
}

// shardEnv is a server of a cluster of n shards on a real etcd whose host
// (the campaign's part) the test drives: it starts and ends the terms of
// the shards itself.
type shardEnv struct {
	*env
	h     *terms
	etcd  *clientv3.Client
	terms []*term.Term // the term started last of each shard; nil: none
}

const shardPrefix = "/shards-test/"

// startShards serves n shards, of which this server leads those in led
// (epoch 100+i) and "other:1" the others (epoch 200+i).
func startShards(t *testing.T, n int, led ...int) *shardEnv {
	t.Helper()
	return startShardsWith(t, Config{}, n, led...)
}

// startShardsWith is startShards for a server of cfg (its clock,
// leadership and address set here).
func startShardsWith(t *testing.T, cfg Config, n int, led ...int) *shardEnv {
	t.Helper()
	etcd := etcdtest.Start(t)
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{etcd.Endpoint()}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	lis := listen(t)
	self := lis.Addr().String()
	l := &shardView{self: self}
	isLed := make(map[int]bool)
	for _, i := range led {
		isLed[i] = true
	}
	for i := range n {
		o := cluster.Owner{Shard: i, Owner: "other:1", Epoch: int64(200 + i)}
		if isLed[i] {
			o.Owner, o.Epoch = self, int64(100+i)
		}
		l.owners = append(l.owners, o)
	}
	fc := fakeclock.New(testStart)
	cfg.Clock, cfg.ShutdownTimeout, cfg.Leadership, cfg.Advertise = fc, 2*time.Second, l, self
	srv := New(cfg)
	se := &shardEnv{h: srv.hostShards(n, nil, shardPrefix), etcd: c, terms: make([]*term.Term, n)}
	for _, i := range led {
		se.start(t, i)
	}
	t.Cleanup(func() {
		for i, tm := range se.terms {
			if tm != nil {
				se.h.EndTerm(i, tm, false)
			}
		}
	})
	se.env = serveEnv(t, srv, fc, lis)
	return se
}

// start starts a term of shard i, as the campaign does.
func (se *shardEnv) start(t *testing.T, i int) *term.Term {
	t.Helper()
	tm, err := se.h.StartTerm(i, se.store(t, i), int64(100+i), nil)
	if err != nil {
		t.Fatal(err)
	}
	tm.Begin()
	se.terms[i] = tm
	return tm
}

// store is a store of a term of shard i, its writes fenced on a key of
// its own, as on the campaign key of a leadership.
func (se *shardEnv) store(t *testing.T, i int) *etcdstore.Store {
	key := fmt.Sprintf("%sfence/%d/%d", shardPrefix, i, time.Now().UnixNano())
	put, err := se.etcd.Put(context.Background(), key, "")
	if err != nil {
		t.Error(err)
	}
	return etcdstore.New(se.etcd, shardPrefix, etcdstore.Options{LeaderKey: key, LeaderRev: put.Header.Revision})
}

// end ends shard i's term, as the campaign does.
func (se *shardEnv) end(i int) {
	tm := se.terms[i]
	se.terms[i] = nil
	tm.End()
	se.h.EndTerm(i, tm, false)
}

// poolsOf returns a pool name of each shard of n, the name of shard i
// first in its list.
func poolsOf(n int) []string {
	names := make([]string, n)
	for k := 0; ; k++ {
		name := "pool-" + strconv.Itoa(k)
		if i := shard.Of(name, n); names[i] == "" {
			names[i] = name
		}
		full := true
		for _, nm := range names {
			full = full && nm != ""
		}
		if full {
			return names
		}
	}
}

// wantNotLeaderOf checks that err is NOT_LEADER naming shard i's leader
// "other:1" and its epoch.
func wantNotLeaderOf(t *testing.T, err error, i int) {
	t.Helper()
	st := wantStatus(t, err, codes.Unavailable, apierr.ReasonNotLeader)
	md := errorInfo(st).GetMetadata()
	if md["shard"] != strconv.Itoa(i) || md["leader"] != "other:1" || md["epoch"] != strconv.Itoa(200+i) {
		t.Fatalf("NOT_LEADER metadata %v; want shard %d, leader other:1, epoch %d", md, i, 200+i)
	}
	if d, ok := retryDelay(err); !ok || d <= 0 {
		t.Fatalf("NOT_LEADER without RetryInfo: %v", st)
	}
}

// wantSessionNotLeaderOf checks that r is a NOT_LEADER SessionError
// naming shard i's leader "other:1" and its epoch.
func wantSessionNotLeaderOf(t *testing.T, r *tollgatev1.SessionResponse, i int) {
	t.Helper()
	wantSessionError(t, r, codes.Unavailable, apierr.ReasonNotLeader)
	md := r.GetError().GetMetadata()
	if md["shard"] != strconv.Itoa(i) || md["leader"] != "other:1" || md["epoch"] != strconv.Itoa(200+i) || r.GetError().GetRetryAfter() == nil {
		t.Fatalf("NOT_LEADER SessionError %v; want shard %d, leader other:1, epoch %d and a retry delay", r.GetError(), i, 200+i)
	}
}

// A server that leads shards 0 and 2 of 4 answers the calls for the pools
// of those shards, each from its shard's term, and those for the pools of
// shards 1 and 3 NOT_LEADER naming their leader, before anything is
// applied; the calls about no pool read the shards it leads.
func TestShardsServeTheirPoolsOnly(t *testing.T) {
	se := startShards(t, 4, 0, 2)
	pools := poolsOf(4)
	for _, i := range []int{0, 2} {
		se.createPool(&tollgatev1.Pool{Name: pools[i], ConcurrencyLimit: 2, Rate: 10, Burst: 10})
		se.acquire(&tollgatev1.AcquireRequest{Pool: pools[i], Weight: i64(1)})
		if held := heldIn(t, se.terms[i].Engine(), pools[i]); held != 1 {
			t.Fatalf("shard %d's engine holds %d of its pool; want 1", i, held)
		}
	}
	if _, err := se.lim.Report(se.ctx(), &tollgatev1.ReportRequest{Reports: []*tollgatev1.PoolReport{
		{Pool: pools[0], Successes: 1}, {Pool: pools[2], Successes: 1}}}); err != nil {
		t.Fatalf("a report on the pools of two shards led here: %v", err)
	}
	for _, i := range []int{1, 3} {
		p := pools[i]
		for name, call := range map[string]func() error{
			"CreatePool": func() error {
				_, err := se.adm.CreatePool(se.ctx(), &tollgatev1.CreatePoolRequest{Pool: &tollgatev1.Pool{Name: p, ConcurrencyLimit: 1}})
				return err
			},
			"GetPool": func() error {
				_, err := se.adm.GetPool(se.ctx(), &tollgatev1.GetPoolRequest{Name: p})
				return err
			},
			"Acquire": func() error {
				_, err := se.lim.Acquire(se.ctx(), &tollgatev1.AcquireRequest{Pool: p, Weight: i64(1)})
				return err
			},
			"Take": func() error {
				_, err := se.lim.Take(se.ctx(), &tollgatev1.TakeRequest{Pool: p, Tokens: i64(1)})
				return err
			},
			"SuspendPool": func() error {
				_, err := se.adm.SuspendPool(se.ctx(), &tollgatev1.SuspendPoolRequest{Name: p})
				return err
			},
			"ListLeases": func() error {
				_, err := se.adm.ListLeases(se.ctx(), &tollgatev1.ListLeasesRequest{Pool: p})
				return err
			},
			"GetStats": func() error {
				_, err := se.adm.GetStats(se.ctx(), &tollgatev1.GetStatsRequest{Pool: p})
				return err
			},
			"Report": func() error { // one pool led here, one not: nothing counted
				_, err := se.lim.Report(se.ctx(), &tollgatev1.ReportRequest{Reports: []*tollgatev1.PoolReport{{Pool: pools[0], Successes: 1}, {Pool: p, Successes: 1}}})
				return err
			},
		} {
			t.Run(fmt.Sprintf("%s shard %d", name, i), func(t *testing.T) { wantNotLeaderOf(t, call(), i) })
		}
		resp, err := se.etcd.Get(context.Background(), shardPrefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range resp.Kvs {
			if strings.Contains(string(kv.Key), p) {
				t.Fatalf("a refused call wrote %s", kv.Key)
			}
		}
		rec := httptest.NewRecorder()
		se.srv.HTTPHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/api/pools/"+p+"/leases", nil))
		var body httpapi.NotLeaderResponse
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || rec.Code != http.StatusServiceUnavailable ||
			body.Leader != "other:1" || body.Epoch != int64(200+i) {
			t.Fatalf("the leases of a pool of shard %d over HTTP: %d %s", i, rec.Code, rec.Body)
		}
	}

	// The calls about no pool read the pools of the shards led here.
	list, err := se.adm.ListPools(se.ctx(), &tollgatev1.ListPoolsRequest{PageSize: 1})
	if err != nil || len(list.GetPools()) != 1 || list.GetNextPageToken() == "" {
		t.Fatalf("ListPools page 1 = %v, %v", list, err)
	}
	rest, err := se.adm.ListPools(se.ctx(), &tollgatev1.ListPoolsRequest{PageToken: list.GetNextPageToken()})
	if err != nil || len(rest.GetPools()) != 1 || rest.GetNextPageToken() != "" {
		t.Fatalf("ListPools page 2 = %v, %v", rest, err)
	}
	got := []string{list.GetPools()[0].GetName(), rest.GetPools()[0].GetName()}
	want := []string{pools[0], pools[2]}
	if want[0] > want[1] {
		want[0], want[1] = want[1], want[0]
	}
	if got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("ListPools lists %v; want %v, in name order", got, want)
	}
	stats, err := se.adm.GetStats(se.ctx(), &tollgatev1.GetStatsRequest{})
	if err != nil || len(stats.GetStats()) != 2 {
		t.Fatalf("GetStats = %v, %v; want the two pools led here", stats, err)
	}
	rec := httptest.NewRecorder()
	se.srv.HTTPHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/api/pools", nil))
	var pl httpapi.PoolsResponse
	if err := json.Unmarshal(rec.Body.Bytes(), &pl); err != nil || rec.Code != http.StatusOK || pl.Total != 2 || len(pl.Pools) != 2 {
		t.Fatalf("/api/pools: %d %s", rec.Code, rec.Body)
	}

	cl, err := se.adm.GetCluster(se.ctx(), &tollgatev1.GetClusterRequest{})
	if err != nil || cl.GetShardCount() != 4 || len(cl.GetShards()) != 4 {
		t.Fatalf("GetCluster = %v, %v", cl, err)
	}
	for i, o := range cl.GetShards() {
		owner, epoch := "other:1", int64(200+i)
		if i%2 == 0 {
			owner, epoch = se.addr, int64(100+i)
		}
		if o.GetShard() != int32(i) || o.GetOwner() != owner || o.GetEpoch() != epoch {
			t.Fatalf("GetCluster's shard %d: %v; want owner %s epoch %d", i, o, owner, epoch)
		}
	}
	for _, m := range cl.GetMembers() {
		if m.GetShardsLed() != 2 || m.GetRole() != tollgatev1.ClusterRole_CLUSTER_ROLE_LEADER {
			t.Fatalf("GetCluster's member %v; want each leading 2 shards", m)
		}
	}
}

// A Session stream carries requests for the pools of every shard: each
// takes its pool's shard's term when it comes; a request for a shard not
// led here is answered NOT_LEADER naming its leader, and the stream goes
// on. When shard 2's term ends, the stream still serves shard 0, answers
// shard 2's requests NOT_LEADER, and a request that took shard 2's term
// before it ended never touches the next term's engine; the stream ends
// once the server leads no shard.
func TestShardsSessionAcrossShards(t *testing.T) {
	se := startShards(t, 4, 0, 2)
	pools := poolsOf(4)
	se.createPool(&tollgatev1.Pool{Name: pools[0], ConcurrencyLimit: 4})
	se.createPool(&tollgatev1.Pool{Name: pools[2], ConcurrencyLimit: 1, MaxLeaseTtl: dur(time.Hour)})
	sc := se.session()
	l0 := sc.call(acquireReq(1, &tollgatev1.AcquireRequest{Pool: pools[0], Weight: i64(1)})).GetAcquire().GetLease()
	l2 := sc.call(acquireReq(2, &tollgatev1.AcquireRequest{Pool: pools[2], Weight: i64(1), Ttl: dur(time.Minute)})).GetAcquire().GetLease()
	if l0 == nil || l2 == nil {
		t.Fatalf("the acquires in shards 0 and 2 were granted %v and %v", l0, l2)
	}
	wantSessionNotLeaderOf(t, sc.call(acquireReq(3, &tollgatev1.AcquireRequest{Pool: pools[1], Weight: i64(1)})), 1)
	wantSessionNotLeaderOf(t, sc.call(takeReq(4, &tollgatev1.TakeRequest{Pool: pools[3], Tokens: i64(1)})), 3)

	// This acquire takes shard 2's term and waits in it (its pool is full).
	sc.send(acquireReq(5, &tollgatev1.AcquireRequest{Pool: pools[2], Weight: i64(1)}))
	old := se.terms[2]
	testwait.For(t, "the acquire waits in shard 2", func() bool {
		st, err := old.Engine().PoolStats(pools[2])
		return err == nil && st.Status.Waiting == 1
	})
	se.owners(t, 2, cluster.Owner{Shard: 2, Owner: "other:1", Epoch: 202}) // it moves
	se.end(2)
	wantSessionNotLeaderOf(t, sc.next(), 2) // request 5, failed by the end of its term
	if r := sc.call(renewReq(6, pools[0], l0.GetId(), time.Minute)); r.GetRenew().GetLease() == nil {
		t.Fatalf("a renew in shard 0 once shard 2's term ended: %v", r)
	}
	wantSessionNotLeaderOf(t, sc.call(renewReq(7, pools[2], l2.GetId(), time.Minute)), 2)

	// Shard 2 is led here again, in a new term: the stream's renew
	// re-adopts the lease there; the acquire of the ended term holds
	// nothing in it.
	se.owners(t, 2, cluster.Owner{Shard: 2, Owner: se.addr, Epoch: 302})
	next := se.start(t, 2)
	if held := heldIn(t, next.Engine(), pools[2]); held != 0 {
		t.Fatalf("the next term of shard 2 holds %d before any renew", held)
	}
	readopt := renewReq(8, pools[2], l2.GetId(), time.Minute)
	readopt.GetRenew().Weight, readopt.GetRenew().ExpiryReceipt = i64(1), l2.GetExpiryReceipt() // as the Go client sends them
	if r := sc.call(readopt); r.GetRenew().GetLease() == nil {
		t.Fatalf("a renew in shard 2's next term: %v", r)
	}
	if held := heldIn(t, next.Engine(), pools[2]); held != 1 {
		t.Fatalf("shard 2's next term holds %d; want the re-adopted lease only", held)
	}

	se.end(0)
	se.end(2)
	wantStatus(t, sc.wantEnd(), codes.Unavailable, apierr.ReasonNotLeader)
}

// owners sets who leads shard i, as the campaign would see it.
func (se *shardEnv) owners(t *testing.T, i int, o cluster.Owner) {
	t.Helper()
	l := se.srv.leadership.(*shardView)
	l.mu.Lock()
	l.owners[i] = o
	l.mu.Unlock()
}

// Hostile Session requests: an empty or huge pool name is refused
// INVALID_ARGUMENT whatever its shard; a burst of requests for shards not
// led here is answered, each NOT_LEADER, with no goroutine left behind.
func TestShardsSessionHostile(t *testing.T) {
	se := startShards(t, 4, 0)
	pools := poolsOf(4)
	se.createPool(&tollgatev1.Pool{Name: pools[0], ConcurrencyLimit: 1})
	sc := se.session()
	wantSessionError(t, sc.call(acquireReq(1, &tollgatev1.AcquireRequest{Pool: "", Weight: i64(1)})), codes.InvalidArgument, apierr.ReasonInvalidArgument)
	huge := strings.Repeat("p", 512<<10)
	wantSessionError(t, sc.call(acquireReq(2, &tollgatev1.AcquireRequest{Pool: huge, Weight: i64(1)})), codes.InvalidArgument, apierr.ReasonInvalidArgument)
	wantSessionError(t, sc.call(renewReq(3, huge, "x", time.Minute)), codes.InvalidArgument, apierr.ReasonInvalidArgument)

	before := runtime.NumGoroutine()
	const burst = 5000
	for k := range burst {
		sc.send(acquireReq(uint64(10+k), &tollgatev1.AcquireRequest{Pool: pools[1+k%3], Weight: i64(1)}))
	}
	for range burst {
		r := sc.next()
		i := 1 + int(r.GetRequestId()-10)%3
		wantSessionNotLeaderOf(t, r, i)
	}
	if after := runtime.NumGoroutine(); after > before+10 {
		t.Fatalf("%d goroutines after a burst of %d refused requests; %d before", after, burst, before)
	}
	if r := sc.call(acquireReq(1, &tollgatev1.AcquireRequest{Pool: pools[0], Weight: i64(1)})); r.GetAcquire().GetLease() == nil {
		t.Fatalf("after the burst, an acquire in shard 0 was answered %v", r)
	}
}

// The campaign may start and end the terms of different shards at once:
// the host serves each shard's own, and the server leads exactly the
// shards whose term runs.
func TestShardsHostStartsAndEndsConcurrently(t *testing.T) {
	se := startShards(t, 8)
	pools := poolsOf(8)
	var wg sync.WaitGroup
	started := make([]*term.Term, 8)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range 3 {
				tm, err := se.h.StartTerm(i, se.store(t, i), int64(100+i), nil)
				if err != nil {
					t.Error(err)
					return
				}
				tm.Begin()
				if k == 2 && i%2 == 0 {
					started[i] = tm
					return
				}
				tm.End()
				se.h.EndTerm(i, tm, k%2 == 0)
			}
		}()
	}
	wg.Wait()
	for i := range 8 {
		got := se.srv.terms.Shard(i).Get()
		if i%2 == 0 && (got != started[i] || !got.Leading()) || i%2 == 1 && got.Leading() {
			t.Fatalf("shard %d serves %v (leading %v)", i, got, got.Leading())
		}
		if i%2 == 0 {
			se.terms[i] = got
		}
		_, err := se.adm.GetPool(se.ctx(), &tollgatev1.GetPoolRequest{Name: pools[i]})
		if i%2 == 0 {
			wantStatus(t, err, codes.NotFound, apierr.ReasonPoolNotFound)
		} else {
			wantNotLeaderOf(t, err, i)
		}
	}
}

// Envoy's rate-limit calls are answered by a server that leads every
// shard, each descriptor from its pool's shard's engine; a server that
// does not lead every shard answers NOT_LEADER (the pools its
// descriptors match may be of a shard it does not lead).
func TestShardsEnvoy(t *testing.T) {
	pools := poolsOf(4)
	envoyPool := func(name, key string) *tollgatev1.Pool {
		return &tollgatev1.Pool{Name: name, Rate: 0.01, Burst: 1,
			Envoy: &tollgatev1.EnvoyRule{Domain: "edge", Descriptors: []*tollgatev1.EnvoyDescriptorKey{{Key: key}}}}
	}
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{
		{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "k0", Value: "v"}}},
		{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "k2", Value: "v"}}}}}

	all := startShardsWith(t, Config{EnvoyRLS: true}, 4, 0, 1, 2, 3)
	all.createPool(envoyPool(pools[0], "k0"))
	all.createPool(envoyPool(pools[2], "k2"))
	rls := rlsv3.NewRateLimitServiceClient(all.conn)
	for k, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		resp, err := rls.ShouldRateLimit(all.ctx(), req)
		if err != nil || resp.GetOverallCode() != want || len(resp.GetStatuses()) != 2 ||
			resp.GetStatuses()[0].GetCode() != want || resp.GetStatuses()[1].GetCode() != want {
			t.Fatalf("call %d: %v, %v; want both descriptors %v", k, resp, err, want)
		}
	}

	some := startShardsWith(t, Config{EnvoyRLS: true}, 4, 0, 2)
	_, err := rlsv3.NewRateLimitServiceClient(some.conn).ShouldRateLimit(some.ctx(), req)
	wantNotLeaderOf(t, err, 1)
}
