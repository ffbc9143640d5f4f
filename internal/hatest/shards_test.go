package hatest_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tollgate/tollgate/client"
	"github.com/tollgate/tollgate/internal/etcdtest"
	"github.com/tollgate/tollgate/internal/hatest"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/proto/tollgate/v1/shard"
)

// The sharded cluster under faults: servers on a real etcd process with
// --shards, 64 pools of every kind the workers use (concurrency pools
// with headroom and saturated, active pools of instances, rate pools, and
// pools whose config one worker changes), worker processes holding leases
// on every pool through the Go client, and membership changes one after
// the other: a server joins, one is stopped with SIGTERM, one is killed
// with SIGKILL (and, in the long run, one is frozen past the session TTL
// and one's etcd link is cut). After each change the test waits for the
// shards to be balanced over the live servers, and measures how each
// moved pool's grants passed from the old owner to the new one. The
// checker (hatest.Check) then reads every hold, take and config change.
// Timing is logged, not asserted.

// shardLoad is the pools of a sharded run, and their limits.
type shardLoad struct {
	shards int
	holds  []hatest.HoldSpec // one goroutine per pool, per worker
	takes  []hatest.TakeSpec
	config []string
	limits hatest.Limits
	create []*tollgatev1.Pool
	active []string
}

// poolsOf returns the names of the pools of shard i under load.
func (l *shardLoad) poolsOf(i int) []string {
	var out []string
	for _, p := range l.create {
		if shard.Of(p.GetName(), l.shards) == i {
			out = append(out, p.GetName())
		}
	}
	return out
}

const (
	shardLeaseTTL = 4 * time.Second
	shardMaxTTL   = 5 * time.Second
	shardMargin   = 300 * time.Millisecond
	activeSize    = 3 // instances per active pool
)

// newShardLoad returns 64 pools: 20 with headroom (limit 20), 16
// saturated (limit 2), 8 active of 3 instances, 12 rate pools (20/s,
// burst 5) and 8 config pools.
func newShardLoad(shards int) *shardLoad {
	l := &shardLoad{shards: shards, limits: hatest.Limits{Concurrency: map[string]int64{}, Rate: map[string]hatest.Bucket{}}}
	ttl := func(p *tollgatev1.Pool) *tollgatev1.Pool {
		p.DefaultLeaseTtl, p.MaxLeaseTtl = durationpb.New(shardLeaseTTL), durationpb.New(shardMaxTTL)
		return p
	}
	hold := func(pool string, maxWeight int64, minHold, maxHold time.Duration) hatest.HoldSpec {
		return hatest.HoldSpec{Pool: pool, Goroutines: 1, TTL: shardLeaseTTL, MaxWeight: maxWeight, MinHold: minHold, MaxHold: maxHold,
			LongEvery: 5, LongMin: time.Second, LongMax: 3 * time.Second}
	}
	for i := range 20 {
		name := fmt.Sprintf("h-%02d", i)
		l.limits.Concurrency[name] = 20
		l.create = append(l.create, ttl(&tollgatev1.Pool{Name: name, ConcurrencyLimit: 20}))
		l.holds = append(l.holds, hold(name, 2, 5*time.Millisecond, 40*time.Millisecond))
	}
	for i := range 16 {
		name := fmt.Sprintf("s-%02d", i)
		l.limits.Concurrency[name] = 2
		l.create = append(l.create, ttl(&tollgatev1.Pool{Name: name, ConcurrencyLimit: 2}))
		l.holds = append(l.holds, hold(name, 1, 20*time.Millisecond, 200*time.Millisecond))
	}
	for i := range 8 {
		name := fmt.Sprintf("a-%02d", i)
		l.limits.Concurrency[name] = activeSize
		l.active = append(l.active, name)
		l.create = append(l.create, ttl(&tollgatev1.Pool{Name: name, ResourceKind: tollgatev1.ResourceKind_RESOURCE_KIND_ACTIVE}))
		l.holds = append(l.holds, hold(name, 1, 10*time.Millisecond, 100*time.Millisecond))
	}
	for i := range 12 {
		name := fmt.Sprintf("r-%02d", i)
		l.limits.Rate[name] = hatest.Bucket{Rate: 20, Burst: 5}
		l.create = append(l.create, &tollgatev1.Pool{Name: name, Rate: 20, Burst: 5})
		l.takes = append(l.takes, hatest.TakeSpec{Pool: name, Goroutines: 1})
	}
	for i := range 8 {
		name := fmt.Sprintf("cfg-%d", i)
		l.config = append(l.config, name)
		l.create = append(l.create, &tollgatev1.Pool{Name: name, ConcurrencyLimit: 1})
	}
	return l
}

// shardRun is a sharded cluster under load.
type shardRun struct {
	t       *testing.T
	c       *hatest.Cluster
	load    *shardLoad
	adm     *load
	workers []*hatest.Worker
	changes []change
}

// change is one membership change and the shard maps around it.
type change struct {
	name          string
	at, balanced  time.Time
	before, after hatest.ShardMap
	gone          string // the server that left or died ("" for a join)
}

func startShardRun(t *testing.T, etcd hatest.Etcd, servers, shards, nworkers int) *shardRun {
	t.Helper()
	bin, wbin := binaries(t)
	c := hatest.StartCluster(t, bin, etcd, servers, "--shards", fmt.Sprint(shards))
	m, _ := c.WaitBalanced(60*time.Second, c.Servers...)
	t.Logf("%d servers, %d shards: %s", servers, shards, m)
	r := &shardRun{t: t, c: c, load: newShardLoad(shards)}
	r.adm = &load{t: t} // for its admin: calls again while UNAVAILABLE
	r.createPools()
	for i := range nworkers {
		wl := hatest.Workload{Worker: fmt.Sprintf("worker-%d", i), Servers: c.Addrs(), Seed: uint64(i + 1), Margin: shardMargin,
			Holds: r.load.holds, Takes: r.load.takes}
		if i == 0 {
			wl.Config, wl.ConfigEvery = r.load.config, 50*time.Millisecond
		}
		r.workers = append(r.workers, hatest.StartWorker(t, wbin, wl))
	}
	return r
}

// admin runs an admin call about pool on the server that leads its
// shard, again while the answer is UNAVAILABLE, for up to 20s.
func (r *shardRun) admin(what, pool string, call func(ctx context.Context, adm tollgatev1.AdminServiceClient) error) {
	r.t.Helper()
	r.adm.admin(what, func(ctx context.Context) error {
		adm, err := r.c.AdminOf(pool)
		if err != nil {
			return status.Error(codes.Unavailable, err.Error())
		}
		return call(ctx, adm)
	})
}

func (r *shardRun) createPools() {
	for _, p := range r.load.create {
		r.admin("creating pool "+p.GetName(), p.GetName(), func(ctx context.Context, adm tollgatev1.AdminServiceClient) error {
			_, err := adm.CreatePool(ctx, &tollgatev1.CreatePoolRequest{Pool: p}, grpc.WaitForReady(true))
			if status.Code(err) == codes.AlreadyExists { // sent again after OUTCOME_UNKNOWN
				got, gerr := adm.GetPool(ctx, &tollgatev1.GetPoolRequest{Name: p.GetName()}, grpc.WaitForReady(true))
				if gerr != nil {
					return gerr
				}
				if !asAsked(got.GetPool(), p) {
					return fmt.Errorf("%w; it is %v, not %v", err, got.GetPool(), p)
				}
				return nil
			}
			return err
		})
	}
	for _, name := range r.load.active {
		var rs []*tollgatev1.Resource
		for i := range activeSize {
			rs = append(rs, &tollgatev1.Resource{Id: fmt.Sprintf("%s-inst-%d", name, i+1)})
		}
		r.admin("adding the instances of "+name, name, func(ctx context.Context, adm tollgatev1.AdminServiceClient) error {
			_, err := adm.AddResources(ctx, &tollgatev1.AddResourcesRequest{Pool: name, Resources: rs}, grpc.WaitForReady(true))
			if status.Code(err) == codes.AlreadyExists {
				return nil // added all or none, and sent again after OUTCOME_UNKNOWN
			}
			return err
		})
	}
}

// live returns the servers that run and are not in not.
func (r *shardRun) live(not ...*hatest.Server) []*hatest.Server {
	var out []*hatest.Server
	for _, s := range r.c.Servers {
		if s.Running() && !slices.Contains(not, s) {
			out = append(out, s)
		}
	}
	return out
}

// change makes a membership change: do makes it and returns the server
// that left or died (nil for a join) and the servers to wait on (nil: all
// that run); then it waits for the shards to be balanced over them.
func (r *shardRun) change(name string, do func() (gone *hatest.Server, not []*hatest.Server)) {
	r.t.Helper()
	var before hatest.ShardMap
	for _, s := range r.live() {
		if m, err := r.c.ShardMapOf(s); err == nil {
			before = m
			break
		}
	}
	at := time.Now()
	gone, not := do()
	after, seen := r.c.WaitBalanced(30*time.Second, r.live(not...)...)
	ch := change{name: name, at: at, balanced: seen, before: before, after: after}
	if gone != nil {
		ch.gone = gone.Addr
	}
	r.changes = append(r.changes, ch)
	r.t.Logf("%s: balanced %v after it: %s (%d shards moved)", name, seen.Sub(at).Round(time.Millisecond), after, len(before.Moved(after)))
}

// finish stops the workers, reads the config pools, checks the history,
// and logs the measures of each change.
func (r *shardRun) finish() []hatest.Record {
	t := r.t
	t.Helper()
	end := time.Now()
	var recs []hatest.Record
	for _, w := range r.workers {
		recs = append(recs, w.Stop()...)
	}
	final := map[string]int64{}
	for _, name := range r.load.config {
		r.admin("reading pool "+name+" at the end", name, func(ctx context.Context, adm tollgatev1.AdminServiceClient) error {
			resp, err := adm.GetPool(ctx, &tollgatev1.GetPoolRequest{Name: name}, grpc.WaitForReady(true))
			if err == nil {
				final[name] = resp.GetPool().GetConcurrencyLimit()
			}
			return err
		})
	}
	res := hatest.Check(recs, r.load.limits, final)
	t.Logf("checked %d holds, %d takes, %d acknowledged config changes (%d pools compared at the end)", res.Holds, res.Takes, res.ConfigAcked, res.ConfigChecked)
	for _, v := range res.Violations {
		t.Errorf("checker: %s", v)
	}
	if res.Holds < 200 || res.Takes < 50 || res.ConfigAcked < 10 || res.ConfigChecked != len(r.load.config) {
		t.Errorf("too little load to check: %d holds, %d takes, %d acknowledged config changes, %d config pools compared", res.Holds, res.Takes, res.ConfigAcked, res.ConfigChecked)
	}
	t.Logf("waits from each change until the shards were balanced, and 0.5 s more:\n%s", r.moveTable(recs, end))
	return recs
}

// moveTable measures, for every change, how long the calls made from the
// change until the shards were balanced (and half a second more) waited:
// acquires in the pools with headroom and renews in every pool, of the
// shards that moved (planned moves, and the shards of a server that died,
// apart) and, to compare, of the shards that did not; and from the change
// to the first grant and the first renew answered in those pools (before
// the next change) by a server other than the one that left or died; and
// the holds the client ended as lost from the change to the next (every
// holder is alive and renewing).
func (r *shardRun) moveTable(recs []hatest.Record, end time.Time) string {
	var b strings.Builder
	b.WriteString("| change | shards per server after | moved | leases lost | shards | acquires (refused) | acquire wait, ms | renews | renew wait, ms | first grant, ms | first renew, ms |\n|---|---|---:|---:|---|---|---|---:|---|---:|---:|\n")
	for i, ch := range r.changes {
		next := end
		if i+1 < len(r.changes) {
			next = r.changes[i+1].at
		}
		moved := ch.before.Moved(ch.after)
		groups := map[string][2]map[string]bool{}
		for s, owner := range ch.before.Owners {
			kind := "not moved"
			if slices.Contains(moved, s) {
				kind = "planned move"
				if owner == ch.gone && !strings.Contains(ch.name, "SIGTERM") {
					kind = "of the dead server"
				}
			}
			g, ok := groups[kind]
			if !ok {
				g = [2]map[string]bool{{}, {}}
				groups[kind] = g
			}
			for _, p := range r.load.poolsOf(s) {
				if strings.HasPrefix(p, "h-") {
					g[0][p] = true
				}
				g[1][p] = true
			}
		}
		for _, kind := range []string{"planned move", "of the dead server", "not moved"} {
			g, ok := groups[kind]
			if !ok {
				continue
			}
			w := hatest.WaitsIn(recs, g[0], g[1], ch.gone, ch.at, ch.balanced.Add(500*time.Millisecond))
			firsts := hatest.WaitsIn(recs, g[0], g[1], ch.gone, ch.at, next)
			fmt.Fprintf(&b, "| %s | %s | %d | %d | %s | %d (%d) | %s | %d | %s | %s | %s |\n", ch.name, ch.after, len(moved), hatest.LostBetween(recs, ch.at, next), kind, w.Acquires, w.Refused, hatest.MedMax(w.Acquire), w.Renews, hatest.MedMax(w.Renew), hatest.Ms(firsts.FirstGrant), hatest.Ms(firsts.FirstRenew))
		}
	}
	return b.String()
}

// TestShardsUnderMembershipChanges is the short run: three servers and 16
// shards, then a fourth joins, one is stopped with SIGTERM, and one is
// killed with SIGKILL.
func TestShardsUnderMembershipChanges(t *testing.T) {
	r := startShardRun(t, etcdtest.StartProcess(t), 3, 16, 2)
	const settle = 3 * time.Second
	time.Sleep(settle)
	r.change("a fourth server joins", func() (*hatest.Server, []*hatest.Server) {
		r.c.AddServer()
		return nil, nil
	})
	time.Sleep(settle)
	term := r.c.Servers[0]
	r.change("SIGTERM of a server", func() (*hatest.Server, []*hatest.Server) {
		if !term.Terminate(15 * time.Second) {
			t.Errorf("%s did not exit within 15s of its SIGTERM", term.Addr)
		}
		return term, nil
	})
	time.Sleep(settle)
	dead := r.c.Servers[1]
	r.change("kill -9 of a server", func() (*hatest.Server, []*hatest.Server) {
		dead.Kill()
		return dead, nil
	})
	time.Sleep(settle)
	r.finish()
	r.c.CheckLogs()
}

// TestShardsTable is the long run behind TOLLGATE_SHARDS_TABLE: three
// servers and 32 shards; a fourth and a fifth join; one is stopped with
// SIGTERM, one killed with SIGKILL, one frozen (SIGSTOP) past the session
// TTL and thawed, one's etcd link cut and healed; each change then
// TOLLGATE_SHARDS_SETTLE (default 5s) of load.
//
//	TOLLGATE_SHARDS_TABLE=1 go test ./internal/hatest -run TestShardsTable -v -timeout 20m
func TestShardsTable(t *testing.T) {
	if os.Getenv("TOLLGATE_SHARDS_TABLE") == "" {
		t.Skip("set TOLLGATE_SHARDS_TABLE=1 to measure the moves of shards (minutes)")
	}
	settle := 5 * time.Second
	if s := os.Getenv("TOLLGATE_SHARDS_SETTLE"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatal(err)
		}
		settle = d
	}
	r := startShardRun(t, etcdtest.StartProcess(t), 3, 32, 3)
	time.Sleep(settle)
	for _, name := range []string{"a fourth server joins", "a fifth server joins"} {
		r.change(name, func() (*hatest.Server, []*hatest.Server) {
			r.c.AddServer()
			return nil, nil
		})
		time.Sleep(settle)
	}
	term := r.c.Servers[0]
	r.change("SIGTERM of a server", func() (*hatest.Server, []*hatest.Server) {
		if !term.Terminate(15 * time.Second) {
			t.Errorf("%s did not exit within 15s of its SIGTERM", term.Addr)
		}
		return term, nil
	})
	time.Sleep(settle)
	dead := r.c.Servers[1]
	r.change("kill -9 of a server", func() (*hatest.Server, []*hatest.Server) {
		dead.Kill()
		return dead, nil
	})
	time.Sleep(settle)
	frozen := r.c.Servers[2]
	r.change("SIGSTOP of a server past the session TTL", func() (*hatest.Server, []*hatest.Server) {
		frozen.Freeze()
		return frozen, []*hatest.Server{frozen}
	})
	time.Sleep(settle)
	r.change("the frozen server thawed (it joins again)", func() (*hatest.Server, []*hatest.Server) {
		frozen.Thaw()
		return nil, nil
	})
	time.Sleep(settle)
	cut := r.c.Servers[3]
	r.change("a server's etcd link cut", func() (*hatest.Server, []*hatest.Server) {
		cut.Proxy.Cut()
		return cut, []*hatest.Server{cut}
	})
	time.Sleep(settle)
	r.change("the cut link healed (it joins again)", func() (*hatest.Server, []*hatest.Server) {
		cut.Proxy.Heal()
		return nil, nil
	})
	time.Sleep(settle)
	r.finish()
	r.c.CheckLogs()
}

// TestShardsEtcdLoad counts the requests etcd serves at steady state for
// three servers leading 256 shards, with no load: it reads etcd's
// grpc_server_msg_received_total (every unary request and every message
// on a stream: a keep-alive is one) twice, 10 s apart. Behind
// TOLLGATE_SHARDS_TABLE.
func TestShardsEtcdLoad(t *testing.T) {
	if os.Getenv("TOLLGATE_SHARDS_TABLE") == "" {
		t.Skip("set TOLLGATE_SHARDS_TABLE=1 to count etcd's requests with 256 shards")
	}
	bin, _ := binaries(t)
	etcd := etcdtest.StartProcess(t)
	c := hatest.StartCluster(t, bin, etcd, 3, "--shards", "256")
	m, _ := c.WaitBalanced(60*time.Second, c.Servers...)
	t.Logf("3 servers, 256 shards: %s", m)
	time.Sleep(2 * hatest.SessionTTL) // settled
	const window = 10 * time.Second
	before := etcdRequests(t, etcd.Endpoint())
	time.Sleep(window)
	after := etcdRequests(t, etcd.Endpoint())
	var total float64
	var lines []string
	for method, n := range after {
		if d := n - before[method]; d > 0 {
			total += d
			lines = append(lines, fmt.Sprintf("%s %.1f/s", method, d/window.Seconds()))
		}
	}
	slices.Sort(lines)
	t.Logf("etcd requests at steady state, 3 servers, 256 shards, session TTL %v: %.1f/s (%s)", hatest.SessionTTL, total/window.Seconds(), strings.Join(lines, ", "))
	if m2, _ := c.WaitBalanced(time.Second, c.Servers...); !slices.Equal(m.Owners, m2.Owners) {
		t.Errorf("shards moved at steady state: %s, then %s", m, m2)
	}
	c.CheckLogs()
}

// etcdRequests reads etcd's grpc_server_msg_received_total per method.
func etcdRequests(t *testing.T, endpoint string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(endpoint + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "grpc_server_msg_received_total{") {
			continue
		}
		_, rest, _ := strings.Cut(line, `grpc_method="`)
		method, _, _ := strings.Cut(rest, `"`)
		fields := strings.Fields(line)
		n, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			t.Fatalf("etcd metrics: %q: %v", line, err)
		}
		out[method] += n
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestShardsPairs measures Acquire + Release pairs through the Go client
// against three servers of 12 shards, the pairs spread over 24 pools, and
// on the same load against three servers of one shard (one leads, two
// wait) and one server of one shard: pairs a second, the
// servers' CPU per pair (summed), the client's, and how the pairs split
// over the servers. Every process shares this machine's cores. Behind
// TOLLGATE_SHARDS_TABLE.
func TestShardsPairs(t *testing.T) {
	if os.Getenv("TOLLGATE_SHARDS_TABLE") == "" {
		t.Skip("set TOLLGATE_SHARDS_TABLE=1 to measure pairs over shards")
	}
	bin, _ := binaries(t)
	for _, shape := range []struct{ servers, shards int }{{3, 12}, {3, 1}, {1, 1}} {
		c := hatest.StartCluster(t, bin, etcdtest.StartProcess(t), shape.servers, "--shards", fmt.Sprint(shape.shards),
			"--client-rate", "-1", "--max-client-leases", "-1", "--log-level", "warn")
		m, _ := c.WaitBalanced(60*time.Second, c.Servers...)
		r := &shardRun{t: t, c: c, adm: &load{t: t}}
		var pools []string
		for i := range 24 {
			name := fmt.Sprintf("pairs-%02d", i)
			pools = append(pools, name)
			r.admin("creating pool "+name, name, func(ctx context.Context, adm tollgatev1.AdminServiceClient) error {
				_, err := adm.CreatePool(ctx, &tollgatev1.CreatePoolRequest{Pool: &tollgatev1.Pool{Name: name, ConcurrencyLimit: 10000}}, grpc.WaitForReady(true))
				return err
			})
		}
		cl, err := client.Dialer{ClientID: "hatest-pairs"}.Dial(c.Addrs()...)
		if err != nil {
			t.Fatal(err)
		}
		pairs := make([]int64, len(pools))
		run := func(d time.Duration) {
			ctx, cancel := context.WithTimeout(context.Background(), d)
			defer cancel()
			var wg sync.WaitGroup
			for g := range 32 {
				wg.Go(func() {
					for i := g; ctx.Err() == nil; i++ {
						p := i % len(pools)
						l, err := cl.Acquire(ctx, pools[p])
						if err != nil {
							continue
						}
						if l.Release(context.Background()) == nil {
							atomic.AddInt64(&pairs[p], 1)
						}
					}
				})
			}
			wg.Wait()
		}
		run(2 * time.Second) // warm up: every link open
		clear(pairs)
		cpu0 := serversCPU(t, c)
		self0 := selfCPU(t)
		const window = 10 * time.Second
		run(window)
		cpu1 := serversCPU(t, c)
		self1 := selfCPU(t)
		cl.Close()
		var total int64
		perServer := map[string]int64{}
		for i, n := range pairs {
			total += n
			perServer[m.Owners[shard.Of(pools[i], len(m.Owners))]] += n
		}
		var split []string
		var serverCPU time.Duration
		for _, s := range c.Servers {
			d := cpu1[s.Addr] - cpu0[s.Addr]
			serverCPU += d
			split = append(split, fmt.Sprintf("%s: %d pairs (%.0f%%), CPU %v", s.Addr, perServer[s.Addr], 100*float64(perServer[s.Addr])/float64(max(total, 1)), d.Round(time.Millisecond)))
		}
		t.Logf("%d servers, %d shards, 24 pools, 32 goroutines: %.0f pairs/s; servers' CPU %.1f µs/pair, client's %.1f µs/pair; %s",
			shape.servers, shape.shards, float64(total)/window.Seconds(),
			float64(serverCPU.Microseconds())/float64(max(total, 1)), float64((self1-self0).Microseconds())/float64(max(total, 1)), strings.Join(split, "; "))
		for _, s := range c.Servers {
			s.Kill()
		}
	}
}

// serversCPU returns each running server's CPU time so far.
func serversCPU(t *testing.T, c *hatest.Cluster) map[string]time.Duration {
	t.Helper()
	out := map[string]time.Duration{}
	for _, s := range c.Servers {
		d, err := s.CPU()
		if err != nil {
			t.Fatal(err)
		}
		out[s.Addr] = d
	}
	return out
}

// selfCPU returns this process's CPU time so far.
func selfCPU(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
