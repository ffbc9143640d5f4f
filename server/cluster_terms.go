package server

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tollgate/tollgate/internal/election"
	"github.com/tollgate/tollgate/internal/events"
	"github.com/tollgate/tollgate/internal/leaseid"
	"github.com/tollgate/tollgate/limiter"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/server/store/etcdstore"
)

// Defaults of ClusterConfig.
const (
	DefaultEtcdPrefix = "/tollgate/"
	DefaultSessionTTL = 5 * time.Second
)

// ClusterConfig configures a server of a cluster (OpenCluster).
type ClusterConfig struct {
	// Client reaches etcd; OpenCluster's Server does not close it. Build it
	// with election.DialOptions(SessionTTL) so that it reconnects quickly.
	Client *clientv3.Client
	// Prefix is where the cluster's keys live in etcd; "" means
	// DefaultEtcdPrefix.
	Prefix string
	// SessionTTL is the etcd session's TTL (whole seconds): a leader that
	// dies is replaced after about that long. 0 means DefaultSessionTTL.
	SessionTTL time.Duration
	// Margin is taken off the leadership deadline; 0 means SessionTTL/4.
	Margin time.Duration
}

// cluster runs a server's campaign and its leadership terms: each term
// serves a new engine restored from etcd, as a restart would.
type cluster struct {
	s       *Server
	el      *election.Election
	client  *clientv3.Client
	prefix  string
	ttl     time.Duration
	seed    []limiter.PoolConfig
	idle    *limiter.Engine // closed and empty: served between terms
	deposed chan *term      // a term whose fenced write failed
	quit    chan struct{}
	done    chan struct{}
	stopped sync.Once
	changes atomic.Int64 // leadership gained or lost

	mu   sync.Mutex
	term *term // nil while not leading
}

// term is one leadership term.
type term struct {
	key   string // our campaign key
	epoch int64  // its create revision
	eng   *limiter.Engine
	done  chan struct{} // closed when the term ends
	live  atomic.Bool
}

// OpenCluster returns a Server of a cluster of servers sharing etcd. It
// campaigns for leadership at once; while it leads, it serves an engine
// restored from etcd (every pool in its recovery window, fencing tokens
// above every earlier leader's), every write fenced on its leadership;
// while it follows, every call but GetCluster is answered UNAVAILABLE
// (NOT_LEADER) naming the leader. seed is written to etcd by the first
// leader only. cfg.Advertise is required; cfg.Leadership is set.
func OpenCluster(cfg Config, cc ClusterConfig, seed []limiter.PoolConfig) (*Server, error) {
	if cc.Client == nil || cfg.Advertise == "" {
		return nil, errors.New("a server of a cluster needs an etcd client and its advertised address")
	}
	if cc.Prefix == "" {
		cc.Prefix = DefaultEtcdPrefix
	}
	if cc.SessionTTL == 0 {
		cc.SessionTTL = DefaultSessionTTL
	}
	for _, c := range seed { // fail now, not at the first term
		if _, err := limiter.NewSavedPool(c, time.Time{}); err != nil {
			return nil, fmt.Errorf("pools file: pool %q: %w", c.Name, err)
		}
	}
	key, err := etcdstore.New(cc.Client, cc.Prefix, etcdstore.Options{}).LeaseIDKey()
	if err != nil {
		return nil, err
	}
	c := &cluster{client: cc.Client, prefix: cc.Prefix, ttl: cc.SessionTTL, seed: seed,
		deposed: make(chan *term, 1), quit: make(chan struct{}), done: make(chan struct{})}
	cfg.Leadership = c
	s := New(cfg)
	c.s = s
	s.cluster = c
	s.ids = leaseid.New(key) // shared by every server: ids stay valid across leaders
	c.idle = s.Engine()
	c.idle.Close() // served, without pools, while no term runs
	c.el, err = election.Start(election.Config{Client: cc.Client, Prefix: cc.Prefix + "election/", Advertise: cfg.Advertise,
		TTL: cc.SessionTTL, Margin: cc.Margin, Logger: s.log})
	if err != nil {
		return nil, err
	}
	s.metrics.Registry().MustRegister(c.collectors()...)
	go c.run()
	return s, nil
}

// Leading reports whether this server leads and serves a term.
func (c *cluster) Leading() bool {
	t := c.current()
	if t == nil || !t.live.Load() {
		return false
	}
	key, epoch, ok := c.el.Term()
	return ok && key == t.key && epoch == t.epoch
}

// Cluster describes the cluster as this server last read it.
func (c *cluster) Cluster() ClusterView {
	v := c.el.View()
	cv := ClusterView{Self: c.s.advertise, Members: v.Members, Leader: v.Leader, Epoch: v.Epoch}
	if c.Leading() {
		cv.Remaining = c.el.Remaining()
	}
	return cv
}

func (c *cluster) current() *term {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.term
}

// termDone is closed when the current term ends (already closed when none
// runs): streams end on it.
func (c *cluster) termDone() <-chan struct{} {
	if t := c.current(); t != nil {
		return t.done
	}
	return closedChan
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// run starts and ends terms as the election and the store say, until stop.
func (c *cluster) run() {
	defer close(c.done)
	var dead struct {
		key   string
		epoch int64
	}
	for {
		changed := c.el.Changed()
		key, epoch, ok := c.el.Term()
		if t := c.current(); t != nil && (!ok || key != t.key || epoch != t.epoch) {
			c.endTerm(t, false, "leadership lost")
		}
		var retry <-chan time.Time
		if c.current() == nil && ok && (key != dead.key || epoch != dead.epoch) {
			if err := c.startTerm(key, epoch); err != nil {
				c.s.log.Error("leading, but cannot load the pools from etcd; retrying", "err", err)
				retry = time.After(c.ttl / 3)
			}
		}
		c.s.setHealth()
		select {
		case <-changed:
		case <-retry:
		case t := <-c.deposed:
			if t == c.current() {
				dead.key, dead.epoch = t.key, t.epoch
				c.endTerm(t, false, "a fenced write failed: another server leads")
			}
		case <-c.quit:
			return
		}
	}
}

// startTerm restores a new engine from etcd and serves it.
func (c *cluster) startTerm(key string, epoch int64) error {
	t := &term{key: key, epoch: epoch, done: make(chan struct{})}
	st := etcdstore.New(c.client, c.prefix, etcdstore.Options{LeaderKey: key, LeaderRev: epoch, Leading: c.el.Leading,
		Deposed: func() {
			select {
			case c.deposed <- t:
			default:
			}
		}})
	eng := c.s.newEngine(st)
	if err := c.s.restore(eng, st, c.seed, "etcd", c.prefix); err != nil {
		eng.Close()
		return err
	}
	t.eng = eng
	c.s.engines.Add(1)
	c.s.engine.Store(eng)
	c.mu.Lock()
	c.term = t
	c.mu.Unlock()
	t.live.Store(true)
	c.changes.Add(1)
	c.s.recordEvent(events.Event{Type: events.LeaderChanged,
		Detail: fmt.Sprintf("%s leads, epoch %d", c.s.advertise, epoch)})
	return nil
}

// endTerm stops serving t: no call starts on it, its streams end with
// NOT_LEADER, its waiting calls fail and its engine closes. handOff
// makes the final fenced write (recording the pools that hold nothing,
// so that the successor needs no recovery window for them).
func (c *cluster) endTerm(t *term, handOff bool, why string) {
	t.live.Store(false)
	c.mu.Lock()
	c.term = nil
	c.mu.Unlock()
	close(t.done)
	t.eng.StopWaits()
	t.eng.Close()
	if handOff {
		t.eng.RecordCleanStop()
	}
	c.s.engines.Add(1)
	c.s.engine.Store(c.idle)  // followers serve no pools: not even the last term's
	c.s.quotas.ForgetLeases() // its leases are gone with its engine
	c.changes.Add(1)
	c.s.setHealth()
	c.s.recordEvent(events.Event{Type: events.LeaderChanged,
		Detail: fmt.Sprintf("%s stopped leading epoch %d: %s", c.s.advertise, t.epoch, why)})
}

// stop ends the campaign: a term running is handed off (its final
// write made) and the session resigned, so that another server leads at
// once.
func (c *cluster) stop() {
	c.stopped.Do(func() {
		close(c.quit)
		<-c.done
		if t := c.current(); t != nil {
			c.endTerm(t, true, "shutting down")
		}
		ctx, cancel := context.WithTimeout(context.Background(), c.ttl)
		defer cancel()
		if err := c.el.Resign(ctx); err != nil {
			c.s.log.Warn("could not resign; another server leads once the session expires", "err", err)
		}
	})
}

// collectors are the leadership's metrics.
func (c *cluster) collectors() []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tollgate_leader",
			Help: "1 while this server leads its cluster, else 0."}, func() float64 {
			if c.Leading() {
				return 1
			}
			return 0
		}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tollgate_leader_changes_total",
			Help: "Times this server started or stopped leading."}, func() float64 { return float64(c.changes.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tollgate_leadership_remaining_seconds",
			Help: "Time left on this server's leadership deadline (0 when it does not lead)."}, func() float64 {
			if !c.Leading() {
				return 0
			}
			return c.el.Remaining().Seconds()
		}),
	}
}

// notLeader is the answer of a server that does not lead: UNAVAILABLE
// (NOT_LEADER) with the leader's address and epoch and when to retry.
func (s *Server) notLeader() error {
	v := s.leadership.Cluster()
	retry := 100 * time.Millisecond
	msg := fmt.Sprintf("this server (%s) does not lead the cluster; send the call to the leader, %s (epoch %d)", v.Self, v.Leader, v.Epoch)
	if v.Leader == "" || v.Leader == v.Self {
		retry = 500 * time.Millisecond
		msg = fmt.Sprintf("this server (%s) does not lead the cluster and no other leader is known yet; retry in a moment", v.Self)
	}
	st := status.New(codes.Unavailable, msg)
	info := &errdetails.ErrorInfo{Reason: string(limiter.ReasonNotLeader), Domain: ErrorDomain,
		Metadata: map[string]string{"leader": v.Leader, "epoch": strconv.FormatInt(v.Epoch, 10)}}
	if d, err := st.WithDetails(info, &errdetails.RetryInfo{RetryDelay: durationpb.New(retry)}); err == nil {
		st = d
	}
	return st.Err()
}

// termDone is closed when the term the server serves ends: never for a
// standalone server.
func (s *Server) termDone() <-chan struct{} {
	if s.cluster == nil {
		return nil
	}
	return s.cluster.termDone()
}

// gated reports whether a method is answered by the leader only: every
// Tollgate and Envoy call but GetCluster; not health or reflection.
func gated(method string) bool {
	if method == tollgatev1.AdminService_GetCluster_FullMethodName {
		return false
	}
	return strings.HasPrefix(method, "/tollgate.v1.") || strings.HasPrefix(method, "/envoy.service.ratelimit.")
}

// leaderUnary answers NOT_LEADER for a server of a cluster that does not
// lead, before the call, and after it when leadership ended meanwhile:
// an error is then the closing engine's, not the caller's, and a lease
// granted (say, to a waiting acquire, by an engine timer) must not reach
// a holder once the deadline has passed.
func (s *Server) leaderUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if s.leadership == nil || !gated(info.FullMethod) {
		return handler(ctx, req)
	}
	if !s.leadership.Leading() {
		return nil, s.notLeader()
	}
	resp, err := handler(ctx, req)
	if !s.leadership.Leading() {
		return nil, s.notLeader()
	}
	return resp, err
}

// notLeading is NOT_LEADER for a server of a cluster that does not lead
// now, and nil for one that does (or a standalone one).
func (s *Server) notLeading() error {
	if s.leadership == nil || s.leadership.Leading() {
		return nil
	}
	return s.notLeader()
}

// leaderStream refuses streams on a server that does not lead; those it
// serves end with NOT_LEADER when its term ends.
func (s *Server) leaderStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if s.leadership == nil || !gated(info.FullMethod) {
		return handler(srv, ss)
	}
	if !s.leadership.Leading() {
		return s.notLeader()
	}
	err := handler(srv, ss)
	if err != nil && !s.leadership.Leading() {
		return s.notLeader()
	}
	return err
}
