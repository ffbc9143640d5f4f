package server

import (
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/events"
	"github.com/tollgate/tollgate/internal/limits"
	"github.com/tollgate/tollgate/internal/testwait"
	"github.com/tollgate/tollgate/limiter"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// scrape returns the /metrics text.
func (o *opsServer) scrape() string {
	o.t.Helper()
	code, body := o.get(nil, "/metrics")
	if code != 200 {
		o.t.Fatalf("GET /metrics = %d: %s", code, body)
	}
	return body
}

func wantLines(t *testing.T, text string, lines ...string) {
	t.Helper()
	for _, l := range lines {
		if !strings.Contains(text, "\n"+l+"\n") {
			t.Errorf("metrics lack %q", l)
		}
	}
}

func TestMetrics(t *testing.T) {
	o := startOps(t, Config{}, nil)
	e := o.env()
	e.createPool(&tollgatev1.Pool{Name: "db", ConcurrencyLimit: 3, Rate: 100, Burst: 50})
	e.acquire(&tollgatev1.AcquireRequest{Pool: "db"})
	l := e.acquire(&tollgatev1.AcquireRequest{Pool: "db", Weight: i64(2)})
	// A waiter, granted after 2s by the fake clock.
	granted := make(chan error, 1)
	go func() {
		_, err := e.lim.Acquire(e.ctx(), &tollgatev1.AcquireRequest{Pool: "db"})
		granted <- err
	}()
	testwait.For(t, "the acquire to wait", func() bool { return e.status("db").GetWaiting() == 1 })

	m := o.scrape()
	wantLines(t, m,
		`tollgate_pool_held{pool="db"} 3`,
		`tollgate_pool_waiting{pool="db"} 1`,
		`tollgate_pool_leases{pool="db"} 2`,
		`tollgate_pool_concurrency_limit{pool="db"} 3`,
		`tollgate_pool_rate_limit{pool="db"} 100`,
		`tollgate_pool_burst{pool="db"} 50`,
		`tollgate_pool_grants_total{pool="db"} 2`,
		`tollgate_pool_tokens_granted_total{pool="db"} 3`,
		`tollgate_pools 1`,
		`tollgate_waiters 1`,
		`tollgate_serving 1`,
		`tollgate_grpc_server_handled_total{code="OK",method="/tollgate.v1.LimiterService/Acquire"} 2`,
		`tollgate_grpc_server_handled_total{code="OK",method="/tollgate.v1.AdminService/CreatePool"} 1`,
		`tollgate_pool_acquire_wait_seconds_bucket{pool="db",le="0.001"} 2`,
		`tollgate_limit_refusals_total{limit="max-waiters"} 0`,
	)
	if !strings.Contains(m, `tollgate_grpc_server_handling_seconds_count{method="/tollgate.v1.LimiterService/Acquire"} 2`) {
		t.Error("no unary latency histogram for Acquire")
	}
	// The standard gRPC server metrics (the tollgate_grpc_server_* above
	// are their deprecated forerunners, kept for one release).
	wantLines(t, m,
		`grpc_server_handled_total{grpc_code="OK",grpc_method="Acquire",grpc_service="tollgate.v1.LimiterService",grpc_type="unary"} 2`,
		`grpc_server_handled_total{grpc_code="OK",grpc_method="CreatePool",grpc_service="tollgate.v1.AdminService",grpc_type="unary"} 1`,
		`grpc_server_started_total{grpc_method="Acquire",grpc_service="tollgate.v1.LimiterService",grpc_type="unary"} 3`,
		`grpc_server_msg_received_total{grpc_method="Acquire",grpc_service="tollgate.v1.LimiterService",grpc_type="unary"} 3`,
		`grpc_server_msg_sent_total{grpc_method="Acquire",grpc_service="tollgate.v1.LimiterService",grpc_type="unary"} 2`,
		`grpc_server_handling_seconds_count{grpc_method="Acquire",grpc_service="tollgate.v1.LimiterService",grpc_type="unary"} 2`,
	)

	o.clock.Advance(2 * time.Second)
	if _, err := e.lim.Release(e.ctx(), &tollgatev1.ReleaseRequest{Pool: "db", LeaseId: l.GetId()}); err != nil {
		t.Fatal(err)
	}
	if err := <-granted; err != nil {
		t.Fatal(err)
	}
	s := e.session()
	s.call(acquireReq(1, &tollgatev1.AcquireRequest{Pool: "nope"}))
	m = o.scrape()
	wantLines(t, m,
		`tollgate_pool_acquire_wait_seconds_bucket{pool="db",le="1"} 2`,
		`tollgate_pool_acquire_wait_seconds_bucket{pool="db",le="5"} 3`,
		`tollgate_pool_acquire_wait_seconds_count{pool="db"} 3`,
		`tollgate_pool_acquire_wait_seconds_sum{pool="db"} 2`,
		`tollgate_pool_releases_total{pool="db"} 1`,
		`tollgate_pool_lease_hold_seconds_bucket{pool="db",le="1"} 0`,
		`tollgate_pool_lease_hold_seconds_bucket{pool="db",le="5"} 1`,
		`tollgate_pool_lease_hold_seconds_count{pool="db"} 1`,
		`tollgate_pool_lease_hold_seconds_sum{pool="db"} 2`,
		`tollgate_grpc_session_requests_total{kind="acquire"} 1`,
		`tollgate_session_streams 1`,
		`grpc_server_started_total{grpc_method="Session",grpc_service="tollgate.v1.LimiterService",grpc_type="bidi_stream"} 1`,
		`grpc_server_msg_received_total{grpc_method="Session",grpc_service="tollgate.v1.LimiterService",grpc_type="bidi_stream"} 1`,
		`grpc_server_msg_sent_total{grpc_method="Session",grpc_service="tollgate.v1.LimiterService",grpc_type="bidi_stream"} 1`,
	)
	if strings.Contains(m, `tollgate_grpc_server_handling_seconds_count{method="/tollgate.v1.LimiterService/Session"}`) {
		t.Error("the deprecated unary latency histogram has a stream")
	}

	// A deleted pool's series go, histogram included.
	if _, err := e.adm.DeletePool(e.ctx(), &tollgatev1.DeletePoolRequest{Name: "db", Force: true}); err != nil {
		t.Fatal(err)
	}
	m = o.scrape()
	if strings.Contains(m, `pool="db"`) {
		t.Error("metrics still have series of the deleted pool")
	}
	o.scrape()
	if o.srv.metrics.Waits.Cached("db") {
		t.Error("the deleted pool's wait histogram is still kept")
	}
	if o.srv.metrics.Holds.Cached("db") {
		t.Error("the deleted pool's hold histogram is still kept")
	}
}

// TestMetricsPoolsBound: past Limits.MetricsPools (--metrics-pools) pools,
// /metrics has the per-pool gauges and counters of the first pools in name
// order only, histograms of the first pools to observe one only, and says
// how many pools it leaves out.
func TestMetricsPoolsBound(t *testing.T) {
	o := startOps(t, Config{Limits: limits.Limits{MetricsPools: 2}}, nil)
	e := o.env()
	for _, p := range []string{"d", "c", "b", "a"} {
		e.createPool(&tollgatev1.Pool{Name: p, ConcurrencyLimit: 3})
	}
	for _, p := range []string{"d", "c", "b", "a"} {
		e.acquire(&tollgatev1.AcquireRequest{Pool: p})
	}
	m := o.scrape()
	wantLines(t, m,
		`tollgate_pool_leases{pool="a"} 1`,
		`tollgate_pool_leases{pool="b"} 1`,
		`tollgate_pools 4`,
		`tollgate_pools_unexported 2`,
		`tollgate_pool_acquire_wait_seconds_count{pool="d"} 1`,
		`tollgate_pool_acquire_wait_seconds_count{pool="c"} 1`,
	)
	for _, absent := range []string{`tollgate_pool_leases{pool="c"}`, `tollgate_pool_leases{pool="d"}`,
		`tollgate_pool_acquire_wait_seconds_count{pool="a"}`, `tollgate_pool_acquire_wait_seconds_count{pool="b"}`} {
		if strings.Contains(m, absent) {
			t.Errorf("metrics have %s, past --metrics-pools 2", absent)
		}
	}
	// A deleted pool's histogram leaves room for another's.
	if _, err := e.adm.DeletePool(e.ctx(), &tollgatev1.DeletePoolRequest{Name: "d", Force: true}); err != nil {
		t.Fatal(err)
	}
	o.scrape()
	e.acquire(&tollgatev1.AcquireRequest{Pool: "a"})
	wantLines(t, o.scrape(), `tollgate_pool_acquire_wait_seconds_count{pool="a"} 1`, `tollgate_pools_unexported 1`)
}

// TestMarkEventsSuppressedMetric: a mark crossed again within the mark
// event interval is not recorded but counted, in
// tollgate_pool_events_suppressed_total and in the next recorded event of
// its kind.
func TestMarkEventsSuppressedMetric(t *testing.T) {
	o := startOps(t, Config{}, nil)
	e := o.env()
	e.createPool(&tollgatev1.Pool{Name: "db", ConcurrencyLimit: 4, LowUtilisationMark: -1})
	var held []*tollgatev1.Lease
	cycle := func() { // 4 held, then 2, then 4 again: near-full re-armed and crossed
		for len(held) < 4 {
			held = append(held, e.acquire(&tollgatev1.AcquireRequest{Pool: "db"}))
		}
		for _, l := range held[2:] {
			if _, err := e.lim.Release(e.ctx(), &tollgatev1.ReleaseRequest{Pool: "db", LeaseId: l.GetId()}); err != nil {
				t.Fatal(err)
			}
		}
		held = held[:2]
	}
	nearFull := func() (evs []events.Event) {
		for _, ev := range o.srv.RecentEvents() {
			if ev.Type == events.PoolNearFull {
				evs = append(evs, ev)
			}
		}
		return evs
	}
	for range 3 {
		cycle()
	}
	if evs := nearFull(); len(evs) != 1 {
		t.Fatalf("near-full events after 3 crossings at once: %+v; want 1", evs)
	}
	wantLines(t, o.scrape(), `tollgate_pool_events_suppressed_total{kind="pool_near_full",pool="db"} 2`,
		`tollgate_pool_events_suppressed_total{kind="pool_overload",pool="db"} 0`)
	o.clock.Advance(limiter.DefaultMarkEventInterval)
	cycle()
	evs := nearFull()
	if len(evs) != 2 || !strings.HasSuffix(evs[0].Detail, "; 2 repeats suppressed") {
		t.Fatalf("near-full events after the interval: %+v; want a second one counting 2 repeats", evs)
	}
}
