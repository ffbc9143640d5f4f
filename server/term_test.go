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
	first := lead.srv.terms.Shard(0).Get()
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
			next = lead.srv.terms.Shard(0).Get()
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

// Each request of a Session stream uses the term its pool's shard served
// when it came: a request that took a term that then stopped leading is
// answered from that term's engine or NOT_LEADER (here: an acquire that
// waited in it, whose wait the end of its term fails), never from the
// engine of the term the server serves next; the stream goes on, and its
// next request takes the new term.
func TestSessionKeepsItsTerm(t *testing.T) {
	fc := fakeclock.New(testStart)
	lis := listen(t)
	l := &leadingView{self: lis.Addr().String()}
	l.leading.Store(true)
	srv := New(Config{Clock: fc, ShutdownTimeout: 2 * time.Second, Leadership: l, Advertise: l.self})
	e := serveEnv(t, srv, fc, lis)
	e.createPool(&tollgatev1.Pool{Name: "db", ConcurrencyLimit: 1})
	first := srv.terms.Shard(0).Get()
	t.Cleanup(first.Engine().Close) // the server closes the engine it serves last
	sc := e.session()
	if r := sc.call(acquireReq(1, &tollgatev1.AcquireRequest{Pool: "db", Weight: i64(1)})); r.GetAcquire().GetLease() == nil {
		t.Fatalf("the first acquire was answered %v", r)
	}
	sc.send(acquireReq(2, &tollgatev1.AcquireRequest{Pool: "db", Weight: i64(1)})) // waits in the first term
	testwait.For(t, "the second acquire waits", func() bool { return heldIn(t, first.Engine(), "db") == 1 && e.status("db").GetWaiting() == 1 })

	// The next term is served once the first has stopped leading; the
	// first then ends, which fails its waits (as EndTerm does).
	next, err := term.New(2, nil, func(func() bool) (*limiter.Engine, error) { return srv.newEngine(nil, nil), nil })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := next.Engine().CreatePool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: 4}); err != nil {
		t.Fatal(err)
	}
	next.Begin()
	first.Lapse()
	srv.terms.Serve(0, next)
	first.Engine().StopWaits()
	first.Engine().Close()
	r := sc.next()
	wantSessionError(t, r, codes.Unavailable, apierr.ReasonNotLeader)
	if r.GetRequestId() != 2 || r.GetError().GetMetadata()["shard"] != "0" || r.GetError().GetRetryAfter() == nil {
		t.Fatalf("the waiting acquire was answered %v; want NOT_LEADER of shard 0, with a retry delay", r)
	}
	if held := heldIn(t, next.Engine(), "db"); held != 0 {
		t.Fatalf("a request of the first term holds %d in the next term's engine", held)
	}
	// The stream goes on: its next request takes the next term.
	if r := sc.call(acquireReq(3, &tollgatev1.AcquireRequest{Pool: "db", Weight: i64(1)})); r.GetAcquire().GetLease() == nil {
		t.Fatalf("an acquire after the change of term was answered %v", r)
	}
	if held := heldIn(t, next.Engine(), "db"); held != 1 {
		t.Fatalf("a request of the new term: %d held in its engine, want 1", held)
	}
}
