package server

import (
	"context"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/election"
	"github.com/tollgate/tollgate/internal/etcdtest"
	"github.com/tollgate/tollgate/internal/events"
	"github.com/tollgate/tollgate/internal/fanout"
	"github.com/tollgate/tollgate/internal/testwait"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/limiter/fakeclock"
	commonv3 "github.com/tollgate/tollgate/proto/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/tollgate/tollgate/proto/envoy/service/ratelimit/v3"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
	"github.com/tollgate/tollgate/proto/tollgate/v1/shard"
)

// fanCluster starts n standalone servers that take each other (and the
// extra addresses) for the members of a cluster: each answers the
// listings from every member, as a server of a cluster does.
func fanCluster(t *testing.T, n int, timeout time.Duration, extra []string, cfgOf func(i int) Config) []*env {
	t.Helper()
	var lis []net.Listener
	members := slices.Clone(extra)
	for range n {
		l := listen(t)
		lis = append(lis, l)
		members = append(members, l.Addr().String())
	}
	var envs []*env
	for i, l := range lis {
		fc := fakeclock.New(testStart)
		cfg := Config{}
		if cfgOf != nil {
			cfg = cfgOf(i)
		}
		cfg.Clock, cfg.ShutdownTimeout, cfg.Advertise = fc, 2*time.Second, l.Addr().String()
		srv := New(cfg)
		srv.fan = fanout.New(fanout.Config{Self: cfg.Advertise, Members: func() []string { return members },
			DialOptions: peerDialOptions(nil), Timeout: timeout})
		envs = append(envs, serveEnv(t, srv, fc, l))
	}
	return envs
}

// frozenMember is an address that accepts connections and never answers,
// as a SIGSTOPped server's does.
func frozenMember(t *testing.T) string {
	t.Helper()
	l := listen(t)
	t.Cleanup(func() { l.Close() })
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	return l.Addr().String()
}

// createPools creates pools p0..p(n-1) with prefix on e.
func createPools(e *env, prefix string, n int) (names []string) {
	for i := range n {
		name := fmt.Sprintf("%s%d", prefix, i)
		e.createPool(&tollgatev1.Pool{Name: name, ConcurrencyLimit: 1})
		names = append(names, name)
	}
	return names
}

// listAll follows ListPools' pages of size through e and returns each
// pool's owner, in the order listed.
func listAll(t *testing.T, e *env, size int32, wantTotal int) (names []string, owners map[string]string) {
	t.Helper()
	owners = map[string]string{}
	tok := ""
	for {
		resp, err := e.adm.ListPools(e.ctx(), &tollgatev1.ListPoolsRequest{PageSize: size, PageToken: tok})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.GetUnreachable()) > 0 {
			t.Fatalf("unreachable %v", resp.GetUnreachable())
		}
		if resp.GetTotalSize() != int32(wantTotal) {
			t.Fatalf("total_size %d, want %d", resp.GetTotalSize(), wantTotal)
		}
		if len(resp.GetPools()) > int(size) {
			t.Fatalf("a page of %d pools, asked for %d", len(resp.GetPools()), size)
		}
		for i, p := range resp.GetPools() {
			names = append(names, p.GetName())
			owners[p.GetName()] = resp.GetStatuses()[i].GetOwner()
		}
		if tok = resp.GetNextPageToken(); tok == "" {
			return names, owners
		}
	}
}

func TestFanoutListsEveryServersPools(t *testing.T) {
	envs := fanCluster(t, 3, 10*time.Second, nil, nil)
	want := map[string]string{}
	var all []string
	for i, e := range envs {
		for _, n := range createPools(e, fmt.Sprintf("%c", 'a'+i), 3) {
			want[n] = e.addr
			all = append(all, n)
		}
	}
	slices.Sort(all)
	for _, e := range envs {
		for _, size := range []int32{2, 4, 100} {
			names, owners := listAll(t, e, size, 9)
			if !slices.Equal(names, all) {
				t.Fatalf("through %s, pages of %d: %v, want %v", e.addr, size, names, all)
			}
			for n, o := range owners {
				if want[n] != o {
					t.Fatalf("pool %s: owner %q, want %q", n, o, want[n])
				}
			}
		}
		var stats []string
		tok := ""
		for {
			resp, err := e.adm.GetStats(e.ctx(), &tollgatev1.GetStatsRequest{PageSize: 4, PageToken: tok})
			if err != nil {
				t.Fatal(err)
			}
			for _, st := range resp.GetStats() {
				stats = append(stats, st.GetPool())
				if st.GetStatus().GetOwner() != want[st.GetPool()] {
					t.Fatalf("GetStats %s: owner %q, want %q", st.GetPool(), st.GetStatus().GetOwner(), want[st.GetPool()])
				}
			}
			if tok = resp.GetNextPageToken(); tok == "" {
				break
			}
		}
		if !slices.Equal(stats, all) {
			t.Fatalf("GetStats through %s: %v, want %v", e.addr, stats, all)
		}
	}
	// A pool's own calls are its owner's, and say so.
	if got := envs[1].status("b0").GetOwner(); got != envs[1].addr {
		t.Fatalf("GetPool's owner %q, want %q", got, envs[1].addr)
	}
	st, err := envs[1].adm.GetStats(envs[1].ctx(), &tollgatev1.GetStatsRequest{Pool: "b0"})
	if err != nil || st.GetStats()[0].GetStatus().GetOwner() != envs[1].addr {
		t.Fatalf("GetStats of b0: %v, %v", st, err)
	}
	// A caller may narrow a listing to the server it asks (the header the
	// servers forward with); it only narrows.
	local := metadata.AppendToOutgoingContext(envs[1].ctx(), fanout.ScopeHeader, fanout.ScopeLocal)
	resp, err := envs[1].adm.ListPools(local, &tollgatev1.ListPoolsRequest{})
	if err != nil || len(resp.GetPools()) != 3 || resp.GetPools()[0].GetName() != "b0" || resp.GetStatuses()[0].GetOwner() != envs[1].addr {
		t.Fatalf("ListPools with the local scope: %v, %v", resp, err)
	}
}

func TestFanoutListClientsEveryServer(t *testing.T) {
	envs := fanCluster(t, 3, 10*time.Second, nil, nil)
	want := map[string]int{}
	for i, e := range envs {
		e.createPool(&tollgatev1.Pool{Name: fmt.Sprintf("p%d", i), ConcurrencyLimit: 5})
		for range i + 1 { // 1, 2 and 3 sessions
			c := e.session()
			c.call(acquireReq(1, &tollgatev1.AcquireRequest{Pool: fmt.Sprintf("p%d", i), Weight: i64(1)}))
			want[e.addr]++
		}
	}
	for _, e := range envs {
		got := map[string]int{}
		var order []string
		tok := ""
		for {
			resp, err := e.adm.ListClients(e.ctx(), &tollgatev1.ListClientsRequest{PageSize: 2, PageToken: tok})
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range resp.GetClients() {
				got[c.GetServer()]++
				order = append(order, c.GetServer()+"/"+c.GetSessionId())
				if c.GetLeases() != 1 {
					t.Fatalf("session %v holds %d leases, want 1", c, c.GetLeases())
				}
			}
			if tok = resp.GetNextPageToken(); tok == "" {
				break
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) || len(order) != 6 {
			t.Fatalf("ListClients through %s: %v (%v), want %v", e.addr, got, order, want)
		}
		if !slices.IsSortedFunc(order, func(a, b string) int {
			if len(a) != len(b) { // session ids are below 10 here
				return len(a) - len(b)
			}
			return compareStrings(a, b)
		}) || len(slices.Compact(slices.Clone(order))) != 6 {
			t.Fatalf("ListClients order %v", order)
		}
	}
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func TestFanoutMissingMemberNamedWithinTimeout(t *testing.T) {
	frozen := frozenMember(t)
	gone := listen(t)
	goneAddr := gone.Addr().String()
	gone.Close()
	envs := fanCluster(t, 2, 300*time.Millisecond, []string{frozen, goneAddr}, nil)
	createPools(envs[0], "a", 2)
	createPools(envs[1], "b", 2)
	want := []string{frozen, goneAddr}
	slices.Sort(want)
	resp, err := envs[0].adm.ListPools(envs[0].ctx(), &tollgatev1.ListPoolsRequest{})
	if err != nil || len(resp.GetPools()) != 4 || !slices.Equal(resp.GetUnreachable(), want) {
		t.Fatalf("ListPools with a frozen and a gone member: %v, %v; want 4 pools, unreachable %v", resp, err, want)
	}
	stats, err := envs[1].adm.GetStats(envs[1].ctx(), &tollgatev1.GetStatsRequest{})
	if err != nil || len(stats.GetStats()) != 4 || !slices.Equal(stats.GetUnreachable(), want) {
		t.Fatalf("GetStats: %v, %v", stats, err)
	}
	clients, err := envs[1].adm.ListClients(envs[1].ctx(), &tollgatev1.ListClientsRequest{})
	if err != nil || !slices.Equal(clients.GetUnreachable(), want) {
		t.Fatalf("ListClients: %v, %v", clients, err)
	}
	// A watch goes on with the members that answer and names the others.
	w, err := envs[0].adm.WatchEvents(envs[0].ctx(), &tollgatev1.WatchEventsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var lost []string
	for len(lost) < 2 {
		r, err := w.Recv()
		if err != nil {
			t.Fatal(err)
		}
		lost = append(lost, r.GetUnreachable()...)
	}
	slices.Sort(lost)
	if !slices.Equal(lost, want) {
		t.Fatalf("the watch names %v unreachable, want %v", lost, want)
	}
	envs[1].createPool(&tollgatev1.Pool{Name: "late", ConcurrencyLimit: 1})
	r, err := w.Recv()
	if err != nil || r.GetEvent().GetPool() != "late" || r.GetEvent().GetServer() != envs[1].addr {
		t.Fatalf("after the losses, the watch gives %v, %v", r, err)
	}
}

func TestFanoutWatchEventsEveryServer(t *testing.T) {
	envs := fanCluster(t, 3, 10*time.Second, nil, nil)
	recent := map[string]string{}
	for i, e := range envs {
		name := fmt.Sprintf("recent-%d", i)
		e.createPool(&tollgatev1.Pool{Name: name, ConcurrencyLimit: 1})
		recent[name] = e.addr
	}
	for _, e := range envs {
		ctx, cancel := context.WithCancel(e.ctx())
		w, err := e.adm.WatchEvents(ctx, &tollgatev1.WatchEventsRequest{IncludeRecent: true})
		if err != nil {
			t.Fatal(err)
		}
		// The header says every other server's watch is open: their live
		// events come too.
		if _, err := w.Header(); err != nil {
			t.Fatal(err)
		}
		want := maps.Clone(recent)
		for _, o := range envs {
			if o != e {
				name := "live-" + e.addr + "-" + o.addr
				o.createPool(&tollgatev1.Pool{Name: name, ConcurrencyLimit: 1})
				want[name] = o.addr
			}
		}
		seen := map[string]string{}
		for len(seen) < len(want) {
			r, err := w.Recv()
			if err != nil {
				t.Fatal(err)
			}
			if ev := r.GetEvent(); want[ev.GetPool()] != "" && ev.GetType() == "pool_created" {
				seen[ev.GetPool()] = ev.GetServer()
			}
		}
		if !maps.Equal(seen, want) {
			t.Fatalf("events through %s: %v, want %v", e.addr, seen, want)
		}
		cancel()
		if _, err := w.Recv(); status.Code(err) != codes.Canceled {
			t.Fatalf("after cancel: %v", err)
		}
	}
}

func TestFanoutForwardsTheCallersCredentials(t *testing.T) {
	const tok, other = "admin-token-0123456789", "another-token-0123456789"
	envs := fanCluster(t, 3, 10*time.Second, nil, func(i int) Config {
		if i == 2 { // a member that takes another token
			return Config{Auth: &auth.Config{AdminToken: other}}
		}
		return Config{Auth: &auth.Config{AdminToken: tok}}
	})
	with := func(ctx context.Context, token string) context.Context {
		return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	}
	envs[0].createPoolCtx(with(envs[0].ctx(), tok), "a")
	envs[1].createPoolCtx(with(envs[1].ctx(), tok), "b")
	envs[2].createPoolCtx(with(envs[2].ctx(), other), "c")
	resp, err := envs[0].adm.ListPools(with(envs[0].ctx(), tok), &tollgatev1.ListPoolsRequest{})
	if err != nil || len(resp.GetPools()) != 2 || !slices.Equal(resp.GetUnreachable(), []string{envs[2].addr}) {
		t.Fatalf("ListPools: %v, %v; want a and b, and the member that refuses the caller's token named", resp, err)
	}
	// Without credentials, nothing: the server checks first, and a forged
	// scope header does not skip the check.
	for _, ctx := range []context.Context{envs[0].ctx(), metadata.AppendToOutgoingContext(envs[0].ctx(), fanout.ScopeHeader, fanout.ScopeLocal)} {
		_, err := envs[0].adm.ListPools(ctx, &tollgatev1.ListPoolsRequest{})
		wantStatus(t, err, codes.Unauthenticated, apierr.ReasonUnauthenticated)
	}
}

func (e *env) createPoolCtx(ctx context.Context, name string) {
	e.t.Helper()
	if _, err := e.adm.CreatePool(ctx, &tollgatev1.CreatePoolRequest{Pool: &tollgatev1.Pool{Name: name, ConcurrencyLimit: 1}}); err != nil {
		e.t.Fatal(err)
	}
}

func TestFanoutBoundsCallersInFlight(t *testing.T) {
	envs := fanCluster(t, 2, 10*time.Second, nil, nil)
	// Watches hold their slot while open: the caller's ninth cluster-wide
	// call is refused, and admitted again once one watch has ended.
	var cancels []context.CancelFunc
	for range fanout.DefaultMaxPerCaller {
		ctx, cancel := context.WithCancel(envs[0].ctx())
		cancels = append(cancels, cancel)
		w, err := envs[0].adm.WatchEvents(ctx, &tollgatev1.WatchEventsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Header(); err != nil {
			t.Fatal(err)
		}
	}
	w, err := envs[0].adm.WatchEvents(envs[0].ctx(), &tollgatev1.WatchEventsRequest{})
	if err == nil {
		_, err = w.Recv()
	}
	wantStatus(t, err, codes.ResourceExhausted, apierr.ReasonTooManyRequests)
	_, err = envs[0].adm.ListPools(envs[0].ctx(), &tollgatev1.ListPoolsRequest{})
	wantStatus(t, err, codes.ResourceExhausted, apierr.ReasonTooManyRequests)
	cancels[0]()
	testwait.For(t, "a cluster-wide call admitted once a watch has ended", func() bool {
		_, err := envs[0].adm.ListPools(envs[0].ctx(), &tollgatev1.ListPoolsRequest{})
		return err == nil
	})
	for _, c := range cancels {
		c()
	}
}

// Through any server of a cluster, the listings show every pool with its
// owner, the sessions of every server, and every server's events.
func TestClusterListingsThroughAnyServer(t *testing.T) {
	fc := fakeclock.New(testStart)
	ms := startCluster(t, etcdtest.Start(t), fc, 3, []limiter.PoolConfig{{Name: "db", ConcurrencyLimit: 2}, {Name: "api", Rate: 10}})
	lead := leader(t, ms)
	for _, m := range ms {
		testwait.For(t, "every member sees the leader and every member", func() bool {
			v := m.srv.leadership.Cluster()
			return v.Leader == lead.addr && len(v.Members) == len(ms)
		})
	}
	c := lead.session()
	c.call(acquireReq(1, &tollgatev1.AcquireRequest{Pool: "db", Weight: i64(1)}))
	for _, m := range ms {
		names, owners := listAll(t, m.env, 1, 2+slices.Index(ms, m))
		if !slices.Equal(names[:2], []string{"api", "db"}) || owners["api"] != lead.addr || owners["db"] != lead.addr {
			t.Fatalf("ListPools through %s: %v %v, want api and db owned by %s", m.addr, names, owners, lead.addr)
		}
		stats, err := m.adm.GetStats(m.ctx(), &tollgatev1.GetStatsRequest{})
		if err != nil || len(stats.GetStats()) < 2 || stats.GetStats()[1].GetStatus().GetOwner() != lead.addr || stats.GetStats()[1].GetStatus().GetHeld() != 1 {
			t.Fatalf("GetStats through %s: %v, %v", m.addr, stats, err)
		}
		cl, err := m.adm.ListClients(m.ctx(), &tollgatev1.ListClientsRequest{})
		if err != nil || len(cl.GetClients()) != 1 || cl.GetClients()[0].GetServer() != lead.addr || cl.GetClients()[0].GetLeases() != 1 {
			t.Fatalf("ListClients through %s: %v, %v", m.addr, cl, err)
		}
		lead.createPool(&tollgatev1.Pool{Name: "late-" + m.addr, ConcurrencyLimit: 1})
		w, err := m.adm.WatchEvents(m.ctx(), &tollgatev1.WatchEventsRequest{IncludeRecent: true})
		if err != nil {
			t.Fatal(err)
		}
		for {
			r, err := w.Recv()
			if err != nil {
				t.Fatalf("WatchEvents through %s: %v", m.addr, err)
			}
			if ev := r.GetEvent(); ev.GetType() == events.PoolCreated && ev.GetPool() == "late-"+m.addr {
				if ev.GetServer() != lead.addr {
					t.Fatalf("an event of %s says it is %s's", lead.addr, ev.GetServer())
				}
				break
			}
		}
	}
}

// envoyPool is a pool that limits the Envoy descriptor key=value to
// burst hits.
func envoyPool(name, key, value string, burst int64) *tollgatev1.Pool {
	return &tollgatev1.Pool{Name: name, Rate: 0.001, Burst: burst,
		Envoy: &tollgatev1.EnvoyRule{Domain: "edge", Descriptors: []*tollgatev1.EnvoyDescriptorKey{{Key: key, Value: value}}}}
}

func envoyReq(kv ...string) *rlsv3.RateLimitRequest {
	req := &rlsv3.RateLimitRequest{Domain: "edge"}
	for i := 0; i < len(kv); i += 2 {
		req.Descriptors = append(req.Descriptors, &commonv3.RateLimitDescriptor{
			Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: kv[i], Value: kv[i+1]}}})
	}
	return req
}

// Envoy's API through any server: each descriptor is answered by the
// server whose pool it matches (one hop), and the overall code is
// OVER_LIMIT if any says so, the others' tokens taken.
func TestFanoutEnvoyThroughAnyServer(t *testing.T) {
	envs := fanCluster(t, 3, 10*time.Second, nil, func(int) Config { return Config{EnvoyRLS: true} })
	envs[0].createPool(envoyPool("edge-a", "route", "a", 100))
	envs[1].createPool(envoyPool("edge-b", "route", "b", 2))
	for _, e := range envs {
		rls := rlsv3.NewRateLimitServiceClient(e.conn)
		resp, err := rls.ShouldRateLimit(e.ctx(), envoyReq("route", "a", "route", "b", "route", "none"))
		if err != nil {
			t.Fatal(err)
		}
		st := resp.GetStatuses()
		if len(st) != 3 || st[0].GetCurrentLimit().GetName() != "edge-a" || st[1].GetCurrentLimit().GetName() != "edge-b" ||
			st[2].GetCurrentLimit() != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			t.Fatalf("through %s: %v", e.addr, resp)
		}
		if e == envs[1] { // edge-b's burst of 2 is spent now
			break
		}
	}
	resp, err := rlsv3.NewRateLimitServiceClient(envs[2].conn).ShouldRateLimit(envs[2].ctx(), envoyReq("route", "a", "route", "b"))
	if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT ||
		resp.GetStatuses()[0].GetCode() != rlsv3.RateLimitResponse_OK || resp.GetStatuses()[1].GetCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("over edge-b's limit, through a third server: %v, %v", resp, err)
	}
	if got := envs[0].status("edge-a").GetTokensAvailable(); got != 97 {
		t.Fatalf("edge-a holds %v tokens, want 97: each of its three OK descriptors took one, also beside an OVER_LIMIT", got)
	}
}

// A forwarded Envoy call is never forwarded again, and a server that
// does not answer makes the call fail (Envoy's failure mode applies)
// within the timeout.
func TestFanoutEnvoyOneHopAndMissingMember(t *testing.T) {
	frozen := frozenMember(t)
	envs := fanCluster(t, 2, 300*time.Millisecond, []string{frozen}, func(int) Config { return Config{EnvoyRLS: true} })
	envs[1].createPool(envoyPool("edge-b", "route", "b", 100))
	local := metadata.AppendToOutgoingContext(envs[0].ctx(), fanout.ScopeHeader, fanout.ScopeLocal)
	resp, err := rlsv3.NewRateLimitServiceClient(envs[0].conn).ShouldRateLimit(local, envoyReq("route", "b"))
	if err != nil || resp.GetStatuses()[0].GetCurrentLimit() != nil {
		t.Fatalf("a call marked local is answered from the server's own pools only: %v, %v", resp, err)
	}
	_, err = rlsv3.NewRateLimitServiceClient(envs[0].conn).ShouldRateLimit(envs[0].ctx(), envoyReq("route", "b"))
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), frozen) {
		t.Fatalf("with a frozen member: %v, want UNAVAILABLE naming %s", err, frozen)
	}
}

// A cluster of three servers leading six shards: through any server, the
// listings show every pool with the owner of its shard, every server's
// sessions, and every server's events.
func TestShardedClusterListingsThroughAnyServer(t *testing.T) {
	const shards = 6
	var seed []limiter.PoolConfig
	for i := range 12 {
		seed = append(seed, limiter.PoolConfig{Name: fmt.Sprintf("p%02d", i), ConcurrencyLimit: 4})
	}
	fc := fakeclock.New(testStart)
	ms := startShardCluster(t, etcdtest.Start(t), fc, 3, shards, seed)
	own := owners(t, ms, shards, 2)
	ownerOf := func(pool string) *member { return own[shard.Of(pool, shards)] }
	for _, m := range ms {
		testwait.For(t, "every member sees every member", func() bool { return len(m.srv.leadership.Cluster().Members) == len(ms) })
	}
	for _, m := range ms {
		c := m.session()
		p := ownerOf("p00")
		if p == m {
			c.call(acquireReq(1, &tollgatev1.AcquireRequest{Pool: "p00", Weight: i64(1)}))
		} else {
			c.call(&tollgatev1.SessionRequest{RequestId: 1, Kind: &tollgatev1.SessionRequest_Hello{Hello: &tollgatev1.Hello{ClientId: "c-" + m.addr}}})
		}
	}
	for _, m := range ms {
		names, owners := listAll(t, m.env, 5, len(seed))
		if len(names) != len(seed) {
			t.Fatalf("through %s: %v", m.addr, names)
		}
		for _, n := range names {
			if owners[n] != ownerOf(n).addr {
				t.Fatalf("through %s: pool %s owned by %s, want %s (shard %d)", m.addr, n, owners[n], ownerOf(n).addr, shard.Of(n, shards))
			}
		}
		stats, err := m.adm.GetStats(m.ctx(), &tollgatev1.GetStatsRequest{PageSize: 100})
		if err != nil || len(stats.GetStats()) != len(seed) || len(stats.GetUnreachable()) != 0 {
			t.Fatalf("GetStats through %s: %v, %v", m.addr, stats, err)
		}
		for _, st := range stats.GetStats() {
			if st.GetStatus().GetOwner() != ownerOf(st.GetPool()).addr {
				t.Fatalf("GetStats through %s: %s owned by %s", m.addr, st.GetPool(), st.GetStatus().GetOwner())
			}
		}
		cl, err := m.adm.ListClients(m.ctx(), &tollgatev1.ListClientsRequest{})
		if err != nil || len(cl.GetClients()) != len(ms) {
			t.Fatalf("ListClients through %s: %v, %v", m.addr, cl, err)
		}
		for _, c := range cl.GetClients() {
			if (c.GetServer() == ownerOf("p00").addr) != (c.GetLeases() == 1) {
				t.Fatalf("ListClients through %s: %v", m.addr, c)
			}
		}
	}
	for i, m := range ms {
		name := fmt.Sprintf("late%d", i)
		owner := ownerOf(name)
		owner.createPool(&tollgatev1.Pool{Name: name, ConcurrencyLimit: 1})
		w, err := m.adm.WatchEvents(m.ctx(), &tollgatev1.WatchEventsRequest{IncludeRecent: true})
		if err != nil {
			t.Fatal(err)
		}
		for {
			r, err := w.Recv()
			if err != nil {
				t.Fatalf("WatchEvents through %s: %v", m.addr, err)
			}
			if ev := r.GetEvent(); ev.GetType() == events.PoolCreated && ev.GetPool() == name {
				if ev.GetServer() != owner.addr {
					t.Fatalf("the event of %s's pool says it is %s's", owner.addr, ev.GetServer())
				}
				break
			}
		}
	}
}

// Over mutual TLS the servers dial each other with their own certificate
// (auth.TLS.Peer): the receiver sees the forwarding server's name. With
// it among the admin names, a certificate admin's listing gathers every
// part; without, the other part is refused and named, and nothing more
// is shown.
func TestFanoutOverMutualTLS(t *testing.T) {
	for _, serverIsAdmin := range []bool{true, false} {
		pki := newPKI(t, true)
		names := []string{"ops-admin"}
		if serverIsAdmin {
			names = append(names, "server")
		}
		var addrs []string
		var lis []net.Listener
		for range 2 {
			l := listen(t)
			lis = append(lis, l)
			addrs = append(addrs, l.Addr().String())
		}
		var admins []tollgatev1.AdminServiceClient
		for i, l := range lis {
			srv := New(Config{Clock: fakeclock.New(testStart), ShutdownTimeout: 2 * time.Second, Advertise: addrs[i],
				Auth: &auth.Config{AdminNames: names, ClientCerts: true}})
			srv.fan = fanout.New(fanout.Config{Self: addrs[i], Members: func() []string { return addrs },
				DialOptions: []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(pki.server.Peer))}})
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			gs := srv.GRPCServer(grpc.Creds(credentials.NewTLS(pki.server.GRPC)))
			go func() { done <- srv.ServeGRPC(ctx, gs, l) }()
			t.Cleanup(func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("ServeGRPC: %v", err)
				}
			})
			conn := dial(t, addrs[i], pki.creds(t, "ops-admin"))
			t.Cleanup(func() { conn.Close() })
			adm := tollgatev1.NewAdminServiceClient(conn)
			ctxT, cancelT := context.WithTimeout(context.Background(), waitLimit)
			if _, err := adm.CreatePool(ctxT, &tollgatev1.CreatePoolRequest{Pool: &tollgatev1.Pool{Name: fmt.Sprintf("p%d", i), ConcurrencyLimit: 1}}); err != nil {
				t.Fatal(err)
			}
			cancelT()
			admins = append(admins, adm)
		}
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		resp, err := admins[0].ListPools(ctx, &tollgatev1.ListPoolsRequest{})
		cancel()
		if serverIsAdmin && (err != nil || len(resp.GetPools()) != 2 || len(resp.GetUnreachable()) != 0 || resp.GetStatuses()[1].GetOwner() != addrs[1]) {
			t.Fatalf("with the servers' name an admin: %v, %v", resp, err)
		}
		if !serverIsAdmin && (err != nil || len(resp.GetPools()) != 1 || !slices.Equal(resp.GetUnreachable(), []string{addrs[1]})) {
			t.Fatalf("without: %v, %v", resp, err)
		}
	}
}

// Envoy through any server of a cluster of three servers leading six
// shards: each descriptor is taken from its pool, on its shard's owner,
// whichever server is asked.
func TestShardedClusterEnvoyThroughAnyServer(t *testing.T) {
	const shards = 6
	fc := fakeclock.New(testStart)
	etcd := etcdtest.Start(t)
	var ms []*member
	for range 3 {
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{etcd.Endpoint()}, DialTimeout: 2 * time.Second,
			Logger: zap.NewNop(), DialOptions: election.DialOptions(clusterTTL)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		lis := listen(t)
		srv, err := OpenCluster(Config{Clock: fc, ShutdownTimeout: 2 * time.Second, Advertise: lis.Addr().String(), EnvoyRLS: true},
			ClusterConfig{Client: c, SessionTTL: clusterTTL, Shards: shards}, nil)
		if err != nil {
			t.Fatal(err)
		}
		ms = append(ms, &member{env: serveEnv(t, srv, fc, lis), etcd: c})
	}
	own := owners(t, ms, shards, 2)
	for _, m := range ms {
		testwait.For(t, "every member sees every member", func() bool { return len(m.srv.leadership.Cluster().Members) == len(ms) })
	}
	var kv []string
	for i := range 6 {
		name := fmt.Sprintf("edge%d", i)
		own[shard.Of(name, shards)].createPool(envoyPool(name, "route", strconv.Itoa(i), 100))
		kv = append(kv, "route", strconv.Itoa(i))
	}
	for _, m := range ms {
		resp, err := rlsv3.NewRateLimitServiceClient(m.conn).ShouldRateLimit(m.ctx(), envoyReq(kv...))
		if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || len(resp.GetStatuses()) != 6 {
			t.Fatalf("through %s: %v, %v", m.addr, resp, err)
		}
		for i, st := range resp.GetStatuses() {
			if st.GetCurrentLimit().GetName() != fmt.Sprintf("edge%d", i) {
				t.Fatalf("through %s: descriptor %d answered by %v", m.addr, i, st)
			}
		}
	}
	for i := range 6 {
		name := fmt.Sprintf("edge%d", i)
		if got := own[shard.Of(name, shards)].status(name).GetTokensAvailable(); got != 97 {
			t.Fatalf("%s on its owner holds %v tokens, want 97: one taken per call, through each of the three servers", name, got)
		}
	}
}
