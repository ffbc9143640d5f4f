package hatest_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tollgate/tollgate/client"
	"github.com/tollgate/tollgate/internal/etcdtest"
	"github.com/tollgate/tollgate/internal/hatest"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// The failover table of docs/ha.md: three servers on a real etcd process
// (session TTL hatest.SessionTTL), worker processes holding leases of TTL
// 6s in a pool with headroom and in a saturated one, and every fault kind
// made tableRounds times, one every tableCycle, in a random order. It runs
// only when TOLLGATE_FAILOVER_TABLE is set (it takes about
// 6 × rounds × 16s), and logs the table:
//
//	TOLLGATE_FAILOVER_TABLE=1 go test ./internal/hatest -run TestHAFailoverTable -v -timeout 30m
//
// TOLLGATE_FAILOVER_ROUNDS sets the rounds (default 3).
const (
	tableTTL     = 6 * time.Second
	tableMargin  = 600 * time.Millisecond // the client's default for a 6s TTL
	tableCycle   = 16 * time.Second       // from one fault to the next: past the recovery window and a renew period
	tableWorkers = 6
)

// faultKind is one kind of fault: make it, and undo it once a new leader
// was seen (or at once). leaderFault: the leader's answers after the fault
// do not count, and the new leader is another server; else "new leader"
// is when a server leads again, which may be the same one in the same
// term (an etcd restart within the session TTL).
type faultKind struct {
	name        string
	leaderFault bool
	make        func(c *hatest.Cluster, leader *hatest.Server, etcd *etcdtest.Process, rng *rand.Rand) (undo func())
}

var faultKinds = []faultKind{
	{"kill -9 of the leader", true, func(_ *hatest.Cluster, l *hatest.Server, _ *etcdtest.Process, _ *rand.Rand) func() {
		l.Kill()
		return l.Start
	}},
	{"SIGSTOP of the leader, 3–4.5 s", true, func(_ *hatest.Cluster, l *hatest.Server, _ *etcdtest.Process, rng *rand.Rand) func() {
		at := time.Now()
		l.Freeze()
		d := 3*time.Second + time.Duration(rng.Int64N(int64(1500*time.Millisecond)))
		return func() {
			time.Sleep(time.Until(at.Add(d)))
			l.Thaw()
		}
	}},
	{"the leader's etcd link cut", true, func(_ *hatest.Cluster, l *hatest.Server, _ *etcdtest.Process, _ *rand.Rand) func() {
		l.Proxy.Cut()
		return l.Proxy.Heal
	}},
	{"the leader's etcd link blackholed", true, func(_ *hatest.Cluster, l *hatest.Server, _ *etcdtest.Process, _ *rand.Rand) func() {
		l.Proxy.Blackhole()
		return l.Proxy.Heal
	}},
	{"kill -9 of etcd", false, func(_ *hatest.Cluster, _ *hatest.Server, e *etcdtest.Process, _ *rand.Rand) func() {
		e.Kill()
		e.Restart()
		return func() {}
	}},
	{"SIGTERM of the leader", true, func(_ *hatest.Cluster, l *hatest.Server, _ *etcdtest.Process, _ *rand.Rand) func() {
		l.Terminate(10 * time.Second)
		return l.Start
	}},
}

// faultRun is one fault made.
type faultRun struct {
	kind      int
	at        time.Time
	leader    time.Duration // to a new leader (a higher epoch)
	excluded  string
	recovered []hatest.Recovery
	lost      int
}

func TestHAFailoverTable(t *testing.T) {
	if os.Getenv("TOLLGATE_FAILOVER_TABLE") == "" {
		t.Skip("set TOLLGATE_FAILOVER_TABLE=1 to measure the failover table (minutes)")
	}
	rounds := 3
	if s := os.Getenv("TOLLGATE_FAILOVER_ROUNDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("TOLLGATE_FAILOVER_ROUNDS=%q: want a positive number", s)
		}
		rounds = n
	}
	bin, wbin := binaries(t)
	etcd := etcdtest.StartProcess(t)
	c := hatest.StartCluster(t, bin, etcd, 3)
	c.WaitLeader(20 * time.Second)
	pools := []hatest.PoolKind{
		{Pool: "headroom", Kind: "concurrency, headroom", GrantOp: "acquire"},
		{Pool: "saturated", Kind: "concurrency, saturated", GrantOp: "acquire"},
	}
	limits := hatest.Limits{Concurrency: map[string]int64{"headroom": 40, "saturated": 3}}
	workers := startTableLoad(t, wbin, c.Addrs(), limits)

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0))
	var order []int
	for range rounds {
		order = append(order, rng.Perm(len(faultKinds))...)
	}
	time.Sleep(tableCycle / 2) // warm up
	var runs []faultRun
	for i, k := range order {
		fk := faultKinds[k]
		leader, epoch := c.WaitLeader(30 * time.Second)
		at := time.Now()
		undo := fk.make(c, leader, etcd, rng)
		var not []*hatest.Server
		if fk.leaderFault {
			not = append(not, leader)
		}
		var seen time.Time
		if fk.leaderFault {
			seen = waitEpoch(t, fk.name, c, epoch, not...)
		} else { // the leader may keep its term across an etcd restart
			c.WaitLeader(30 * time.Second)
			seen = time.Now()
		}
		undo()
		r := faultRun{kind: k, at: at, leader: seen.Sub(at)}
		if fk.leaderFault {
			r.excluded = leader.Addr
		}
		t.Logf("fault %d/%d: %s (leader %s): new leader after %v", i+1, len(order), fk.name, leader.Addr, r.leader.Round(time.Millisecond))
		runs = append(runs, r)
		time.Sleep(time.Until(at.Add(tableCycle)))
	}
	end := time.Now()
	var recs []hatest.Record
	for _, w := range workers {
		recs = append(recs, w.Stop()...)
	}
	res := hatest.Check(recs, limits, nil)
	for _, v := range res.Violations {
		t.Errorf("checker: %s", v)
	}
	for i := range runs {
		to := end
		if i+1 < len(runs) {
			to = runs[i+1].at
		}
		runs[i].recovered = hatest.Measure(recs, runs[i].at, to, runs[i].excluded, pools)
		runs[i].lost = hatest.LostBetween(recs, runs[i].at, to)
	}
	t.Logf("checked %d holds; the failover table (%d rounds, lease TTL %v, session TTL %v, %d worker processes):\n%s",
		res.Holds, rounds, tableTTL, hatest.SessionTTL, tableWorkers, failoverTable(runs))
}

// waitEpoch waits for a leader with an epoch above epoch, among the
// servers not in not, and returns when it was seen.
func waitEpoch(t *testing.T, fault string, c *hatest.Cluster, epoch int64, not ...*hatest.Server) time.Time {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if _, e := c.WaitLeader(30*time.Second, not...); e > epoch {
			return time.Now()
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s: no leader above epoch %d within 30s", fault, epoch)
	return time.Time{}
}

// startTableLoad creates the pools and starts the workers.
func startTableLoad(t *testing.T, wbin string, servers []string, limits hatest.Limits) []*hatest.Worker {
	t.Helper()
	cl, err := client.Dialer{ClientID: "hatest-table-admin"}.Dial(servers...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	l := &load{t: t, c: cl, adm: tollgatev1.NewAdminServiceClient(cl.Conn())}
	for _, name := range []string{"headroom", "saturated"} {
		p := &tollgatev1.Pool{Name: name, ConcurrencyLimit: limits.Concurrency[name], DefaultLeaseTtl: durationpb.New(tableTTL), MaxLeaseTtl: durationpb.New(tableTTL)}
		l.admin("creating pool "+name, func(ctx context.Context) error {
			_, err := l.adm.CreatePool(ctx, &tollgatev1.CreatePoolRequest{Pool: p}, grpc.WaitForReady(true))
			return err
		})
	}
	var ws []*hatest.Worker
	for i := range tableWorkers {
		hold := func(pool string, maxWeight int64, minHold, maxHold time.Duration) hatest.HoldSpec {
			return hatest.HoldSpec{Pool: pool, Goroutines: 2, TTL: tableTTL, MaxWeight: maxWeight, MinHold: minHold, MaxHold: maxHold,
				LongEvery: 3, LongMin: 2 * time.Second, LongMax: 8 * time.Second}
		}
		ws = append(ws, hatest.StartWorker(t, wbin, hatest.Workload{
			Worker: fmt.Sprintf("worker-%d", i), Servers: servers, Seed: uint64(i + 1), Margin: tableMargin,
			Holds: []hatest.HoldSpec{
				hold("headroom", 2, 20*time.Millisecond, 200*time.Millisecond),
				hold("saturated", 1, 20*time.Millisecond, 200*time.Millisecond),
			},
		}))
	}
	return ws
}

// failoverTable is the Markdown table of runs per fault kind: median and
// max of each measure.
func failoverTable(runs []faultRun) string {
	var b strings.Builder
	b.WriteString("| fault | runs | new leader | first renew | first grant, headroom | first grant, saturated | leases lost |\n")
	b.WriteString("|---|---|---|---|---|---|---|\n")
	for k, fk := range faultKinds {
		var leader, renew, head, sat []time.Duration
		var lost []int
		for _, r := range runs {
			if r.kind != k {
				continue
			}
			leader = append(leader, r.leader)
			rn := time.Duration(-1)
			for _, x := range r.recovered {
				if x.Renew >= 0 && (rn < 0 || x.Renew < rn) {
					rn = x.Renew
				}
				switch x.Pool {
				case "headroom":
					head = append(head, x.Grant)
				case "saturated":
					sat = append(sat, x.Grant)
				}
			}
			renew = append(renew, rn)
			lost = append(lost, r.lost)
		}
		if len(leader) == 0 {
			continue
		}
		slices.Sort(lost)
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s | %d / %d |\n", fk.name, len(leader),
			medMax(leader), medMax(renew), medMax(head), medMax(sat), lost[len(lost)/2], lost[len(lost)-1])
	}
	return b.String()
}

// medMax is "median / max" of ds in seconds; a negative one (nothing came
// before the next fault) is "none" and counts as the largest.
func medMax(ds []time.Duration) string {
	s := slices.Clone(ds)
	slices.SortFunc(s, func(a, b time.Duration) int {
		switch {
		case a < 0 && b < 0:
			return 0
		case a < 0:
			return 1
		case b < 0:
			return -1
		}
		return int(a - b)
	})
	f := func(d time.Duration) string {
		if d < 0 {
			return "none"
		}
		return fmt.Sprintf("%.2f s", d.Seconds())
	}
	return f(s[len(s)/2]) + " / " + f(s[len(s)-1])
}
