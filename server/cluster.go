package server

import (
	"context"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
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

// ClusterView is a Leadership's account of the cluster.
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
// leader.
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
