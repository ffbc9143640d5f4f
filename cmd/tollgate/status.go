package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// newStatusCmd is "tollgate status" (or "tollgate cluster"): every listed
// server's account of the cluster, through AdminService.GetCluster.
func newStatusCmd(g *globals) *cobra.Command {
	var format outputFlag
	cmd := &cobra.Command{
		Use:     "status",
		Aliases: []string{"cluster"},
		Short:   "Show each server, its role, the leader and its epoch",
		Long: `Ask every server of --server (a comma-separated list) which servers there are
and which one leads (AdminService.GetCluster, which followers answer too), and
print one line per server: its role (leader, follower, or standalone for a
server run without --etcd), the leader it knows, the leader's epoch (it grows
with every new leadership; 0 for a standalone server) and, on the leader, the
time left on its leadership deadline. A server that does not answer within
--timeout is shown as unreachable, and why is printed below the table.

For a cluster of several shards, each server's line says instead whether
it leads any shard, how many it leads and the time left on its session's
deadline; the shard map follows, once for each different map the servers
gave (they differ only while shards move): each server with how many
shards it leads and which, and each shard that moves (MOVING_TO) or has no
leader yet.

It fails (exit status 1) only when no server answers. With -o json it prints
{"servers": [{"server": ADDRESS, "cluster": GetClusterResponse} or
{"server": ADDRESS, "error": TEXT}, ...]}.`,
		Example: `  tollgate status --server 10.0.0.1:7070,10.0.0.2:7070,10.0.0.3:7070
  TOLLGATE_SERVER=a:7070,b:7070,c:7070 tollgate cluster -o json`,
		Args: exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
			defer cancel()
			answers, err := g.askCluster(ctx)
			if err != nil {
				return err
			}
			if err := format.printer(cmd.OutOrStdout()).cluster(answers); err != nil {
				return err
			}
			for _, a := range answers {
				if a.err == nil {
					return nil
				}
			}
			return errors.New("no server answered")
		},
	}
	cmd.Flags().VarP(&format, "output", "o", "output format: text or json")
	return cmd
}

// clusterAnswer is one server's GetCluster answer, or why there is none.
type clusterAnswer struct {
	server string
	resp   *tollgatev1.GetClusterResponse
	err    error
}

// askCluster asks every --server address for GetCluster at once, each on a
// connection of its own, and returns the answers in the order of the list.
func (g *globals) askCluster(ctx context.Context) ([]clusterAnswer, error) {
	d, err := g.sec.dialer()
	if err != nil {
		return nil, err
	}
	d.ClientID = cliClientID()
	var answers []clusterAnswer
	for _, s := range strings.Split(g.server, ",") {
		if s = strings.TrimSpace(s); s != "" {
			answers = append(answers, clusterAnswer{server: s})
		}
	}
	var wg sync.WaitGroup
	for i := range answers {
		a := &answers[i]
		wg.Go(func() {
			c, err := d.Dial(a.server)
			if err != nil {
				a.err = err
				return
			}
			defer c.Close()
			a.resp, a.err = tollgatev1.NewAdminServiceClient(c.Conn()).GetCluster(ctx, &tollgatev1.GetClusterRequest{})
		})
	}
	wg.Wait()
	return answers, nil
}

// role is the answering server's role as its answer gives it.
func (a clusterAnswer) role() string {
	switch {
	case a.err != nil:
		return "unreachable"
	case a.resp.GetStandalone():
		return "standalone"
	case a.resp.GetShardCount() > 1:
		if m := a.self(); m != nil && m.GetRole() == tollgatev1.ClusterRole_CLUSTER_ROLE_LEADER {
			return "leader" // of one shard or more
		}
	case a.resp.GetLeader() != "" && a.resp.GetLeader() == a.resp.GetSelf():
		return "leader"
	}
	return "follower"
}

// self returns the answering server's own entry among the members, or nil.
func (a clusterAnswer) self() *tollgatev1.ClusterMember {
	for _, m := range a.resp.GetMembers() {
		if m.GetAddress() == a.resp.GetSelf() {
			return m
		}
	}
	return nil
}

// cluster prints one row per server and, below, why the unreachable ones
// did not answer; or with -o json, the answers.
func (p *printer) cluster(answers []clusterAnswer) error {
	if p.json {
		type server struct {
			Server  string          `json:"server"`
			Cluster json.RawMessage `json:"cluster,omitempty"`
			Error   string          `json:"error,omitempty"`
		}
		var out struct {
			Servers []server `json:"servers"`
		}
		for _, a := range answers {
			s := server{Server: a.server}
			if a.err != nil {
				s.Error = formatErrorAt(a.err, a.server)
			} else {
				b, err := jsonMessage(a.resp)
				if err != nil {
					return err
				}
				s.Cluster = b
			}
			out.Servers = append(out.Servers, s)
		}
		b, err := json.Marshal(out)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(p.w, "%s\n", b)
		return err
	}
	tw := tabwriter.NewWriter(p.w, 0, 0, 2, ' ', 0)
	sharded := false
	for _, a := range answers {
		sharded = sharded || a.err == nil && a.resp.GetShardCount() > 1
	}
	if sharded { // each server's shards; the map below says who leads which
		fmt.Fprintln(tw, "SERVER\tROLE\tSHARDS_LED\tLEADERSHIP_LEFT")
		for _, a := range answers {
			led, left := "-", "-"
			if a.err == nil {
				led = strconv.Itoa(int(a.self().GetShardsLed()))
				if d := a.resp.GetLeadershipRemaining(); d != nil {
					left = d.AsDuration().Round(time.Millisecond).String()
				}
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", a.server, a.role(), led, left)
		}
	} else {
		fmt.Fprintln(tw, "SERVER\tROLE\tLEADER\tEPOCH\tLEADERSHIP_LEFT")
	}
	for _, a := range answers {
		if sharded {
			break
		}
		if a.err != nil {
			fmt.Fprintf(tw, "%s\t%s\t-\t-\t-\n", a.server, a.role())
			continue
		}
		leader := a.resp.GetLeader()
		if a.resp.GetStandalone() {
			leader = a.server // a standalone server may not know the address it is reached at
		}
		left := "-"
		if d := a.resp.GetLeadershipRemaining(); d != nil {
			left = d.AsDuration().Round(time.Millisecond).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", a.server, a.role(), orDash(leader), strconv.FormatInt(a.resp.GetEpoch(), 10), left)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if err := p.shardMaps(answers); err != nil {
		return err
	}
	for _, a := range answers {
		if a.err != nil {
			if _, err := fmt.Fprintf(p.w, "%s: %s\n", a.server, strings.TrimPrefix(formatErrorAt(a.err, a.server), "tollgate: ")); err != nil {
				return err
			}
		}
	}
	return nil
}

// shardMaps prints, below the servers, the shard map of a cluster of more
// than one shard: for each distinct map the servers answered (they agree
// but while shards move), which servers it names, then one row per owner
// (every member, those that lead nothing too) with how many shards it
// leads and which, and one row per shard that moves or has no owner.
// A cluster of one shard prints nothing more.
func (p *printer) shardMaps(answers []clusterAnswer) error {
	type group struct {
		servers []string
		resp    *tollgatev1.GetClusterResponse
	}
	var groups []*group
	for _, a := range answers {
		if a.err != nil || a.resp.GetShardCount() <= 1 {
			continue
		}
		var g *group
		for _, x := range groups {
			if sameShardMap(x.resp, a.resp) {
				g = x
			}
		}
		if g == nil {
			g = &group{resp: a.resp}
			groups = append(groups, g)
		}
		g.servers = append(g.servers, a.server)
	}
	for _, g := range groups {
		fmt.Fprintf(p.w, "\nshard map of %s: %d shards\n", strings.Join(g.servers, ", "), g.resp.GetShardCount())
		var owners []string
		led := map[string][]int32{}
		for _, m := range g.resp.GetMembers() {
			if _, ok := led[m.GetAddress()]; !ok {
				owners = append(owners, m.GetAddress())
				led[m.GetAddress()] = nil
			}
		}
		tw := tabwriter.NewWriter(p.w, 0, 0, 2, ' ', 0)
		var odd []*tollgatev1.ShardOwner
		for _, o := range g.resp.GetShards() {
			if o.GetOwner() == "" || o.GetMovingTo() != "" {
				odd = append(odd, o)
			}
			if o.GetOwner() == "" {
				continue
			}
			if _, ok := led[o.GetOwner()]; !ok {
				owners = append(owners, o.GetOwner())
			}
			led[o.GetOwner()] = append(led[o.GetOwner()], o.GetShard())
		}
		fmt.Fprintln(tw, "OWNER\tSHARDS_LED\tSHARDS")
		for _, o := range owners {
			fmt.Fprintf(tw, "%s\t%d\t%s\n", o, len(led[o]), orDash(shardRanges(led[o])))
		}
		if len(odd) > 0 {
			fmt.Fprintln(tw, "\nSHARD\tOWNER\tEPOCH\tMOVING_TO")
			for _, o := range odd {
				fmt.Fprintf(tw, "%d\t%s\t%d\t%s\n", o.GetShard(), orDash(o.GetOwner()), o.GetEpoch(), orDash(o.GetMovingTo()))
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

// sameShardMap reports whether a and b give the same owner, epoch and move
// of every shard.
func sameShardMap(a, b *tollgatev1.GetClusterResponse) bool {
	if a.GetShardCount() != b.GetShardCount() || len(a.GetShards()) != len(b.GetShards()) {
		return false
	}
	for i, x := range a.GetShards() {
		y := b.GetShards()[i]
		if x.GetShard() != y.GetShard() || x.GetOwner() != y.GetOwner() || x.GetEpoch() != y.GetEpoch() || x.GetMovingTo() != y.GetMovingTo() {
			return false
		}
	}
	return true
}

// shardRanges writes ascending shard numbers as "0-3,7,9-10".
func shardRanges(shards []int32) string {
	var b strings.Builder
	for i := 0; i < len(shards); {
		j := i
		for j+1 < len(shards) && shards[j+1] == shards[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(int(shards[i])))
		if j > i {
			b.WriteString("-" + strconv.Itoa(int(shards[j])))
		}
		i = j + 1
	}
	return b.String()
}
