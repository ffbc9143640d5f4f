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
	"github.com/tollgate/tollgate/proto/tollgate/v1/shard"
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

// GetCluster answers on every server: it is how a client finds the
// leader of each shard (the shard map, from etcd as this server last read
// it). A server whose view names itself leader while it does not lead
// (its deadline passed) reports no leader, and names itself the owner of
// no shard it does not lead now but one it moves to another server.
func (a *adminService) GetCluster(ctx context.Context, _ *tollgatev1.GetClusterRequest) (*tollgatev1.GetClusterResponse, error) {
	s := a.srv
	l := s.leadership
	if l == nil {
		self := s.advertise
		return &tollgatev1.GetClusterResponse{
			Members:    []*tollgatev1.ClusterMember{{Address: self, Role: tollgatev1.ClusterRole_CLUSTER_ROLE_LEADER, ShardsLed: 1}},
			Leader:     self,
			Self:       self,
			Standalone: true,
			ShardCount: 1,
		}, nil
	}
	v := l.Cluster()
	if v.Leader == v.Self && !l.Leading() {
		// Its leadership deadline passed (etcd unreachable, say) before the
		// election noticed: it grants nothing and answers NOT_LEADER with
		// no leader known, and so does this account.
		v.Leader, v.Remaining = "", 0
	}
	resp := &tollgatev1.GetClusterResponse{Leader: v.Leader, Epoch: v.Epoch, Self: v.Self, ShardCount: int32(s.terms.Len())}
	led := make(map[string]int32)
	for _, o := range s.shardMap() {
		if o.Owner == v.Self && o.MovingTo == "" && !s.terms.Shard(o.Shard).Get().Leading() {
			o.Owner, o.Epoch = "", 0 // past its deadline: as NOT_LEADER says, no leader known
		}
		if o.Owner != "" {
			led[o.Owner]++
		}
		resp.Shards = append(resp.Shards, &tollgatev1.ShardOwner{Shard: int32(o.Shard), Owner: o.Owner, Epoch: o.Epoch, MovingTo: o.MovingTo})
	}
	for _, m := range v.Members {
		role := tollgatev1.ClusterRole_CLUSTER_ROLE_FOLLOWER
		if m == v.Leader || led[m] > 0 {
			role = tollgatev1.ClusterRole_CLUSTER_ROLE_LEADER
		}
		resp.Members = append(resp.Members, &tollgatev1.ClusterMember{Address: m, Role: role, ShardsLed: led[m]})
	}
	if v.Remaining > 0 {
		resp.LeadershipRemaining = durationpb.New(v.Remaining)
	}
	return resp, nil
}

// shardMap is the shard map as this server last read it.
func (s *Server) shardMap() []cluster.Owner {
	if so, ok := s.leadership.(ShardOwners); ok {
		return so.Map()
	}
	out := make([]cluster.Owner, s.terms.Len())
	for i := range out {
		out[i] = s.owner(i)
	}
	return out
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
	// Shards is the number of shards of a cluster created by this server
	// (1 to shard.MaxCount; 0 means 1). A cluster keeps the count it was
	// created with: a server that joins one uses its stored count, and
	// says so in a warning when this one differs.
	Shards int
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
	if cc.Shards < 0 || cc.Shards > shard.MaxCount {
		return nil, fmt.Errorf("a cluster has 1 to %d shards, not %d", shard.MaxCount, cc.Shards)
	}
	key, err := etcdstore.New(cc.Client, cc.Prefix, etcdstore.Options{}).LeaseIDKey()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), cc.SessionTTL)
	n, err := cluster.LoadShardCount(ctx, cc.Client, cc.Prefix, max(cc.Shards, 1), cfg.Logger)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("reading the cluster's shard count from etcd: %w", err)
	}
	c := cluster.New(cluster.Config{Client: cc.Client, Prefix: cc.Prefix, SessionTTL: cc.SessionTTL, Margin: cc.Margin,
		Advertise: cfg.Advertise, Logger: cfg.Logger, Shards: n})
	cfg.Leadership = campaignLeadership{c}
	cfg.leaseIDKey = key // shared by every server: ids stay valid across leaders
	s := New(cfg)
	s.campaign = c
	s.fan = fanout.New(fanout.Config{Self: cfg.Advertise, Members: func() []string { return c.View().Members },
		DialOptions: peerDialOptions(cfg.PeerDialOptions), Log: s.log})
	h := s.hostShards(n, seed, cc.Prefix)
	if err := c.Start(h); err != nil {
		return nil, err
	}
	s.metrics.Registry().MustRegister(c.Collectors()...)
	return s, nil
}

// campaignLeadership is a cluster.Campaign as a Leadership (and its
// ShardOwners).
type campaignLeadership struct{ *cluster.Campaign }

func (l campaignLeadership) Cluster() ClusterView { return ClusterView(l.View()) }

// terms serves a server's leadership terms of each shard (cluster.Host):
// each with a new engine restored from the shard's store, as a restart
// of the shard's pools would. The Campaign may start and end the terms of
// different shards concurrently; those of one shard it starts and ends in
// turn.
type terms struct {
	s      *Server
	seed   []limiter.PoolConfig
	prefix string
	idle   *limiter.Engine // closed and empty: served between terms
}

func (h *terms) StartTerm(i int, st *etcdstore.Store, epoch int64, tenure func() bool) (*term.Term, error) {
	if i < 0 || i >= h.s.terms.Len() {
		return nil, fmt.Errorf("shard %d: the cluster has %d shards", i, h.s.terms.Len())
	}
	t, err := term.New(epoch, tenure, func(acting func() bool) (*limiter.Engine, error) {
		eng := h.s.newEngine(st, acting)
		if err := h.s.restore(eng, shardStore{st, h.s.terms, i}, h.seedOf(i), "etcd", h.prefix); err != nil {
			eng.Close()
			return nil, err
		}
		return eng, nil
	})
	if err != nil {
		return nil, err
	}
	h.s.terms.Serve(i, t)
	return t, nil
}

// hostShards makes s serve n shards, none until its host (returned)
// starts their terms: a closed engine without pools is served meanwhile.
func (s *Server) hostShards(n int, seed []limiter.PoolConfig, prefix string) *terms {
	h := &terms{s: s, seed: seed, prefix: prefix, idle: s.Engine()}
	h.idle.Close()
	s.terms = term.NewTable(n)
	for i := range n {
		s.terms.Serve(i, term.Ended(h.idle))
	}
	return h
}

// shardStore is the store of shard i's term: its term restores only the
// pools of shard i.
type shardStore struct {
	*etcdstore.Store
	terms *term.Table
	i     int
}

func (s shardStore) LoadOrSeed(seed []limiter.SavedPool) ([]limiter.SavedPool, bool, error) {
	pools, seeded, err := s.Store.LoadOrSeed(seed)
	if s.terms.Len() == 1 || err != nil {
		return pools, seeded, err
	}
	kept := pools[:0]
	for _, p := range pools {
		if s.terms.ShardOf(p.Config.Name) == s.i {
			kept = append(kept, p)
		}
	}
	return kept, seeded, nil
}

// seedOf is the pools of the pools file that belong to shard i.
func (h *terms) seedOf(i int) []limiter.PoolConfig {
	if h.s.terms.Len() == 1 {
		return h.seed
	}
	var out []limiter.PoolConfig
	for _, c := range h.seed {
		if h.s.terms.ShardOf(c.Name) == i {
			out = append(out, c)
		}
	}
	return out
}

// EndTerm fails the ended term's waiting calls and closes its engine; the
// server then serves none of the shard's pools, not even the last
// term's. The other shards' terms go on.
func (h *terms) EndTerm(i int, t *term.Term, handOff bool) {
	eng := t.Engine()
	eng.StopWaits()
	eng.Close()
	if handOff {
		eng.RecordCleanStop()
	}
	if i < 0 || i >= h.s.terms.Len() {
		return
	}
	if h.s.terms.Shard(i).Get() == t {
		h.s.terms.Serve(i, term.Ended(h.idle))
	}
	// Its leases are gone with its engine.
	if h.s.terms.Len() == 1 {
		h.s.quotas.ForgetLeases()
	} else {
		h.s.quotas.ForgetLeasesIn(func(pool string) bool { return h.s.terms.ShardOf(pool) == i })
	}
}

func (h *terms) LeadershipChanged()          { h.s.setHealth() }
func (h *terms) RecordEvent(ev events.Event) { h.s.recordEvent(ev) }
