package server

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/events"
	"github.com/tollgate/tollgate/internal/httpapi"
	"github.com/tollgate/tollgate/internal/testwait"
	"github.com/tollgate/tollgate/limiter/fakeclock"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

func TestHTTPPoolsAndEvents(t *testing.T) {
	o := startOps(t, Config{}, nil)
	e := o.env()
	e.createPool(&tollgatev1.Pool{Name: "orders-db", Description: "primary", ConcurrencyLimit: 4})
	e.acquire(&tollgatev1.AcquireRequest{Pool: "orders-db", ClientId: "w1", Description: "nightly job", Ttl: dur(time.Second)})
	e.acquire(&tollgatev1.AcquireRequest{Pool: "orders-db", ClientId: "w2"})

	code, body := o.get(nil, "/api/pools")
	if code != 200 {
		t.Fatalf("GET /api/pools = %d %s", code, body)
	}
	var pools httpapi.PoolsResponse
	if err := json.Unmarshal([]byte(body), &pools); err != nil {
		t.Fatal(err)
	}
	if len(pools.Pools) != 1 || pools.Total != 1 || !pools.Serving || pools.More {
		t.Fatalf("pools = %+v", pools)
	}
	p := pools.Pools[0]
	if p.Name != "orders-db" || p.Configured.ConcurrencyLimit != 4 || p.Status.Held != 2 || p.Status.Leases != 2 || p.Effective != nil {
		t.Fatalf("pool = %+v", p)
	}
	if strings.Contains(body, `"effective"`) {
		t.Error("effective is present although no limit differs from the configured one")
	}

	o.clock.Advance(2 * time.Second) // w1's lease expires
	testwait.For(t, "the expiry event", func() bool { return len(o.srv.RecentEvents()) == 2 })
	code, body = o.get(nil, "/api/events")
	if code != 200 {
		t.Fatalf("GET /api/events = %d %s", code, body)
	}
	var evs httpapi.EventsResponse
	if err := json.Unmarshal([]byte(body), &evs); err != nil {
		t.Fatal(err)
	}
	if len(evs.Events) != 2 {
		t.Fatalf("events = %+v", evs)
	}
	exp, created := evs.Events[0], evs.Events[1]
	if exp.Type != events.LeaseExpired || exp.Pool != "orders-db" || exp.LeaseID != "1" || exp.ClientID != "w1" || exp.Description != "nightly job" {
		t.Errorf("newest event = %+v, want w1's lease expiry", exp)
	}
	if created.Type != events.PoolCreated || created.Actor != "127.0.0.1" || !strings.Contains(created.Detail, "concurrency_limit=4") {
		t.Errorf("oldest event = %+v, want the pool's creation", created)
	}

	code, body = o.get(nil, "/api/pools?limit=0")
	if code != http.StatusBadRequest {
		t.Errorf("GET /api/pools?limit=0 = %d %s", code, body)
	}
}

// TestHTTPAndMetricsShowEffectiveLimits: once adaptive control lowers a
// pool's limit, /api/pools carries "effective" beside "configured", and
// /metrics has the effective gauge.
func TestHTTPAndMetricsShowEffectiveLimits(t *testing.T) {
	o := startOps(t, Config{}, nil)
	e := o.env()
	e.createPool(&tollgatev1.Pool{Name: "db", ConcurrencyLimit: 10, Adaptive: &tollgatev1.Adaptive{Enabled: true, MinSamples: 4}})
	if _, err := e.lim.Report(e.ctx(), &tollgatev1.ReportRequest{Reports: []*tollgatev1.PoolReport{{Pool: "db", Errors: 4}}}); err != nil {
		t.Fatal(err)
	}
	_, body := o.get(nil, "/api/pools")
	var pools httpapi.PoolsResponse
	if err := json.Unmarshal([]byte(body), &pools); err != nil {
		t.Fatal(err)
	}
	p := pools.Pools[0]
	if p.Configured.ConcurrencyLimit != 10 || p.Effective == nil || p.Effective.ConcurrencyLimit != 8 {
		t.Fatalf("after a throttle: configured %+v, effective %+v", p.Configured, p.Effective)
	}
	_, m := o.get(nil, "/metrics")
	for _, want := range []string{`tollgate_pool_concurrency_limit{pool="db"} 10`, `tollgate_pool_effective_concurrency_limit{pool="db"} 8`} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

func TestHTTPStaticAndHeaders(t *testing.T) {
	o := startOps(t, Config{}, nil)
	resp, err := o.http.Client().Get(o.http.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET / = %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") {
		t.Errorf("Content-Security-Policy = %q", csp)
	}
	for _, path := range []string{"/assets/app.js", "/assets/style.css"} {
		if code, body := o.get(nil, path); code != 200 || len(body) < 100 {
			t.Errorf("GET %s = %d (%d bytes)", path, code, len(body))
		}
	}
	for _, path := range []string{"/assets/../http.go", "/assets/nope.js", "/nope"} {
		if code, _ := o.get(nil, path); code != 404 {
			t.Errorf("GET %s = %d, want 404", path, code)
		}
	}
}

// /healthz answers while the process runs; /readyz and gRPC health turn
// NOT_SERVING as soon as shutdown starts, while calls in flight drain.
func TestHTTPReadinessFollowsDrain(t *testing.T) {
	fc := fakeclock.New(testStart)
	srv := New(Config{Clock: fc, ShutdownTimeout: 5 * time.Second})
	h := httptest.NewServer(srv.HTTPHandler())
	defer h.Close()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	draining := make(chan struct{}) // closed when DrainPool's handler runs
	gs := srv.GRPCServer(grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if info.FullMethod == adminServicePrefix+"DrainPool" {
			close(draining)
		}
		return handler(ctx, req)
	}))
	go func() { done <- srv.ServeGRPC(ctx, gs, lis) }()
	conn := dial(t, lis.Addr().String())
	defer conn.Close()
	e := &env{t: t, srv: srv, clock: fc, conn: conn, lim: tollgatev1.NewLimiterServiceClient(conn), adm: tollgatev1.NewAdminServiceClient(conn)}
	get := func(path string) int {
		resp, err := h.Client().Get(h.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if get("/readyz") != 200 || get("/healthz") != 200 {
		t.Fatal("not ready while serving")
	}
	e.createPool(&tollgatev1.Pool{Name: "db", ConcurrencyLimit: 1})
	e.acquire(&tollgatev1.AcquireRequest{Pool: "db"})
	if _, err := e.adm.SuspendPool(e.ctx(), &tollgatev1.SuspendPoolRequest{Name: "db"}); err != nil {
		t.Fatal(err)
	}
	waiting := make(chan error, 1)
	go func() {
		_, err := e.adm.DrainPool(context.Background(), &tollgatev1.DrainPoolRequest{Name: "db"})
		waiting <- err
	}()
	<-draining

	stop() // shutdown starts; the waiting DrainPool call holds GracefulStop
	testwait.For(t, "readyz to turn 503", func() bool { return get("/readyz") == http.StatusServiceUnavailable })
	hc, err := srv.health.Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || hc.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("gRPC health during the drain = %v, %v", hc, err)
	}
	if get("/healthz") != 200 {
		t.Fatal("healthz failed during the drain")
	}
	select {
	case err := <-done:
		t.Fatalf("Serve returned (%v) while a call was in flight", err)
	default:
	}
	if _, err := srv.Engine().GetPool("db"); err != nil {
		t.Fatalf("the engine closed before the drain ended: %v", err)
	}
	srv.Engine().Close() // end the waiting call, and so the drain
	if err := <-waiting; err == nil {
		t.Fatal("DrainPool returned without error while a lease was held")
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// With credentials configured, every HTTP path but the probes needs a
// verified client certificate or the admin token.
func TestHTTPAuth(t *testing.T) {
	const tok = "http-admin-token-0123456789"
	pki := newPKI(t, true)
	o := startOps(t, Config{Auth: &auth.Config{AdminNames: []string{"ops"}, AdminToken: tok, ClientCerts: true}}, pki.server)
	anon := pki.httpClient(t, "")
	viewer := pki.httpClient(t, "prometheus")
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, body := o.get(anon, path); code != 200 {
			t.Errorf("GET %s without credentials = %d %s", path, code, body)
		}
	}
	for _, path := range []string{"/", "/metrics", "/api/pools", "/api/events", "/assets/app.js"} {
		code, body := o.get(anon, path)
		if code != http.StatusUnauthorized || !strings.Contains(body, "client certificate") || !strings.Contains(body, "Bearer") {
			t.Errorf("GET %s without credentials = %d %q, want 401 saying what is needed", path, code, body)
		}
		if code, _ := o.get(anon, path, "Authorization", "Bearer wrong"); code != http.StatusUnauthorized {
			t.Errorf("GET %s with a wrong token = %d, want 401", path, code)
		}
		if code, _ := o.get(anon, path, "Authorization", "Bearer "+tok); code != 200 {
			t.Errorf("GET %s with the token = %d", path, code)
		}
		if code, _ := o.get(viewer, path); code != 200 {
			t.Errorf("GET %s with a client certificate = %d", path, code)
		}
	}
}

// /api/pools tells an active or passive pool by its resource_kind and
// counts its instances and providers.
func TestHTTPResourcePools(t *testing.T) {
	o := startOps(t, Config{}, nil)
	e := o.env()
	e.createPool(&tollgatev1.Pool{Name: "db", ResourceKind: tollgatev1.ResourceKind_RESOURCE_KIND_ACTIVE})
	if _, err := e.adm.AddResources(e.ctx(), &tollgatev1.AddResourcesRequest{Pool: "db", Resources: wireRes("c1", "c2", "c3")}); err != nil {
		t.Fatal(err)
	}
	e.acquire(&tollgatev1.AcquireRequest{Pool: "db"})
	_, body := o.get(nil, "/api/pools")
	var pools httpapi.PoolsResponse
	if err := json.Unmarshal([]byte(body), &pools); err != nil {
		t.Fatal(err)
	}
	if p := pools.Pools[0]; p.ResourceKind != "active" || p.Status.Resources != 3 || p.Status.ResourcesFree != 2 || p.Status.Held != 1 || p.Status.WaitGrants != 1 || p.Status.WaitP99Ms != 0 {
		t.Fatalf("pool = %+v", p)
	}
}

// /api/pools reports the waits of the last minute's grants: a grant that
// waited 2s shows as the 99th percentile, within the histogram's 25%.
func TestHTTPPoolsWaitPercentiles(t *testing.T) {
	o := startOps(t, Config{}, nil)
	e := o.env()
	e.createPool(&tollgatev1.Pool{Name: "db", ConcurrencyLimit: 1})
	s := e.session()
	first := s.call(acquireReq(1, &tollgatev1.AcquireRequest{Pool: "db", Ttl: dur(time.Minute)})).GetAcquire().GetLease()
	s.send(acquireReq(2, &tollgatev1.AcquireRequest{Pool: "db", Ttl: dur(time.Minute)}))
	testwait.For(t, "the second acquire to wait", func() bool { return e.status("db").GetWaiting() == 1 })
	o.clock.Advance(2 * time.Second)
	s.send(releaseReq(3, "db", first.GetId()))
	testwait.For(t, "the waiter's grant", func() bool { return e.status("db").GetGranted() == 2 })
	_, body := o.get(nil, "/api/pools")
	var pools httpapi.PoolsResponse
	if err := json.Unmarshal([]byte(body), &pools); err != nil {
		t.Fatal(err)
	}
	st := pools.Pools[0].Status
	if st.WaitGrants != 2 || st.WaitP50Ms != 0 || st.WaitP99Ms < 2000 || st.WaitP99Ms > 2500 {
		t.Fatalf("waits: %d grants, p50 %v ms, p99 %v ms; want 2, 0, about 2000", st.WaitGrants, st.WaitP50Ms, st.WaitP99Ms)
	}
}
