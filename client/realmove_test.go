//go:build shardsreal

// The build tag keeps this test out until the sharded server (branches
// sh-server and sh-campaign) is on main; it passes against them. Remove the
// tag when they are merged.

package client_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/tollgate/tollgate/client"
	"github.com/tollgate/tollgate/internal/etcdtest"
	"github.com/tollgate/tollgate/limiter"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// TestRealPlannedMovesKeepLeases starts a third server: the shards it
// takes move from the two others while every lease is held.
func TestRealPlannedMovesKeepLeases(t *testing.T) {
	etcd := etcdtest.Start(t)
	const shards = 12
	var seed []limiter.PoolConfig
	for i := range 24 {
		seed = append(seed, limiter.PoolConfig{Name: "pool-" + strconv.Itoa(i), ConcurrencyLimit: 4})
	}
	a := startReal(t, etcd, shards, seed)
	b := startReal(t, etcd, shards, seed)
	c := dialTarget(t, a.addr)
	adm := tollgatev1.NewAdminServiceClient(c.Conn())
	ownedBy := func() map[string]int {
		cl, err := adm.GetCluster(ctx(t), &tollgatev1.GetClusterRequest{})
		if err != nil {
			return nil
		}
		led := map[string]int{}
		for _, s := range cl.GetShards() {
			if s.GetOwner() != "" && s.GetMovingTo() == "" {
				led[s.GetOwner()]++
			}
		}
		return led
	}
	waitFor(t, "two servers lead 6 shards each", func() bool {
		o := ownedBy()
		return o[a.addr] == 6 && o[b.addr] == 6
	})
	var leases []*client.Lease
	tokens := map[*client.Lease]uint64{}
	for _, p := range seed {
		l, err := c.Acquire(ctx(t), p.Name, client.WithTTL(10*time.Second))
		if err != nil {
			t.Fatalf("acquire %s: %v", p.Name, err)
		}
		leases = append(leases, l)
		tokens[l] = l.FencingToken()
	}
	start := time.Now()
	cm := startReal(t, etcd, shards, seed)
	waitFor(t, "three servers lead 4 shards each", func() bool {
		o := ownedBy()
		return o[a.addr] == 4 && o[b.addr] == 4 && o[cm.addr] == 4
	})
	t.Logf("balanced %v after the third server started", time.Since(start))
	// Every lease renewed since (at its shard's owner, old or new).
	expiries := map[*client.Lease]time.Time{}
	for _, l := range leases {
		expiries[l] = l.Expiry()
	}
	for _, l := range leases {
		waitFor(t, "lease of "+l.Pool()+" renewed after the moves", func() bool { return l.Err() != nil || l.Expiry().After(expiries[l]) })
		if err := l.Err(); err != nil {
			t.Fatalf("lease of %s lost: %v", l.Pool(), err)
		}
		if l.FencingToken() != tokens[l] {
			t.Errorf("lease of %s: token %d, was %d", l.Pool(), l.FencingToken(), tokens[l])
		}
	}
	for _, p := range seed {
		l, err := c.Acquire(ctx(t), p.Name, client.WithTTL(10*time.Second))
		if err != nil {
			t.Fatalf("acquire %s after the moves: %v", p.Name, err)
		}
		if l.FencingToken() <= tokens[leases[0]] && p.Name == leases[0].Pool() {
			t.Errorf("new token %d not above %d", l.FencingToken(), tokens[leases[0]])
		}
		_ = l.ReleaseAsync()
	}
	waitFor(t, "one session per server", func() bool {
		return a.sessions.Load() == 1 && b.sessions.Load() == 1 && cm.sessions.Load() == 1
	})
	for _, l := range leases {
		if err := l.Release(ctx(t)); err != nil {
			t.Errorf("release %s: %v", l.Pool(), err)
		}
	}
}
