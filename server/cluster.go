package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tollgate/tollgate/internal/cluster"
	"github.com/tollgate/tollgate/internal/events"
	"github.com/tollgate/tollgate/internal/fanout"
	"github.com/tollgate/tollgate/internal/term"
	"github.com/tollgate/tollgate/limiter"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/server/store/etcdstore"
)

// Leadership tells a server of a cluster (serve --etcd) whether it leads.
// A Server whose Config.Leadership is nil is standalone: it always leads.
type Leadership interface {
	// Leading reports whether this server may grant, renew and write now:
	// its leadership is live and its leadership deadline is ahead.
	Leading() bool
	// Cluster describes the cluster as this server sees it.
	Cluster() ClusterView
}

// ClusterView is a Leadership's account of the cluster. It converts to and
// from cluster.View, field for field.
type ClusterView struct {
	// Self is this server's advertised address.
	Self string
	// Members are the advertised addresses of the servers campaigning for
	// leadership, the leader first.
	Members []string
	// Leader is the leader's advertised address; empty while none is known.
	Leader string
	// Epoch grows with every new leadership (the leader key's etcd
	// revision); 0 while none is known.
	Epoch int64
	// Remaining is the time left on this server's leadership deadline; 0
	// when it does not lead.
	Remaining time.Duration
}

// GetCluster answers for followers too: it is how a client finds the
// leader. A server whose view names itself leader while it does not lead
// (Leading is false: its deadline passed) reports no leader.
func (a *adminService) GetCluster(ctx context.Context, _ *tollgatev1.GetClusterRequest) (*tollgatev1.GetClusterResponse, error) {
	l := a.srv.leadership
	if l == nil {
		self := a.srv.advertise
		return &tollgatev1.GetClusterResponse{
			Members:    []*tollgatev1.ClusterMember{{Address: self, Role: tollgatev1.ClusterRole_CLUSTER_ROLE_LEADER}},
			Leader:     self,
			Self:       self,
			Standalone: true,
		}, nil
	}
	v := l.Cluster()
	if v.Leader == v.Self && !l.Leading() {
		// Its leadership deadline passed (etcd unreachable, say) before the
		// election noticed: it grants nothing and answers NOT_LEADER with
		// no leader known, and so does this account.
		v.Leader, v.Remaining = "", 0
	}
	resp := &tollgatev1.GetClusterResponse{Leader: v.Leader, Epoch: v.Epoch, Self: v.Self}
	for _, m := range v.Members {
		role := tollgatev1.ClusterRole_CLUSTER_ROLE_FOLLOWER
		if m == v.Leader {
			role = tollgatev1.ClusterRole_CLUSTER_ROLE_LEADER
		}
		resp.Members = append(resp.Members, &tollgatev1.ClusterMember{Address: m, Role: role})
	}
	if v.Remaining > 0 {
		resp.LeadershipRemaining = durationpb.New(v.Remaining)
	}
	return resp, nil
}

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
	c := cluster.New(cluster.Config{Client: cc.Client, Prefix: cc.Prefix, SessionTTL: cc.SessionTTL, Margin: cc.Margin,
		Advertise: cfg.Advertise, Logger: cfg.Logger})
	cfg.Leadership = campaignLeadership{c}
	cfg.leaseIDKey = key // shared by every server: ids stay valid across leaders
	s := New(cfg)
	s.campaign = c
	s.fan = fanout.New(fanout.Config{Self: cfg.Advertise, Members: func() []string { return c.View().Members },
		DialOptions: peerDialOptions(cfg.PeerDialOptions), Log: s.log})
	h := &terms{s: s, seed: seed, prefix: cc.Prefix, idle: s.Engine()}
	h.idle.Close() // served, without pools, while no term runs
	s.terms.Serve(term.Ended(h.idle))
	if err := c.Start(h); err != nil {
		return nil, err
	}
	s.metrics.Registry().MustRegister(c.Collectors()...)
	return s, nil
}

// campaignLeadership is a cluster.Campaign as a Leadership.
type campaignLeadership struct{ *cluster.Campaign }

func (l campaignLeadership) Cluster() ClusterView { return ClusterView(l.View()) }

// terms serves a server's leadership terms (cluster.Host): each with a
// new engine restored from etcd, as a restart would.
type terms struct {
	s      *Server
	seed   []limiter.PoolConfig
	prefix string
	idle   *limiter.Engine // closed and empty: served between terms
}

func (h *terms) StartTerm(_ int, st *etcdstore.Store, epoch int64, tenure func() bool) (*term.Term, error) {
	t, err := term.New(epoch, tenure, func(acting func() bool) (*limiter.Engine, error) {
		eng := h.s.newEngine(st, acting)
		if err := h.s.restore(eng, st, h.seed, "etcd", h.prefix); err != nil {
			eng.Close()
			return nil, err
		}
		return eng, nil
	})
	if err != nil {
		return nil, err
	}
	h.s.terms.Serve(t)
	return t, nil
}

// EndTerm fails the ended term's waiting calls and closes its engine; the
// server then serves no pools, not even the last term's.
func (h *terms) EndTerm(_ int, t *term.Term, handOff bool) {
	eng := t.Engine()
	eng.StopWaits()
	eng.Close()
	if handOff {
		eng.RecordCleanStop()
	}
	h.s.terms.Serve(term.Ended(h.idle))
	h.s.quotas.ForgetLeases() // its leases are gone with its engine
}

func (h *terms) LeadershipChanged()          { h.s.setHealth() }
func (h *terms) RecordEvent(ev events.Event) { h.s.recordEvent(ev) }
