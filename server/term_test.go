package server

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/tollgate/tollgate/internal/etcdtest"
	"github.com/tollgate/tollgate/internal/term"
	"github.com/tollgate/tollgate/internal/testwait"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/limiter/fakeclock"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// heldIn is the weight held in pool on eng.
func heldIn(t *testing.T, eng *limiter.Engine, pool string) int64 {
	t.Helper()
	st, err := eng.PoolStats(pool)
	if err != nil {
		t.Fatal(err)
	}
	return st.Status.Held
}

// A unary call uses the term it started in, whatever the server serves
// once it runs: a call that started in a term that ended (here by a
// take-over, which is a restart: the server's etcd session goes, and it
// leads again, in a new term with a new engine) is answered NOT_LEADER,
// and grants nothing from the next term's engine.
func TestClusterCallKeepsItsTerm(t *testing.T) {
	fc := fakeclock.New(testStart)
	lead := leader(t, startCluster(t, etcdtest.Start(t), fc, 1, []limiter.PoolConfig{{Name: "db", ConcurrencyLimit: 16}}))
	info := &grpc.UnaryServerInfo{FullMethod: tollgatev1.LimiterService_Acquire_FullMethodName}
	req := &tollgatev1.AcquireRequest{Pool: "db", Weight: i64(1), NoWait: true}
	first := lead.srv.terms.Get()
	var next *term.Term
	_, err := lead.srv.leaderUnary(lead.ctx(), req, info, func(ctx context.Context, req any) (any, error) {
		key, _, ok := lead.srv.campaign.Election().Term()
		id, err := strconv.ParseInt(key[strings.LastIndex(key, "/")+1:], 16, 64)
		if !ok || err != nil {
			t.Fatalf("campaign key %q: %v", key, err)
		}
		if _, err := lead.etcd.Revoke(context.Background(), clientv3.LeaseID(id)); err != nil {
			t.Fatal(err)
		}
		testwait.For(t, "the server leads again, in a new term", func() bool {
			next = lead.srv.terms.Get()
			return next != first && next.Leading()
		})
		return lead.srv.limiterSvc.Acquire(ctx, req.(*tollgatev1.AcquireRequest))
	})
	wantStatus(t, err, codes.Unavailable, apierr.ReasonNotLeader)
	if held := heldIn(t, next.Engine(), "db"); held != 0 {
		t.Fatalf("the call of the ended term holds %d in the next term's engine", held)
	}
	lead.acquire(req) // a new call gets the new term
	if held := heldIn(t, next.Engine(), "db"); held != 1 {
		t.Fatalf("a call of the new term: %d held in its engine, want 1", held)
	}
}

// leadingView is a Leadership that leads (while leading says so) a
// cluster of one.
type leadingView struct {
	self    string
	leading atomic.Bool
}

func (l *leadingView) Leading() bool { return l.leading.Load() }
func (l *leadingView) Cluster() ClusterView {
	return ClusterView{Self: l.self, Members: []string{l.self}, Leader: l.self, Epoch: 1}
}

// A Session stream uses the term it started in: once that term stops
// leading, a request still read on it is answered from that term's
// engine or not at all (the stream ends NOT_LEADER, and the grant it could
// not deliver is released), never from the engine of the term the server
// serves next; a new stream gets the new term.
func TestSessionKeepsItsTerm(t *testing.T) {
	fc := fakeclock.New(testStart)
	lis := listen(t)
	l := &leadingView{self: lis.Addr().String()}
	l.leading.Store(true)
	srv := New(Config{Clock: fc, ShutdownTimeout: 2 * time.Second, Leadership: l, Advertise: l.self})
	e := serveEnv(t, srv, fc, lis)
	e.createPool(&tollgatev1.Pool{Name: "db", ConcurrencyLimit: 4})
	first := srv.terms.Get()
	t.Cleanup(first.Engine().Close) // the server closes the engine it serves last
	sc := e.session()
	if r := sc.call(acquireReq(1, &tollgatev1.AcquireRequest{Pool: "db", Weight: i64(1)})); r.GetAcquire().GetLease() == nil {
		t.Fatalf("the first acquire was answered %v", r)
	}

	// The next term is served while the stream's term has stopped
	// leading but has not ended: the stream's next request comes then.
	next, err := term.New(2, nil, func(func() bool) (*limiter.Engine, error) { return srv.newEngine(nil, nil), nil })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := next.Engine().CreatePool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: 4}); err != nil {
		t.Fatal(err)
	}
	next.Begin()
	first.Lapse()
	srv.terms.Serve(next)
	sc.send(acquireReq(2, &tollgatev1.AcquireRequest{Pool: "db", Weight: i64(1)}))
	wantStatus(t, sc.wantEnd(), codes.Unavailable, apierr.ReasonNotLeader)
	if held := heldIn(t, next.Engine(), "db"); held != 0 {
		t.Fatalf("the stream of the first term holds %d in the next term's engine", held)
	}
	if held := heldIn(t, first.Engine(), "db"); held != 1 {
		t.Fatalf("the first term's engine holds %d; want the first grant only (the undelivered one released)", held)
	}
	if r := e.session().call(acquireReq(1, &tollgatev1.AcquireRequest{Pool: "db", Weight: i64(1)})); r.GetAcquire().GetLease() == nil {
		t.Fatalf("an acquire on a new stream was answered %v", r)
	}
	if held := heldIn(t, next.Engine(), "db"); held != 1 {
		t.Fatalf("a stream of the new term: %d held in its engine, want 1", held)
	}
}
