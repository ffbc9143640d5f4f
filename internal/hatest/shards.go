package hatest

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/proto/tollgate/v1/shard"
)

// ShardMap is a cluster's shard map as one server answered it: the owner
// of each shard ("" for none), and the shards that move.
type ShardMap struct {
	Owners []string
	Moving int // shards with a moving_to
}

// Led returns how many shards each server leads.
func (m ShardMap) Led() map[string]int {
	out := map[string]int{}
	for _, o := range m.Owners {
		if o != "" {
			out[o]++
		}
	}
	return out
}

// String is "addr=n, ..." in address order.
func (m ShardMap) String() string {
	led := m.Led()
	var addrs []string
	for a := range led {
		addrs = append(addrs, a)
	}
	sort.Strings(addrs)
	var parts []string
	for _, a := range addrs {
		parts = append(parts, fmt.Sprintf("%s=%d", a, led[a]))
	}
	if n := len(m.Owners) - len(slices.DeleteFunc(slices.Clone(m.Owners), func(o string) bool { return o == "" })); n > 0 {
		parts = append(parts, fmt.Sprintf("none=%d", n))
	}
	return strings.Join(parts, ", ")
}

// Moved returns the shards whose owner differs between m and next.
func (m ShardMap) Moved(next ShardMap) []int {
	var out []int
	for i, o := range m.Owners {
		if i < len(next.Owners) && next.Owners[i] != o {
			out = append(out, i)
		}
	}
	return out
}

// ShardMapOf asks s for GetCluster and returns its shard map.
func (c *Cluster) ShardMapOf(s *Server) (ShardMap, error) {
	resp, err := c.cluster(s)
	if err != nil {
		return ShardMap{}, err
	}
	return shardMap(resp), nil
}

func shardMap(resp *tollgatev1.GetClusterResponse) ShardMap {
	m := ShardMap{Owners: make([]string, max(resp.GetShardCount(), 1))}
	for _, o := range resp.GetShards() {
		if int(o.GetShard()) < len(m.Owners) {
			m.Owners[o.GetShard()] = o.GetOwner()
		}
		if o.GetMovingTo() != "" {
			m.Moving++
		}
	}
	return m
}

// WaitBalanced waits up to timeout until the servers in live (running,
// not frozen) agree on a shard map in which every shard is led by one of
// them, none moves, and no server leads more than ceil(shards/len(live))
// shards; it returns that map and when it was seen.
func (c *Cluster) WaitBalanced(timeout time.Duration, live ...*Server) (ShardMap, time.Time) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	addrs := map[string]bool{}
	for _, s := range live {
		addrs[s.Addr] = true
	}
	var last string
	for time.Now().Before(deadline) {
		m, why := c.balanced(live, addrs)
		if why == "" {
			return m, time.Now()
		}
		last = why
		time.Sleep(20 * time.Millisecond)
	}
	c.t.Fatalf("hatest: the shards were not balanced over %d servers within %v (last: %s)", len(live), timeout, last)
	return ShardMap{}, time.Time{}
}

// balanced returns the map the live servers agree on, or why they do not
// (yet).
func (c *Cluster) balanced(live []*Server, addrs map[string]bool) (ShardMap, string) {
	var first ShardMap
	for i, s := range live {
		m, err := c.ShardMapOf(s)
		if err != nil {
			return ShardMap{}, s.Addr + ": " + err.Error()
		}
		if i == 0 {
			first = m
		} else if !slices.Equal(first.Owners, m.Owners) {
			return ShardMap{}, s.Addr + " has another map than " + live[0].Addr
		}
		if m.Moving > 0 {
			return ShardMap{}, fmt.Sprintf("%s: %d shards move", s.Addr, m.Moving)
		}
	}
	bound := (len(first.Owners) + len(live) - 1) / len(live)
	for i, o := range first.Owners {
		if !addrs[o] {
			return ShardMap{}, fmt.Sprintf("shard %d is led by %q, not a live server", i, o)
		}
	}
	for a, n := range first.Led() {
		if n > bound {
			return ShardMap{}, fmt.Sprintf("%s leads %d shards, more than %d", a, n, bound)
		}
	}
	return first, ""
}

// AdminOf returns an AdminService client of the server that leads pool's
// shard, as the first running server that answers says, for calls about
// pool (a server that does not lead it answers them NOT_LEADER).
func (c *Cluster) AdminOf(pool string) (tollgatev1.AdminServiceClient, error) {
	var last error
	for _, s := range c.Servers {
		if !s.Running() {
			continue
		}
		m, err := c.ShardMapOf(s)
		if err != nil {
			last = err
			continue
		}
		owner := m.Owners[shard.Of(pool, len(m.Owners))]
		for _, o := range c.Servers {
			if o.Addr == owner {
				if _, err := c.cluster(o); err != nil { // dials it, once
					return nil, err
				}
				return tollgatev1.NewAdminServiceClient(c.conns[o.Addr]), nil
			}
		}
		last = fmt.Errorf("%s names %q the owner of pool %s's shard, no server of the cluster", s.Addr, owner, pool)
	}
	return nil, fmt.Errorf("hatest: no server told the owner of pool %s: %v", pool, last)
}
