package server

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/tollgate/tollgate/internal/election"
	"github.com/tollgate/tollgate/internal/etcdtest"
	"github.com/tollgate/tollgate/internal/events"
	"github.com/tollgate/tollgate/internal/httpapi"
	"github.com/tollgate/tollgate/internal/limits"
	"github.com/tollgate/tollgate/internal/refuse"
	"github.com/tollgate/tollgate/internal/testwait"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/limiter/fakeclock"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
	"github.com/tollgate/tollgate/server/store"
)

const clusterTTL = 2 * time.Second

// member is one server of a test cluster.
type member struct {
	*env
	etcd *clientv3.Client
}

// startCluster starts n servers on etcd sharing the fake clock fc, with
// seed as their pools file.
func startCluster(t *testing.T, etcd *etcdtest.Etcd, fc *fakeclock.Clock, n int, seed []limiter.PoolConfig, opts ...func(*Config)) []*member {
	t.Helper()
	var ms []*member
	for i := 0; i < n; i++ {
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{etcd.Endpoint()}, DialTimeout: 2 * time.Second,
			Logger: zap.NewNop(), DialOptions: election.DialOptions(clusterTTL)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		lis := listen(t)
		cfg := Config{Clock: fc, ShutdownTimeout: 2 * time.Second, Advertise: lis.Addr().String()}
		for _, o := range opts {
			o(&cfg)
		}
		srv, err := OpenCluster(cfg, ClusterConfig{Client: c, SessionTTL: clusterTTL}, seed)
		if err != nil {
			t.Fatal(err)
		}
		ms = append(ms, &member{env: serveEnv(t, srv, fc, lis), etcd: c})
	}
	return ms
}

// leader waits until exactly one of ms leads, and returns it.
func leader(t *testing.T, ms []*member) *member {
	t.Helper()
	var lead *member
	testwait.For(t, "one leader", func() bool {
		n := 0
		for _, m := range ms {
			if m.srv.leadership.Leading() {
				n++
				lead = m
			}
		}
		return n == 1
	})
	return lead
}

func others(ms []*member, not *member) []*member {
	var r []*member
	for _, m := range ms {
		if m != not {
			r = append(r, m)
		}
	}
	return r
}

// crash stops m as kill -9 would, as far as etcd can tell: its etcd
// connection goes, so it neither resigns nor writes; its session expires
// by its TTL.
func (m *member) crash() {
	m.etcd.Close()
	m.stop()
	m.done <- <-m.done // for the cleanup, which checks what Serve returned
}

func TestClusterFollowersAnswerNotLeader(t *testing.T) {
	fc := fakeclock.New(testStart)
	ms := startCluster(t, etcdtest.Start(t), fc, 3, []limiter.PoolConfig{{Name: "db", ConcurrencyLimit: 2}})
	lead := leader(t, ms)
	lead.acquire(&tollgatev1.AcquireRequest{Pool: "db", Weight: i64(1)})
	epoch := lead.srv.leadership.Cluster().Epoch
	for _, f := range others(ms, lead) {
		testwait.For(t, "the follower sees the leader and every member", func() bool {
			v := f.srv.leadership.Cluster()
			return v.Leader == lead.addr && len(v.Members) == len(ms)
		})
		for _, err := range []error{
			func() error {
				_, err := f.lim.Acquire(f.ctx(), &tollgatev1.AcquireRequest{Pool: "db", Weight: i64(1)})
				return err
			}(),
			func() error {
				_, err := f.adm.GetPool(f.ctx(), &tollgatev1.GetPoolRequest{Name: "db"})
				return err
			}(),
			func() error {
				s, err := f.lim.Session(f.ctx())
				if err != nil {
					return err
				}
				_, err = s.Recv()
				return err
			}(),
		} {
			st := wantStatus(t, err, codes.Unavailable, apierr.ReasonNotLeader)
			md := errorInfo(st).GetMetadata()
			if md["leader"] != lead.addr || md["epoch"] != strconv.FormatInt(epoch, 10) {
				t.Fatalf("NOT_LEADER metadata %v, want leader %s epoch %d", md, lead.addr, epoch)
			}
			if d, ok := retryDelay(err); !ok || d <= 0 {
				t.Fatalf("NOT_LEADER without RetryInfo: %v", st)
			}
		}
		cl, err := f.adm.GetCluster(f.ctx(), &tollgatev1.GetClusterRequest{})
		if err != nil || cl.GetLeader() != lead.addr || cl.GetSelf() != f.addr || len(cl.GetMembers()) != 3 || cl.GetEpoch() != epoch || cl.GetStandalone() {
			t.Fatalf("follower's GetCluster = %v, %v", cl, err)
		}
		wantHealth(t, f, tollgatev1.LimiterService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_NOT_SERVING)
		wantHealth(t, f, "", healthpb.HealthCheckResponse_SERVING)
		// A follower's status page lists the leader's pools, with their
		// owner.
		rec := httptest.NewRecorder()
		f.srv.HTTPHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/api/pools", nil))
		var pools httpapi.PoolsResponse
		if err := json.Unmarshal(rec.Body.Bytes(), &pools); err != nil || rec.Code != http.StatusOK || pools.Total != 1 ||
			len(pools.Pools) != 1 || pools.Pools[0].Name != "db" || pools.Pools[0].Owner != lead.addr || pools.Pools[0].Status.Held != 1 {
			t.Fatalf("follower's /api/pools: %d %q (%v)", rec.Code, rec.Body.String(), err)
		}
		// The HTTP API does not answer a follower's empty engine as
		// "no leases": it names the leader.
		for _, path := range []string{"/api/pools/db/leases"} {
			rec := httptest.NewRecorder()
			f.srv.HTTPHandler().ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
			var body httpapi.NotLeaderResponse
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || rec.Code != http.StatusServiceUnavailable ||
				body.Reason != string(apierr.ReasonNotLeader) || body.Leader != lead.addr || body.Epoch != epoch || !strings.Contains(body.Error, lead.addr) {
				t.Fatalf("follower's %s: %d %q (%v)", path, rec.Code, rec.Body.String(), err)
			}
		}
	}
	for _, path := range []string{"/api/pools", "/api/pools/db/leases"} {
		rec := httptest.NewRecorder()
		lead.srv.HTTPHandler().ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"db"`) && path == "/api/pools" {
			t.Fatalf("leader's %s: %d %q", path, rec.Code, rec.Body.String())
		}
	}
	wantHealth(t, lead, tollgatev1.LimiterService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	wantHealth(t, lead, "", healthpb.HealthCheckResponse_SERVING)
	cl, err := lead.adm.GetCluster(lead.ctx(), &tollgatev1.GetClusterRequest{})
	if err != nil || cl.GetLeadershipRemaining().AsDuration() <= 0 || cl.GetLeader() != lead.addr {
		t.Fatalf("leader's GetCluster = %v, %v", cl, err)
	}
}

func wantHealth(t *testing.T, m *member, service string, want healthpb.HealthCheckResponse_ServingStatus) {
	t.Helper()
	resp, err := healthpb.NewHealthClient(m.conn).Check(m.ctx(), &healthpb.HealthCheckRequest{Service: service})
	if err != nil || resp.GetStatus() != want {
		t.Fatalf("health of %q on %s = %v, %v; want %v", service, m.addr, resp.GetStatus(), err, want)
	}
}

// A leader killed without resigning is replaced after the session TTL;
// the new leader re-adopts a lease its holder renews (same id, same
// token: lease ids stay valid across leaders), grants no more than the
// limit meanwhile, and continues fencing tokens above the old leader's.
func TestClusterTakeoverReadopts(t *testing.T) {
	fc := fakeclock.New(testStart)
	ms := startCluster(t, etcdtest.Start(t), fc, 3, []limiter.PoolConfig{{Name: "db", ConcurrencyLimit: 1, MaxLeaseTTL: time.Minute},
		{Name: "wide", ConcurrencyLimit: 16, MaxLeaseTTL: time.Minute}})
	lead := leader(t, ms)
	l := lead.acquire(&tollgatev1.AcquireRequest{Pool: "db", Weight: i64(1), Ttl: dur(30 * time.Second), ClientId: "holder"})
	lead.acquire(&tollgatev1.AcquireRequest{Pool: "wide", Weight: i64(3), Ttl: dur(30 * time.Second)})

	killed := time.Now()
	lead.crash()
	rest := others(ms, lead)
	next := leader(t, rest)
	t.Logf("take-over after a crash (session TTL %v): %v", clusterTTL, time.Since(killed))

	// A pool with headroom grants at once what the old leases cannot hold
	// (the held-weight bound: 3 held + 16/8).
	next.acquire(&tollgatev1.AcquireRequest{Pool: "wide", Weight: i64(11), NoWait: true})
	t.Logf("first new grant in a pool with headroom after a crash: %v", time.Since(killed))
	_, err := next.lim.Acquire(next.ctx(), &tollgatev1.AcquireRequest{Pool: "wide", Weight: i64(1), NoWait: true})
	wantStatus(t, err, codes.Unavailable, apierr.ReasonRecovering)

	_, err = next.lim.Acquire(next.ctx(), &tollgatev1.AcquireRequest{Pool: "db", Weight: i64(1), NoWait: true})
	wantStatus(t, err, codes.Unavailable, apierr.ReasonRecovering)

	resp, err := next.lim.Renew(next.ctx(), &tollgatev1.RenewRequest{Pool: "db", LeaseId: l.GetId(), Ttl: dur(30 * time.Second), Weight: i64(1), ClientId: "holder", ExpiryReceipt: l.GetExpiryReceipt()})
	if err != nil {
		t.Fatalf("renew on the new leader: %v", err)
	}
	if got := resp.GetLease(); got.GetId() != l.GetId() || got.GetFencingToken() != l.GetFencingToken() {
		t.Fatalf("re-adopted lease %v, want id %s token %d", got, l.GetId(), l.GetFencingToken())
	}
	t.Logf("first renew answered after a crash: %v", time.Since(killed))
	if st := next.status("db"); st.GetHeld() != 1 || st.GetReadopted() != 1 {
		t.Fatalf("after re-adoption %v", st)
	}

	// The recovery window ends: the released lease's permit is granted
	// again with a token above every earlier one.
	if _, err := next.lim.Release(next.ctx(), &tollgatev1.ReleaseRequest{Pool: "db", LeaseId: l.GetId()}); err != nil {
		t.Fatal(err)
	}
	fc.Advance(time.Minute + limiter.DefaultHorizonSlack)
	l2 := next.acquire(&tollgatev1.AcquireRequest{Pool: "db", Weight: i64(1), NoWait: true})
	if l2.GetFencingToken() <= l.GetFencingToken() {
		t.Fatalf("token %d after take-over, not above %d", l2.GetFencingToken(), l.GetFencingToken())
	}
}

// SIGTERM on the leader (the end of Serve) hands off: final write, resign;
// a follower leads well under a second later, pools that held nothing
// need no recovery window, and a pool holding leases grants at once (on
// the fake clock, which does not move: not after a TTL) all that the
// weight held at the hand-off leaves, not only what the bound written
// ahead does.
func TestClusterGracefulHandOff(t *testing.T) {
	fc := fakeclock.New(testStart)
	ms := startCluster(t, etcdtest.Start(t), fc, 2, []limiter.PoolConfig{{Name: "idle", ConcurrencyLimit: 1}, {Name: "busy", ConcurrencyLimit: 16}})
	lead := leader(t, ms)
	l := lead.acquire(&tollgatev1.AcquireRequest{Pool: "idle", Weight: i64(1)})
	if _, err := lead.lim.Release(lead.ctx(), &tollgatev1.ReleaseRequest{Pool: "idle", LeaseId: l.GetId()}); err != nil {
		t.Fatal(err)
	}
	held := lead.acquire(&tollgatev1.AcquireRequest{Pool: "busy", Weight: i64(3), ClientId: "holder"})
	gone := lead.acquire(&tollgatev1.AcquireRequest{Pool: "busy", Weight: i64(5)}) // the bound written ahead: 8 + 16/8
	if _, err := lead.lim.Release(lead.ctx(), &tollgatev1.ReleaseRequest{Pool: "busy", LeaseId: gone.GetId()}); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	lead.stop()
	if err := <-lead.done; err != nil {
		t.Fatal(err)
	}
	lead.done <- nil
	next := leader(t, others(ms, lead))
	took := time.Since(stopped)
	t.Logf("take-over after a graceful hand-off: %v", took)
	if took > clusterTTL/2 {
		t.Fatalf("hand-off took %v", took)
	}
	l2 := next.acquire(&tollgatev1.AcquireRequest{Pool: "idle", Weight: i64(1), NoWait: true})
	if l2.GetFencingToken() <= l.GetFencingToken() {
		t.Fatalf("token %d after hand-off, not above %d", l2.GetFencingToken(), l.GetFencingToken())
	}

	next.acquire(&tollgatev1.AcquireRequest{Pool: "busy", Weight: i64(13), NoWait: true}) // 16 − the 3 held
	_, err := next.lim.Acquire(next.ctx(), &tollgatev1.AcquireRequest{Pool: "busy", Weight: i64(1), NoWait: true})
	wantStatus(t, err, codes.Unavailable, apierr.ReasonRecovering)
	resp, err := next.lim.Renew(next.ctx(), &tollgatev1.RenewRequest{Pool: "busy", LeaseId: held.GetId(), Weight: i64(3), ClientId: "holder", ExpiryReceipt: held.GetExpiryReceipt()})
	if err != nil || resp.GetLease().GetFencingToken() != held.GetFencingToken() {
		t.Fatalf("renew of the lease held across the hand-off: %v, %v", resp, err)
	}
	if st := next.status("busy"); st.GetHeld() != 16 || st.GetReadopted() != 1 {
		t.Fatalf("after the hand-off and the re-adoption: %v", st)
	}
}

// A leader whose key is gone (its session expired while it could not
// tell) cannot write: the change is refused with NOT_LEADER and not made.
func TestClusterDeposedLeaderCannotWrite(t *testing.T) {
	fc := fakeclock.New(testStart)
	etcd := etcdtest.Start(t)
	ms := startCluster(t, etcd, fc, 1, nil)
	lead := leader(t, ms)
	key, _, _ := lead.srv.campaign.Election().Term()
	if _, err := lead.etcd.Delete(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	_, err := lead.adm.CreatePool(lead.ctx(), &tollgatev1.CreatePoolRequest{Pool: &tollgatev1.Pool{Name: "late", ConcurrencyLimit: 1}})
	wantStatus(t, err, codes.Unavailable, apierr.ReasonNotLeader)
	got, err := lead.etcd.Get(context.Background(), DefaultEtcdPrefix+"pools/late")
	if err != nil || len(got.Kvs) != 0 {
		t.Fatalf("the deposed leader's pool is in etcd: %v, %v", got.Kvs, err)
	}
}

// With etcd gone the leader stops at its deadline: calls are refused.
// When etcd is back it leads again, in a new term that is a restart: the
// old term's lease is not counted against its client any more (it is gone
// with the old engine, unless its holder renews it).
func TestClusterEtcdLost(t *testing.T) {
	fc := fakeclock.New(testStart)
	etcd := etcdtest.Start(t)
	ms := startCluster(t, etcd, fc, 1, []limiter.PoolConfig{{Name: "db", ConcurrencyLimit: 5}},
		func(c *Config) { c.Limits = limits.Limits{MaxClientLeases: 1} })
	lead := leader(t, ms)
	lead.acquire(&tollgatev1.AcquireRequest{Pool: "db", Weight: i64(1), ClientId: "x"})
	waiting := make(chan error, 1)
	go func() { // does not fit: waits in the queue
		_, err := lead.lim.Acquire(lead.ctx(), &tollgatev1.AcquireRequest{Pool: "db", Weight: i64(5)})
		waiting <- err
	}()
	testwait.For(t, "the acquire waits", func() bool { return lead.status("db").GetWaiting() == 1 })
	sess, err := lead.lim.Session(lead.ctx())
	if err != nil {
		t.Fatal(err)
	}
	etcd.Stop()
	testwait.For(t, "leadership lost", func() bool { return !lead.srv.leadership.Leading() })
	wantStatus(t, <-waiting, codes.Unavailable, apierr.ReasonNotLeader)
	_, err = sess.Recv()
	wantStatus(t, err, codes.Unavailable, apierr.ReasonNotLeader)
	_, err = lead.lim.Acquire(lead.ctx(), &tollgatev1.AcquireRequest{Pool: "db", Weight: i64(1)})
	wantStatus(t, err, codes.Unavailable, apierr.ReasonNotLeader)
	wantHealth(t, lead, tollgatev1.LimiterService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_NOT_SERVING)
	if n := poolCount(lead.srv); n != 0 {
		t.Fatalf("a server that does not lead serves %d pools", n)
	}
	etcd.Restart()
	leader(t, ms)
	if n := poolCount(lead.srv); n != 1 {
		t.Fatalf("the new term serves %d pools", n)
	}
	lead.acquire(&tollgatev1.AcquireRequest{Pool: "db", Weight: i64(1), ClientId: "x", NoWait: true})
	// The new term is a restart: the lease of the old one may be live.
	_, err = lead.lim.Acquire(lead.ctx(), &tollgatev1.AcquireRequest{Pool: "db", Weight: i64(4), NoWait: true})
	wantStatus(t, err, codes.Unavailable, apierr.ReasonRecovering)
	fc.Advance(time.Minute)
	lead.acquire(&tollgatev1.AcquireRequest{Pool: "db", Weight: i64(4), NoWait: true})
}

func poolCount(s *Server) int {
	pools, _ := s.Engine().ListPools("", 1000)
	return len(pools)
}

// From the leadership deadline on, before the campaign ends the term, the
// term's engine is frozen: a lease that falls due does not expire (no
// event, no grant to the acquires waiting), and health says NOT_SERVING
// at once. The waiting calls end NOT_LEADER with the term.
func TestClusterFrozenPastTheDeadline(t *testing.T) {
	fc := fakeclock.New(testStart)
	ms := startCluster(t, etcdtest.Start(t), fc, 1, []limiter.PoolConfig{{Name: "db", ConcurrencyLimit: 1}})
	lead := leader(t, ms)
	lead.acquire(&tollgatev1.AcquireRequest{Pool: "db", Weight: i64(1), Ttl: dur(time.Second)})
	unary := make(chan error, 1)
	go func() {
		_, err := lead.lim.Acquire(lead.ctx(), &tollgatev1.AcquireRequest{Pool: "db", Weight: i64(1)})
		unary <- err
	}()
	sc := lead.session()
	sc.send(&tollgatev1.SessionRequest{RequestId: 1, Kind: &tollgatev1.SessionRequest_Acquire{Acquire: &tollgatev1.AcquireRequest{Pool: "db", Weight: i64(1)}}})
	testwait.For(t, "two acquires wait", func() bool { return lead.status("db").GetWaiting() == 2 })

	before := lead.srv.RecentEvents()[0].Seq
	lead.srv.campaign.Lapse() // the deadline passed; the term has not ended yet
	for _, svc := range []string{tollgatev1.LimiterService_ServiceDesc.ServiceName, tollgatev1.AdminService_ServiceDesc.ServiceName} {
		wantHealth(t, lead, svc, healthpb.HealthCheckResponse_NOT_SERVING)
	}
	fc.Advance(time.Minute) // the lease falls due: a live engine would end it and grant a waiter
	for _, ev := range lead.srv.RecentEvents() {
		if ev.Seq > before && ev.Pool != "" {
			t.Errorf("the frozen term recorded %s %s %s %s", ev.Type, ev.Pool, ev.LeaseID, ev.Detail)
		}
	}
	select {
	case err := <-unary:
		t.Fatalf("the waiting acquire was answered past the deadline: %v", err)
	default:
	}
	lead.stop() // the term ends: the waits end NOT_LEADER (or shutting down)
	if err := <-unary; status.Code(err) != codes.Unavailable {
		t.Fatalf("the waiting acquire ended with %v; want UNAVAILABLE", err)
	}
}

// NOT_LEADER means nothing was applied. A change applied (its fenced
// write committed) when the term ends before the answer keeps its answer;
// a failure then becomes NOT_LEADER, unless its outcome is unknown.
func TestClusterNotLeaderMeansNothingApplied(t *testing.T) {
	info := &grpc.UnaryServerInfo{FullMethod: tollgatev1.AdminService_UpdatePool_FullMethodName}
	req := &tollgatev1.UpdatePoolRequest{Pool: &tollgatev1.Pool{Name: "db", ConcurrencyLimit: 7}, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"concurrency_limit"}}}
	// lapsed runs the call, through the leadership gate, on a new leader
	// whose deadline passes once handle returns.
	lapsed := func(handle func(*member, context.Context) (any, error)) (*member, error) {
		lead := leader(t, startCluster(t, etcdtest.Start(t), fakeclock.New(testStart), 1, []limiter.PoolConfig{{Name: "db", ConcurrencyLimit: 1}}))
		_, err := lead.srv.leaderUnary(lead.ctx(), req, info, func(ctx context.Context, req any) (any, error) {
			return lead.srv.auditUnary(ctx, req, info, func(ctx context.Context, _ any) (any, error) {
				defer lead.srv.campaign.Lapse()
				return handle(lead, ctx)
			})
		})
		return lead, err
	}
	lead, err := lapsed(func(m *member, ctx context.Context) (any, error) { return m.srv.adminSvc.UpdatePool(ctx, req) })
	if err != nil {
		t.Fatalf("a change applied just before the deadline was answered %v", err)
	}
	got, err := lead.etcd.Get(context.Background(), DefaultEtcdPrefix+"pools/db")
	if err != nil || len(got.Kvs) != 1 {
		t.Fatalf("reading the pool from etcd: %v, %v", got, err)
	}
	sp, err := store.DecodeRecord([]byte("db"), got.Kvs[0].Value)
	if err != nil || sp.Config.ConcurrencyLimit != 7 {
		t.Fatalf("the pool in etcd: %+v, %v; want the change applied", sp.Config, err)
	}
	for _, ev := range lead.srv.RecentEvents() {
		if ev.Type == events.PoolUpdated {
			t.Errorf("the deposed server published %s of %s: the change is the successor's to report", ev.Type, ev.Pool)
		}
	}
	for _, tc := range []struct {
		err  *apierr.Error
		want apierr.Reason
	}{
		{&apierr.Error{Code: apierr.CodeUnavailable, Reason: apierr.ReasonShuttingDown, Message: "closing"}, apierr.ReasonNotLeader},
		{&apierr.Error{Code: apierr.CodeUnavailable, Reason: apierr.ReasonOutcomeUnknown, Message: "no answer"}, apierr.ReasonOutcomeUnknown},
	} {
		_, err := lapsed(func(*member, context.Context) (any, error) { return nil, refuse.StatusOf(tc.err, refuse.About{}).Err() })
		wantStatus(t, err, codes.Unavailable, tc.want)
	}
}
