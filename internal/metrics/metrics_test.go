package metrics

import (
	"context"
	"errors"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tollgate/tollgate/internal/limits"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// fakeSource is a Source over a fixed list of pools; exists names the
// pools GetPool finds (those listed, and any created after the list was
// read).
type fakeSource struct {
	pools    []limiter.PoolInfo
	exists   map[string]bool
	quotas   *limits.Quotas
	sessions int64
	serving  bool
	lists    int
}

func (s *fakeSource) ListPools(after string, limit int) ([]limiter.PoolInfo, bool) {
	s.lists++
	if limit < len(s.pools) {
		return s.pools[:limit], true
	}
	return s.pools, false
}

func (s *fakeSource) NumPools() int { return len(s.pools) }

func (s *fakeSource) GetPool(name string) (limiter.PoolInfo, error) {
	if s.exists[name] {
		return limiter.PoolInfo{}, nil
	}
	return limiter.PoolInfo{}, apierr.ErrPoolNotFound
}

func (s *fakeSource) MarkKinds() map[limiter.PoolEventType]string {
	return map[limiter.PoolEventType]string{limiter.PoolOverload: "pool_overload"}
}
func (s *fakeSource) Quotas() *limits.Quotas { return s.quotas }
func (s *fakeSource) Sessions() int64        { return s.sessions }
func (s *fakeSource) Serving() bool          { return s.serving }

func newFakeSource() *fakeSource {
	db := limiter.PoolInfo{Config: limiter.PoolConfig{Name: "db", ConcurrencyLimit: 10, Rate: 2.5}}
	db.Status.Held, db.Status.Waiting, db.Status.Granted = 7, 3, 41
	db.Status.SuppressedMarkEvents[0] = 5 // PoolOverload
	return &fakeSource{
		pools:  []limiter.PoolInfo{db},
		exists: map[string]bool{"db": true},
		quotas: limits.New(limits.Limits{ClientRate: 1, ClientBurst: 1}),
	}
}

// gathered is a scrape: each series as "name{label=value,...}" -> value
// (a counter's or gauge's value; a histogram's sample count).
func gathered(t *testing.T, m *Metrics) map[string]float64 {
	t.Helper()
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, mt := range mf.GetMetric() {
			out[seriesName(mf.GetName(), mt.GetLabel())] = value(mt)
		}
	}
	return out
}

func seriesName(name string, labels []*dto.LabelPair) string {
	parts := make([]string, len(labels))
	for i, l := range labels {
		parts[i] = l.GetName() + "=" + l.GetValue()
	}
	sort.Strings(parts)
	return name + "{" + strings.Join(parts, ",") + "}"
}

func value(mt *dto.Metric) float64 {
	switch {
	case mt.Counter != nil:
		return mt.GetCounter().GetValue()
	case mt.Gauge != nil:
		return mt.GetGauge().GetValue()
	case mt.Histogram != nil:
		return float64(mt.GetHistogram().GetSampleCount())
	}
	return -1
}

func wantSeries(t *testing.T, got map[string]float64, want map[string]float64) {
	t.Helper()
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (present %v); want %v", k, g, ok, v)
		}
	}
}

func TestCollectorReadsThePoolsAndTheServer(t *testing.T) {
	src := newFakeSource()
	src.sessions, src.serving = 2, true
	if src.quotas.AllowRate("k") != nil || src.quotas.AllowRate("k") == nil {
		t.Fatal("a rate of 1 with burst 1 did not allow one request and refuse the next")
	}
	m := New(src, []string{"acquire", "release"}, -1)
	m.CountSessionRequest(1)
	m.CountSessionRequest(1)

	wantSeries(t, gathered(t, m), map[string]float64{
		"tollgate_pool_held{pool=db}":                                       7,
		"tollgate_pool_waiting{pool=db}":                                    3,
		"tollgate_pool_grants_total{pool=db}":                               41,
		"tollgate_pool_concurrency_limit{pool=db}":                          10,
		"tollgate_pool_rate_limit{pool=db}":                                 2.5,
		"tollgate_pool_events_suppressed_total{kind=pool_overload,pool=db}": 5,
		"tollgate_pools{}":                                                  1,
		"tollgate_session_streams{}":                                        2,
		"tollgate_serving{}":                                                1,
		"tollgate_limit_refusals_total{limit=client-rate}":                  1,
		"tollgate_limit_refusals_total{limit=max-pools}":                    0,
		"tollgate_grpc_session_requests_total{kind=release}":                2,
	})
	if src.lists != 1 {
		t.Errorf("a scrape listed the pools %d times; want once", src.lists)
	}

	src.serving = false
	wantSeries(t, gathered(t, m), map[string]float64{"tollgate_serving{}": 0})
}

func TestHistogramsOfGonePoolsArePruned(t *testing.T) {
	src := newFakeSource()
	m := New(src, nil, -1)
	m.Waits.Observe("db", time.Second)
	m.Waits.Observe("db", -time.Second) // counted as 0
	m.Waits.Observe("gone", time.Second)
	// "new" is not in the list the scrape reads, but was created since:
	// its histogram stays.
	src.exists["new"] = true
	m.Holds.Observe("new", time.Millisecond)

	got := gathered(t, m)
	wantSeries(t, got, map[string]float64{
		"tollgate_pool_acquire_wait_seconds{pool=db}": 2,
		"tollgate_pool_lease_hold_seconds{pool=new}":  1,
	})
	if _, ok := got["tollgate_pool_acquire_wait_seconds{pool=gone}"]; ok || m.Waits.Cached("gone") {
		t.Errorf("the histogram of a deleted pool is still collected (%v) or cached (%v)", ok, m.Waits.Cached("gone"))
	}
	if !m.Waits.Cached("db") || !m.Holds.Cached("new") {
		t.Errorf("a live pool's histogram was dropped")
	}
}

func TestUnaryCountsCallsByMethodAndCode(t *testing.T) {
	m := New(newFakeSource(), nil, -1)
	info := &grpc.UnaryServerInfo{FullMethod: "/tollgate.v1.LimiterService/Acquire"}
	ok := func(context.Context, any) (any, error) { return "resp", nil }
	busy := func(context.Context, any) (any, error) { return nil, status.Error(codes.ResourceExhausted, "busy") }
	for _, h := range []grpc.UnaryHandler{ok, ok, busy} {
		_, _ = m.Unary(context.Background(), nil, info, h)
	}
	// A code past those grpc names is counted too.
	_, _ = m.Unary(context.Background(), nil, info, func(context.Context, any) (any, error) {
		return nil, status.Error(codes.Code(99), "odd")
	})
	l := "grpc_method=Acquire,grpc_service=tollgate.v1.LimiterService,grpc_type=unary"
	wantSeries(t, gathered(t, m), map[string]float64{
		"grpc_server_started_total{" + l + "}":                                       4,
		"grpc_server_msg_received_total{" + l + "}":                                  4,
		"grpc_server_msg_sent_total{" + l + "}":                                      2,
		"grpc_server_handled_total{grpc_code=OK," + l + "}":                          2,
		"grpc_server_handled_total{grpc_code=ResourceExhausted," + l + "}":           1,
		"grpc_server_handled_total{grpc_code=Code(99)," + l + "}":                    1,
		"grpc_server_handling_seconds{" + l + "}":                                    4,
		"tollgate_grpc_server_handled_total{code=OK,method=" + info.FullMethod + "}": 2,
		"tollgate_grpc_server_handling_seconds{method=" + info.FullMethod + "}":      4,
	})
}

// fakeStream is a grpc.ServerStream whose receives succeed until recvs
// run out and whose sends fail from the failing-th on.
type fakeStream struct {
	grpc.ServerStream
	recvs, sends, failing int
}

func (s *fakeStream) RecvMsg(any) error {
	if s.recvs == 0 {
		return errors.New("EOF")
	}
	s.recvs--
	return nil
}

func (s *fakeStream) SendMsg(any) error {
	s.sends++
	if s.sends >= s.failing {
		return errors.New("broken")
	}
	return nil
}

func TestStreamCountsItsMessagesAndEndsOnce(t *testing.T) {
	m := New(newFakeSource(), nil, -1)
	info := &grpc.StreamServerInfo{FullMethod: "/tollgate.v1.LimiterService/Session", IsClientStream: true, IsServerStream: true}
	err := m.Stream(nil, &fakeStream{recvs: 3, failing: 3}, info, func(_ any, ss grpc.ServerStream) error {
		for ss.RecvMsg(nil) == nil {
		}
		for ss.SendMsg(nil) == nil {
		}
		return status.Error(codes.Canceled, "gone")
	})
	if status.Code(err) != codes.Canceled {
		t.Fatalf("Stream returned %v; want the handler's error", err)
	}
	l := "grpc_method=Session,grpc_service=tollgate.v1.LimiterService,grpc_type=bidi_stream"
	got := gathered(t, m)
	wantSeries(t, got, map[string]float64{
		"grpc_server_started_total{" + l + "}":                    1,
		"grpc_server_msg_received_total{" + l + "}":               3,
		"grpc_server_msg_sent_total{" + l + "}":                   2,
		"grpc_server_handled_total{grpc_code=Canceled," + l + "}": 1,
		"grpc_server_handling_seconds{" + l + "}":                 1,
	})
	if _, ok := got["tollgate_grpc_server_handling_seconds{method="+info.FullMethod+"}"]; ok {
		t.Error("a stream is in the deprecated unary-only histogram")
	}
}
