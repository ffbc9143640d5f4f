package httpapi

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate/tollgate/internal/events"
	"github.com/tollgate/tollgate/internal/term"
	"github.com/tollgate/tollgate/internal/testwait"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/limiter/fakeclock"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// fakeAuth is an Authorizer with one admin token.
type fakeAuth struct {
	needs bool
	token string
}

func (a fakeAuth) HTTPNeedsCredentials() bool   { return a.needs }
func (a fakeAuth) IsAdminToken(tok string) bool { return tok == a.token }
func (a fakeAuth) HTTPWays() string             { return "a client certificate or the admin token" }

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// fixture is a handler over a real engine on a fake clock, with the
// server's side (auth, serving, events, leadership) faked.
type fixture struct {
	engine  *limiter.Engine
	auth    fakeAuth
	serving bool
	leading func() (bool, string, int64)
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	e := limiter.New(limiter.Options{Clock: fakeclock.New(epoch)})
	t.Cleanup(e.Close)
	return &fixture{engine: e, serving: true}
}

func (f *fixture) handler() http.Handler {
	// The term served leads while f.leading says so (always, when it is
	// nil: a standalone server).
	tenure := func() bool {
		if f.leading == nil {
			return true
		}
		leading, _, _ := f.leading()
		return leading
	}
	tm, err := term.New(4, tenure, func(func() bool) (*limiter.Engine, error) { return f.engine, nil })
	if err != nil {
		panic(err)
	}
	tm.Begin()
	terms := term.NewTable(1)
	terms.Serve(0, tm)
	o := Options{
		Terms:        terms,
		Metrics:      prometheus.NewRegistry(),
		Auth:         func() Authorizer { return f.auth },
		Serving:      func() bool { return f.serving },
		RecentEvents: func() []events.Event { return []events.Event{{Seq: 1, Type: events.PoolCreated, Pool: "db"}} },
		Leader: func(int) (string, int64) {
			_, leader, epoch := f.leading()
			return leader, epoch
		},
	}
	return Handler(o)
}

func (f *fixture) get(t *testing.T, path string, mod ...func(*http.Request)) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, path, nil)
	for _, m := range mod {
		m(r)
	}
	w := httptest.NewRecorder()
	f.handler().ServeHTTP(w, r)
	return w
}

func decode[T any](t *testing.T, w *httptest.ResponseRecorder) T {
	t.Helper()
	var v T
	if w.Code != http.StatusOK {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	if err := json.Unmarshal(w.Body.Bytes(), &v); err != nil {
		t.Fatalf("%v: %s", err, w.Body)
	}
	return v
}

func TestHealthAndReadiness(t *testing.T) {
	f := newFixture(t)
	f.auth = fakeAuth{needs: true, token: "s3cret"} // health checks need no credentials
	if w := f.get(t, "/healthz"); w.Code != http.StatusOK || w.Body.String() != "ok\n" {
		t.Fatalf("/healthz: %d %q", w.Code, w.Body)
	}
	if w := f.get(t, "/readyz"); w.Code != http.StatusOK {
		t.Fatalf("/readyz while serving: %d", w.Code)
	}
	f.serving = false
	if w := f.get(t, "/readyz"); w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), "shutting down") {
		t.Fatalf("/readyz while shutting down: %d %q", w.Code, w.Body)
	}
}

func TestCredentials(t *testing.T) {
	f := newFixture(t)
	f.auth = fakeAuth{needs: true, token: "s3cret"}
	bearer := func(v string) func(*http.Request) { return func(r *http.Request) { r.Header.Set("Authorization", v) } }
	for _, path := range []string{"/api/pools", "/api/events", "/metrics", "/", "/assets/app.js"} {
		for _, mod := range []func(*http.Request){func(*http.Request) {}, bearer("Bearer wrong"), bearer("Basic s3cret"), bearer("s3cret")} {
			w := f.get(t, path, mod)
			if w.Code != http.StatusUnauthorized || w.Header().Get("WWW-Authenticate") == "" || !strings.Contains(w.Body.String(), "admin token") {
				t.Fatalf("%s without the token: %d %q (WWW-Authenticate %q)", path, w.Code, w.Body, w.Header().Get("WWW-Authenticate"))
			}
		}
		if w := f.get(t, path, bearer("  bearer  s3cret ")); w.Code == http.StatusUnauthorized {
			t.Fatalf("%s with the token: %d", path, w.Code)
		}
		verified := func(r *http.Request) { r.TLS = &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{}}} }
		if w := f.get(t, path, verified); w.Code == http.StatusUnauthorized {
			t.Fatalf("%s with a verified certificate: %d", path, w.Code)
		}
	}
	f.auth.needs = false
	if w := f.get(t, "/api/events"); w.Code != http.StatusOK {
		t.Fatalf("/api/events with no credentials needed: %d", w.Code)
	}
}

func TestSecurityHeadersOnEveryAnswer(t *testing.T) {
	f := newFixture(t)
	for _, path := range []string{"/", "/healthz", "/api/pools/nope/leases", "/no/such/page"} {
		h := f.get(t, path).Header()
		if !strings.Contains(h.Get("Content-Security-Policy"), "frame-ancestors 'none'") || h.Get("X-Frame-Options") != "DENY" || h.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: headers %v", path, h)
		}
	}
}

func TestAssetsStayInWeb(t *testing.T) {
	f := newFixture(t)
	if w := f.get(t, "/"); w.Code != http.StatusOK || !strings.Contains(w.Body.String(), "<html") {
		t.Fatalf("/: %d", w.Code)
	}
	for _, path := range []string{"/assets/..%2fhttpapi.go", "/assets/%2e%2e/doc.go", "/assets/nope.js"} {
		if w := f.get(t, path); w.Code == http.StatusOK {
			t.Errorf("%s served %q", path, w.Body.String()[:min(40, w.Body.Len())])
		}
	}
}

func TestNotLeader(t *testing.T) {
	f := newFixture(t)
	leader := "10.0.0.2:7070"
	f.leading = func() (bool, string, int64) { return false, leader, 4 }
	for _, path := range []string{"/api/pools", "/api/pools/db/leases", "/api/pools/db/waiters"} {
		w := f.get(t, path)
		var resp NotLeaderResponse
		_ = json.Unmarshal(w.Body.Bytes(), &resp)
		if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" ||
			resp.Reason != string(apierr.ReasonNotLeader) || resp.Leader != leader || resp.Epoch != 4 || !strings.Contains(resp.Error, leader) {
			t.Fatalf("%s on a follower: %d %s", path, w.Code, w.Body)
		}
	}
	if w := f.get(t, "/api/events"); w.Code != http.StatusOK {
		t.Fatalf("/api/events on a follower: %d (a follower's events are its own)", w.Code)
	}
	leader = ""
	if w := f.get(t, "/api/pools"); !strings.Contains(w.Body.String(), "no leader is known") {
		t.Fatalf("with no leader known: %s", w.Body)
	}
	f.leading = func() (bool, string, int64) { return true, "", 4 }
	if w := f.get(t, "/api/pools"); w.Code != http.StatusOK {
		t.Fatalf("on the leader: %d %s", w.Code, w.Body)
	}
}

func TestPoolsPages(t *testing.T) {
	f := newFixture(t)
	for _, name := range []string{"a", "b", "c"} {
		if _, err := f.engine.CreatePool(limiter.PoolConfig{Name: name, ConcurrencyLimit: 2}); err != nil {
			t.Fatal(err)
		}
	}
	resp := decode[PoolsResponse](t, f.get(t, "/api/pools?after=a&limit=1"))
	if resp.Total != 3 || !resp.More || len(resp.Pools) != 1 || resp.Pools[0].Name != "b" || !resp.Time.Equal(epoch) || !resp.Serving {
		t.Fatalf("page after a of 1: %+v", resp)
	}
	resp = decode[PoolsResponse](t, f.get(t, "/api/pools?after=b"))
	if resp.More || len(resp.Pools) != 1 || resp.Pools[0].Name != "c" {
		t.Fatalf("last page: %+v", resp)
	}
	for _, bad := range []string{"0", "-1", "x", "1.5"} {
		if w := f.get(t, "/api/pools?limit="+bad); w.Code != http.StatusBadRequest {
			t.Errorf("limit=%s: %d", bad, w.Code)
		}
	}
}

func TestPoolShowsEffectiveLimitsOnlyWhenLowered(t *testing.T) {
	info := limiter.PoolInfo{Config: limiter.PoolConfig{Name: "db", ConcurrencyLimit: 10, Rate: 5, DefaultLeaseTTL: time.Minute}}
	info.Status.EffectiveConcurrencyLimit, info.Status.EffectiveRate = 10, 5
	if p := PoolOf(&info, 0, 0, 0); p.Effective != nil || p.ResourceKind != "" || p.Status.RecoveringUntil != nil || p.Configured.DefaultLeaseTTL != "1m0s" {
		t.Fatalf("pool at its configured limits: %+v", p)
	}
	info.Status.EffectiveConcurrencyLimit = 7
	info.Status.RecoveringUntil = epoch
	info.Config.ResourceKind = limiter.ResourcePassive
	p := PoolOf(&info, 0, 0, 0)
	if p.Effective == nil || p.Effective.ConcurrencyLimit != 7 || p.Effective.Rate != 5 || p.Configured.ConcurrencyLimit != 10 ||
		p.ResourceKind != "passive" || p.Status.RecoveringUntil == nil || !p.Status.RecoveringUntil.Equal(epoch) {
		t.Fatalf("throttled passive pool in recovery: %+v", p)
	}
}

func TestLeasesAndWaiters(t *testing.T) {
	f := newFixture(t)
	if _, err := f.engine.CreatePool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: 2}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var tokens []uint64
	for _, c := range []string{"w1", "w2"} {
		l, err := f.engine.Acquire(ctx, limiter.AcquireRequest{Pool: "db", Weight: 1, ClientID: c, TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		tokens = append(tokens, l.FencingToken)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		_, _ = f.engine.Acquire(wctx, limiter.AcquireRequest{Pool: "db", Weight: 2, ClientID: "w3", Priority: 1})
	}()
	testwait.For(t, "the acquire of w3 to wait", func() bool { _, n, _ := f.engine.ListWaiters("db", 1); return n == 1 })

	page := decode[LeasesResponse](t, f.get(t, "/api/pools/db/leases?limit=1"))
	if !page.More || len(page.Leases) != 1 || page.Leases[0].ClientID != "w1" || page.Leases[0].TTL != "1m0s" {
		t.Fatalf("first page of leases: %+v", page)
	}
	page = decode[LeasesResponse](t, f.get(t, "/api/pools/db/leases?after="+page.Leases[0].ID))
	if page.More || len(page.Leases) != 1 || page.Leases[0].ClientID != "w2" || page.Leases[0].ID != strconv.FormatUint(tokens[1], 10) {
		t.Fatalf("second page of leases: %+v", page)
	}
	w := decode[WaitersResponse](t, f.get(t, "/api/pools/db/waiters"))
	if w.Total != 1 || len(w.Waiters) != 1 || w.Waiters[0].ClientID != "w3" || w.Waiters[0].Position != 1 || w.Waiters[0].Weight != 2 {
		t.Fatalf("waiters: %+v", w)
	}

	for path, code := range map[string]int{
		"/api/pools/nope/leases":        http.StatusNotFound,
		"/api/pools/nope/waiters":       http.StatusNotFound,
		"/api/pools/db/leases?after=x":  http.StatusBadRequest,
		"/api/pools/db/leases?after=-1": http.StatusBadRequest,
		"/api/pools/db/waiters?limit=0": http.StatusBadRequest,
	} {
		if got := f.get(t, path); got.Code != code {
			t.Errorf("%s: %d %q; want %d", path, got.Code, got.Body, code)
		}
	}
}

func TestEvents(t *testing.T) {
	f := newFixture(t)
	resp := decode[EventsResponse](t, f.get(t, "/api/events"))
	if len(resp.Events) != 1 || resp.Events[0].Pool != "db" {
		t.Fatalf("events: %+v", resp)
	}
}

func TestRoutesAreTheHandlersRoutes(t *testing.T) {
	f := newFixture(t)
	o := Options{Terms: term.NewTable(1), Metrics: prometheus.NewRegistry(), Auth: func() Authorizer { return f.auth },
		Serving: func() bool { return true }}
	routes := Routes(o)
	for _, want := range []string{"GET /healthz", "GET /metrics", "GET /api/pools/{name}/leases"} {
		found := false
		for _, r := range routes {
			found = found || r == want
		}
		if !found {
			t.Errorf("Routes %v lack %s", routes, want)
		}
	}
}
