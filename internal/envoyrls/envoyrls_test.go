package envoyrls_test

import (
	"context"
	"fmt"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/tollgate/tollgate/proto/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/tollgate/tollgate/proto/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/envoyrls"
	"github.com/tollgate/tollgate/internal/limits"
	"github.com/tollgate/tollgate/internal/poolsfile"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/limiter/fakeclock"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/server"
)

const (
	waitLimit  = 10 * time.Second
	adminToken = "admin-token-0123456789"
)

// env is a server with --envoy-rls on a loopback port, a fake clock, and
// an Envoy-style client.
type env struct {
	t     *testing.T
	srv   *server.Server
	clock *fakeclock.Clock
	rls   rlsv3.RateLimitServiceClient
	adm   tollgatev1.AdminServiceClient
	addr  string
}

func newEnv(t *testing.T, cfg server.Config, dialOpts ...grpc.DialOption) *env {
	t.Helper()
	fc := fakeclock.New(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	cfg.Clock, cfg.EnvoyRLS, cfg.ShutdownTimeout = fc, true, 2*time.Second
	srv := server.New(cfg)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(waitLimit):
			t.Errorf("Serve did not return")
		}
	})
	e := &env{t: t, srv: srv, clock: fc, addr: lis.Addr().String()}
	conn := e.dial(dialOpts...)
	e.rls = rlsv3.NewRateLimitServiceClient(conn)
	e.adm = tollgatev1.NewAdminServiceClient(conn)
	return e
}

func (e *env) dial(opts ...grpc.DialOption) *grpc.ClientConn {
	e.t.Helper()
	opts = append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)
	conn, err := grpc.NewClient(e.addr, opts...)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { conn.Close() })
	return conn
}

func (e *env) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	e.t.Cleanup(cancel)
	return ctx
}

func (e *env) createPool(p *tollgatev1.Pool) {
	e.t.Helper()
	if _, err := e.adm.CreatePool(e.ctx(), &tollgatev1.CreatePoolRequest{Pool: p}); err != nil {
		e.t.Fatalf("CreatePool(%v): %v", p, err)
	}
}

// desc is a descriptor of key, value pairs, as Envoy sends them.
func desc(kv ...string) *commonv3.RateLimitDescriptor {
	d := &commonv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &commonv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// ask calls ShouldRateLimit as Envoy does.
func (e *env) ask(domain string, hits uint32, ds ...*commonv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	e.t.Helper()
	resp, err := e.rls.ShouldRateLimit(e.ctx(), &rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds, HitsAddend: hits})
	if err != nil {
		e.t.Fatalf("ShouldRateLimit(%s, %v): %v", domain, ds, err)
	}
	if len(resp.GetStatuses()) != len(ds) {
		e.t.Fatalf("%d statuses for %d descriptors: %v", len(resp.GetStatuses()), len(ds), resp)
	}
	return resp
}

// codes1 is the code of a one-descriptor answer, checked against the
// overall code.
func code1(t *testing.T, resp *rlsv3.RateLimitResponse) rlsv3.RateLimitResponse_Code {
	t.Helper()
	if c := resp.GetStatuses()[0].GetCode(); c != resp.GetOverallCode() {
		t.Fatalf("descriptor %v, overall %v", c, resp.GetOverallCode())
	}
	return resp.GetOverallCode()
}

const (
	ok   = rlsv3.RateLimitResponse_OK
	over = rlsv3.RateLimitResponse_OVER_LIMIT
)

func edgePool(name string, rate float64, burst int64) *tollgatev1.Pool {
	return &tollgatev1.Pool{Name: name, Rate: rate, Burst: burst,
		Envoy: &tollgatev1.EnvoyRule{Domain: "edge", Descriptors: []*tollgatev1.EnvoyDescriptorKey{{Key: "remote_address"}}}}
}

// Two remote addresses each get their own bucket of the pool's rate and
// burst: one spending its burst does not limit the other.
func TestPerValueBuckets(t *testing.T) {
	e := newEnv(t, server.Config{})
	e.createPool(edgePool("edge-ip", 2, 3))
	a, b := desc("remote_address", "10.0.0.1"), desc("remote_address", "10.0.0.2")
	for i := range 3 {
		st := e.ask("edge", 0, a).GetStatuses()[0]
		if st.GetCode() != ok || st.GetLimitRemaining() != uint32(2-i) {
			t.Fatalf("take %d of a: %v", i, st)
		}
	}
	resp := e.ask("edge", 0, a)
	st := resp.GetStatuses()[0]
	if code1(t, resp) != over || st.GetLimitRemaining() != 0 || st.GetDurationUntilReset().AsDuration() != 500*time.Millisecond {
		t.Fatalf("a past its burst: %v", resp)
	}
	if cl := st.GetCurrentLimit(); cl.GetRequestsPerUnit() != 2 || cl.GetUnit() != rlsv3.RateLimitResponse_RateLimit_SECOND || cl.GetName() != "edge-ip" {
		t.Fatalf("current_limit %v", cl)
	}
	if st := e.ask("edge", 0, b).GetStatuses()[0]; st.GetCode() != ok || st.GetLimitRemaining() != 2 {
		t.Fatalf("b after a spent its burst: %v", st)
	}
	// Both in one request: the overall code is OVER_LIMIT if one is.
	resp = e.ask("edge", 0, b, a)
	// b's token stays taken.
	if resp.GetOverallCode() != over || resp.GetStatuses()[0].GetCode() != ok || resp.GetStatuses()[0].GetLimitRemaining() != 1 || resp.GetStatuses()[1].GetCode() != over {
		t.Fatalf("b and a: %v", resp)
	}
	e.clock.Advance(500 * time.Millisecond)
	if st := e.ask("edge", 0, a).GetStatuses()[0]; st.GetCode() != ok || st.GetDurationUntilReset().AsDuration() != 1500*time.Millisecond {
		t.Fatalf("a after 500ms: %v", st)
	}
	// The pool's own bucket is not touched by per-value takes.
	info, err := e.srv.Engine().Bucket("edge-ip")
	if err != nil || info.Tokens != 3 {
		t.Fatalf("pool bucket %+v, %v", info, err)
	}
}

// A rule whose keys all fix a value takes from the pool's own bucket,
// which Tollgate's own Take shares.
func TestFixedValueUsesPoolBucket(t *testing.T) {
	e := newEnv(t, server.Config{})
	e.createPool(&tollgatev1.Pool{Name: "login", Rate: 1, Burst: 2,
		Envoy: &tollgatev1.EnvoyRule{Domain: "edge", Descriptors: []*tollgatev1.EnvoyDescriptorKey{{Key: "path", Value: "/login"}}}})
	login := desc("path", "/login")
	if st := e.ask("edge", 0, login).GetStatuses()[0]; st.GetCode() != ok || st.GetLimitRemaining() != 1 || st.GetDurationUntilReset().AsDuration() != time.Second {
		t.Fatalf("first: %v", st)
	}
	if _, err := e.srv.Engine().Take(e.ctx(), "login", 1, 0); err != nil {
		t.Fatalf("Take beside Envoy: %v", err)
	}
	if st := e.ask("edge", 0, login).GetStatuses()[0]; st.GetCode() != over || st.GetDurationUntilReset().AsDuration() != time.Second {
		t.Fatalf("after the pool's own take: %v", st)
	}
	// Another value of the fixed key matches no pool: OK, no limit.
	if st := e.ask("edge", 0, desc("path", "/home")).GetStatuses()[0]; st.GetCode() != ok || st.GetCurrentLimit() != nil {
		t.Fatalf("unmatched value: %v", st)
	}
}

// hits_addend takes that many tokens, from the request or the descriptor;
// 0 means 1.
func TestHitsAddend(t *testing.T) {
	e := newEnv(t, server.Config{})
	e.createPool(edgePool("edge-ip", 10, 10))
	a := desc("remote_address", "10.0.0.1")
	if st := e.ask("edge", 4, a).GetStatuses()[0]; st.GetCode() != ok || st.GetLimitRemaining() != 6 {
		t.Fatalf("hits 4: %v", st)
	}
	a.HitsAddend = wrapperspb.UInt64(5)
	if st := e.ask("edge", 4, a).GetStatuses()[0]; st.GetCode() != ok || st.GetLimitRemaining() != 1 {
		t.Fatalf("descriptor hits 5: %v", st)
	}
	a.HitsAddend = nil
	st := e.ask("edge", 3, a).GetStatuses()[0]
	if st.GetCode() != over || st.GetLimitRemaining() != 1 || st.GetDurationUntilReset().AsDuration() != 200*time.Millisecond {
		t.Fatalf("hits 3 with 1 left: %v", st)
	}
	if st := e.ask("edge", 0, a).GetStatuses()[0]; st.GetCode() != ok || st.GetLimitRemaining() != 0 {
		t.Fatalf("hits 0 (1) with 1 left: %v", st)
	}
}

// A domain or descriptor no pool's rule matches is OK with no limit, as
// Envoy's own service answers; a request without a domain or descriptors
// is INVALID_ARGUMENT.
func TestUnmatchedAndInvalid(t *testing.T) {
	e := newEnv(t, server.Config{})
	e.createPool(edgePool("edge-ip", 1, 1))
	for _, c := range []struct {
		domain string
		d      *commonv3.RateLimitDescriptor
	}{
		{"other", desc("remote_address", "10.0.0.1")},
		{"edge", desc("user", "bob")},
		{"edge", desc("remote_address", "10.0.0.1", "path", "/")}, // more entries than the rule
	} {
		for range 3 {
			if resp := e.ask(c.domain, 0, c.d); code1(t, resp) != ok || resp.GetStatuses()[0].GetCurrentLimit() != nil {
				t.Fatalf("%s %v: %v", c.domain, c.d, resp)
			}
		}
	}
	for _, req := range []*rlsv3.RateLimitRequest{
		{Descriptors: []*commonv3.RateLimitDescriptor{desc("remote_address", "x")}},
		{Domain: "edge"},
		{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{{}}},
	} {
		_, err := e.rls.ShouldRateLimit(e.ctx(), req)
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("%v: %v, want INVALID_ARGUMENT", req, err)
		}
	}
}

// The per-value buckets of a pool stay within max_buckets: a full one
// goes (it comes back full, as it was), one that is not stays.
func TestMaxBucketsEvictsOnlyFullBuckets(t *testing.T) {
	e := newEnv(t, server.Config{})
	p := edgePool("edge-ip", 1, 1)
	p.Envoy.MaxBuckets = 2
	e.createPool(p)
	ip := func(i int) *commonv3.RateLimitDescriptor { return desc("remote_address", fmt.Sprintf("10.0.0.%d", i)) }
	for i := 1; i <= 2; i++ {
		if code1(t, e.ask("edge", 0, ip(i))) != ok {
			t.Fatalf("first take of %d", i)
		}
	}
	e.clock.Advance(time.Second) // 1 and 2 full again
	if code1(t, e.ask("edge", 0, ip(1))) != ok {
		t.Fatal("1 after a second")
	}
	if code1(t, e.ask("edge", 0, ip(3))) != ok { // 2 goes: it is full
		t.Fatal("first take of 3")
	}
	if code1(t, e.ask("edge", 0, ip(1))) != over || code1(t, e.ask("edge", 0, ip(3))) != over {
		t.Fatal("1 or 3 lost its bucket")
	}
	if code1(t, e.ask("edge", 0, ip(2))) != ok { // from the overflow bucket
		t.Fatal("2 after it went")
	}
}

// A flood of new values cannot make a value's bucket go while it is not
// full: the value stays within its rate, and the new values are answered
// from the overflow bucket.
func TestFloodOfNewValuesKeepsKeysExact(t *testing.T) {
	e := newEnv(t, server.Config{})
	p := edgePool("edge-ip", 1, 1)
	p.Envoy.MaxBuckets = 2
	e.createPool(p)
	steady := desc("remote_address", "10.0.0.1")
	if code1(t, e.ask("edge", 0, steady)) != ok {
		t.Fatal("first take")
	}
	oks := 0
	for i := range 100 {
		if code1(t, e.ask("edge", 0, desc("remote_address", fmt.Sprintf("192.0.2.%d", i)))) == ok {
			oks++
		}
	}
	if oks != 2 { // one with a bucket of its own, one from the overflow bucket
		t.Fatalf("%d of 100 new values passed; want 2", oks)
	}
	if code1(t, e.ask("edge", 0, steady)) != over {
		t.Fatal("the steady value's bucket was dropped while empty: it passed again at once")
	}
	e.clock.Advance(time.Second)
	if code1(t, e.ask("edge", 0, steady)) != ok || code1(t, e.ask("edge", 0, steady)) != over {
		t.Fatal("the steady value after a second: want one pass")
	}
}

// A value answered from the overflow bucket gets, when it has a bucket of
// its own later, no more tokens than the overflow bucket has left.
func TestOverflowThenOwnBucket(t *testing.T) {
	e := newEnv(t, server.Config{})
	p := edgePool("edge-ip", 1, 2)
	p.Envoy.MaxBuckets = 1
	e.createPool(p)
	a, x := desc("remote_address", "10.0.0.1"), desc("remote_address", "10.0.0.2")
	if code1(t, e.ask("edge", 0, a)) != ok || code1(t, e.ask("edge", 2, x)) != ok { // x: the overflow bucket, now empty
		t.Fatal("first takes")
	}
	e.clock.Advance(time.Second) // a full, the overflow bucket at 1
	if st := e.ask("edge", 2, x).GetStatuses()[0]; st.GetCode() != over || st.GetLimitRemaining() != 1 {
		t.Fatalf("x in a bucket of its own, a second after taking 2: %v; want OVER_LIMIT with 1 left", st)
	}
	if code1(t, e.ask("edge", 0, x)) != ok || code1(t, e.ask("edge", 0, x)) != over {
		t.Fatal("x: want one pass")
	}
}

// An UpdatePool of a rule that names the same values keeps the buckets:
// an empty one stays empty.
func TestRuleChangeKeepsBuckets(t *testing.T) {
	e := newEnv(t, server.Config{})
	e.createPool(edgePool("edge-ip", 1, 2))
	a := desc("remote_address", "10.0.0.1")
	if code1(t, e.ask("edge", 2, a)) != ok || code1(t, e.ask("edge", 0, a)) != over {
		t.Fatal("draining a")
	}
	rule := &tollgatev1.EnvoyRule{Domain: "edge2", MaxBuckets: 50,
		Descriptors: []*tollgatev1.EnvoyDescriptorKey{{Key: "remote_address"}}}
	if _, err := e.adm.UpdatePool(e.ctx(), &tollgatev1.UpdatePoolRequest{
		Pool:       &tollgatev1.Pool{Name: "edge-ip", Envoy: rule},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"envoy"}}}); err != nil {
		t.Fatal(err)
	}
	if st := e.ask("edge2", 0, a).GetStatuses()[0]; st.GetCode() != over || st.GetLimitRemaining() != 0 {
		t.Fatalf("a after the rule changed: %v; want its empty bucket", st)
	}
	if code1(t, e.ask("edge2", 0, desc("remote_address", "10.0.0.2"))) != ok {
		t.Fatal("another value after the rule changed")
	}
}

// Lowering max_buckets drops the fullest buckets first, after lowering
// the overflow bucket to their level: a dropped value gets no more than
// its bucket held.
func TestLowerMaxBucketsKeepsValuesExact(t *testing.T) {
	e := newEnv(t, server.Config{})
	p := edgePool("edge-ip", 1, 2)
	p.Envoy.MaxBuckets = 2
	e.createPool(p)
	a, b := desc("remote_address", "10.0.0.1"), desc("remote_address", "10.0.0.2")
	if code1(t, e.ask("edge", 2, a)) != ok || code1(t, e.ask("edge", 1, b)) != ok {
		t.Fatal("first takes")
	}
	p.Envoy.MaxBuckets = 1
	if _, err := e.adm.UpdatePool(e.ctx(), &tollgatev1.UpdatePoolRequest{Pool: p,
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"envoy"}}}); err != nil {
		t.Fatal(err)
	}
	if code1(t, e.ask("edge", 0, a)) != over { // b, the fullest, goes
		t.Fatal("a after max_buckets went to 1")
	}
	if code1(t, e.ask("edge", 0, b)) != ok || code1(t, e.ask("edge", 0, b)) != over {
		t.Fatal("b after its bucket went, with 1 token left in it: want one pass")
	}
}

// Lists of values that join to the same bytes have buckets of their own.
func TestValueListsDoNotCollide(t *testing.T) {
	e := newEnv(t, server.Config{})
	e.createPool(&tollgatev1.Pool{Name: "pair", Rate: 1, Burst: 1,
		Envoy: &tollgatev1.EnvoyRule{Domain: "edge", Descriptors: []*tollgatev1.EnvoyDescriptorKey{{Key: "k1"}, {Key: "k2"}}}})
	for _, c := range [][2][2]string{{{"a\x00b", "c"}, {"a", "b\x00c"}}, {{"ab", ""}, {"a", "b"}}, {{"", "\x01a"}, {"\x00", "a"}}} {
		first, second := desc("k1", c[0][0], "k2", c[0][1]), desc("k1", c[1][0], "k2", c[1][1])
		if code1(t, e.ask("edge", 0, first)) != ok || code1(t, e.ask("edge", 0, second)) != ok {
			t.Errorf("%q and %q share a bucket", c[0], c[1])
		}
	}
}

// The clock is read under the bucket's lock: a decision that read the
// time before another decision on the same bucket (which then took the
// lock first) does not move the bucket back in time, which would refill
// it twice for the same interval.
func TestStaleClockReadingCreatesNoToken(t *testing.T) {
	fc := fakeclock.New(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	eng := limiter.New(limiter.Options{Clock: fc})
	t.Cleanup(eng.Close)
	if _, err := eng.CreatePool(limiter.PoolConfig{Name: "edge-ip", Rate: 1, Burst: 1,
		Envoy: limiter.EnvoyRule{Domain: "edge", Descriptors: []limiter.EnvoyDescriptorKey{{Key: "remote_address"}}}}); err != nil {
		t.Fatal(err)
	}
	se := &staleEngine{Engine: eng}
	svc := envoyrls.New(envoyrls.One(se), envoyrls.Options{})
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{desc("remote_address", "10.0.0.1")}}
	askCode := func() rlsv3.RateLimitResponse_Code {
		resp, err := svc.ShouldRateLimit(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetOverallCode()
	}
	if askCode() != ok {
		t.Fatal("first take")
	}
	fc.Advance(time.Second)
	stale := fc.Now() // what a decision read before the next one took the lock
	fc.Advance(time.Second)
	if askCode() != ok {
		t.Fatal("take after 2s")
	}
	se.at = stale
	if askCode() != over {
		t.Fatal("the decision with the older reading passed")
	}
	if askCode() != over {
		t.Fatal("a second token at the same instant, with burst 1")
	}
}

// staleEngine is an engine whose next Bucket reads at, once.
type staleEngine struct {
	*limiter.Engine
	at time.Time
}

func (e *staleEngine) Bucket(pool string) (limiter.BucketState, error) {
	b, err := e.Engine.Bucket(pool)
	if !e.at.IsZero() {
		b.At, e.at = e.at, time.Time{}
	}
	return b, err
}

// Each descriptor of a request counts against the caller's request rate,
// as each request of a Session batch does.
func TestDescriptorsCountAgainstClientRate(t *testing.T) {
	e := newEnv(t, server.Config{Limits: limits.Limits{ClientRate: 0.001, ClientBurst: 12}})
	e.createPool(edgePool("edge-ip", 100, 100)) // 1 request; 11 left
	ds := make([]*commonv3.RateLimitDescriptor, 10)
	for i := range ds {
		ds[i] = desc("remote_address", fmt.Sprintf("10.0.0.%d", i))
	}
	e.ask("edge", 0, ds...) // 10; 1 left
	_, err := e.rls.ShouldRateLimit(e.ctx(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: ds[:2]})
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "client-rate") {
		t.Fatalf("2 descriptors with 1 request left: %v; want RESOURCE_EXHAUSTED naming --client-rate", err)
	}
}

// Hits above the burst can never pass: the answer is OVER_LIMIT with no
// duration_until_reset, and a body that says so.
func TestHitsAboveBurstNeverPass(t *testing.T) {
	e := newEnv(t, server.Config{})
	e.createPool(edgePool("edge-ip", 1, 5))
	e.createPool(&tollgatev1.Pool{Name: "login", Rate: 1, Burst: 5,
		Envoy: &tollgatev1.EnvoyRule{Domain: "edge", Descriptors: []*tollgatev1.EnvoyDescriptorKey{{Key: "path", Value: "/login"}}}})
	for _, d := range []*commonv3.RateLimitDescriptor{desc("remote_address", "10.0.0.1"), desc("path", "/login")} {
		resp := e.ask("edge", 6, d)
		st := resp.GetStatuses()[0]
		if st.GetCode() != over || st.GetDurationUntilReset() != nil || st.GetLimitRemaining() != 5 {
			t.Errorf("%v, 6 hits with burst 5: %v; want OVER_LIMIT, no duration_until_reset", d, st)
		}
		if body := string(resp.GetRawBody()); !strings.Contains(body, "6 hits exceed the burst 5 of pool") || !strings.Contains(body, "no retry") {
			t.Errorf("%v, 6 hits with burst 5: body %q", d, body)
		}
		if resp := e.ask("edge", 5, d); code1(t, resp) != ok || resp.GetRawBody() != nil {
			t.Errorf("%v, 5 hits: %v", d, resp)
		}
	}
}

// An UpdatePool of the rate, and an adaptive cut, apply to the per-value
// buckets at the next decision: they refill at the new rate.
func TestRateChangesApply(t *testing.T) {
	e := newEnv(t, server.Config{})
	e.createPool(edgePool("edge-ip", 10, 1))
	a := desc("remote_address", "10.0.0.1")
	if code1(t, e.ask("edge", 0, a)) != ok {
		t.Fatal("first take")
	}
	if st := e.ask("edge", 0, a).GetStatuses()[0]; st.GetDurationUntilReset().AsDuration() != 100*time.Millisecond || st.GetCurrentLimit().GetRequestsPerUnit() != 10 {
		t.Fatalf("at rate 10: %v", st)
	}
	_, err := e.adm.UpdatePool(e.ctx(), &tollgatev1.UpdatePoolRequest{
		Pool:       &tollgatev1.Pool{Name: "edge-ip", Rate: 0.5},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"rate"}}})
	if err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Second) // a whole token at rate 10, half of one at 0.5
	st := e.ask("edge", 0, a).GetStatuses()[0]
	if st.GetCode() != over || st.GetDurationUntilReset().AsDuration() != time.Second ||
		st.GetCurrentLimit().GetRequestsPerUnit() != 30 || st.GetCurrentLimit().GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE {
		t.Fatalf("at rate 0.5: %v", st)
	}

	// Adaptive: errors reported on the pool cut its effective rate.
	e.createPool(&tollgatev1.Pool{Name: "edge-user", Rate: 100, Burst: 1,
		Adaptive: &tollgatev1.Adaptive{Enabled: true, MinSamples: 1},
		Envoy:    &tollgatev1.EnvoyRule{Domain: "edge", Descriptors: []*tollgatev1.EnvoyDescriptorKey{{Key: "user"}}}})
	bob := desc("user", "bob")
	if code1(t, e.ask("edge", 0, bob)) != ok {
		t.Fatal("bob's first take")
	}
	eng := e.srv.Engine()
	if err := eng.RecordOutcome("edge-user", limiter.OutcomeError, 0); err != nil {
		t.Fatal(err)
	}
	b, err := eng.Bucket("edge-user")
	if err != nil || b.Rate != 80 {
		t.Fatalf("no adaptive cut to 80: %+v, %v", b, err)
	}
	e.clock.Advance(11 * time.Millisecond) // 1.1 tokens at rate 100, 0.88 at 80
	st = e.ask("edge", 0, bob).GetStatuses()[0]
	if st.GetCode() != over || st.GetCurrentLimit().GetRequestsPerUnit() != 80 {
		t.Fatalf("after the cut to 80: %v", st)
	}
	if d := st.GetDurationUntilReset().AsDuration(); d < 1400*time.Microsecond || d > 1600*time.Microsecond {
		t.Fatalf("after the cut to 80, %v until 1 token; want 1.5ms", d)
	}
}

// The service is subject to the server's auth: with a policy, a caller
// without a certificate (nor the admin token) may use no pool.
func TestAuth(t *testing.T) {
	pol := &auth.Policy{Rules: []auth.PolicyRule{{Clients: []string{"*"}, Pools: []string{"*"}}}}
	admin := newEnv(t, server.Config{Auth: &auth.Config{AdminToken: adminToken, Policy: pol}}, grpc.WithPerRPCCredentials(bearer(adminToken)))
	admin.createPool(edgePool("edge-ip", 1, 1))
	if code1(t, admin.ask("edge", 0, desc("remote_address", "10.0.0.1"))) != ok {
		t.Fatal("admin refused")
	}
	anon := rlsv3.NewRateLimitServiceClient(admin.dial())
	_, err := anon.ShouldRateLimit(admin.ctx(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{desc("remote_address", "10.0.0.1")}})
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("anonymous call: %v, want UNAUTHENTICATED", err)
	}
}

// bearer sends "authorization: Bearer tok" with every call.
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearer) RequireTransportSecurity() bool { return false }

// The pools file takes a pool's rule as the proto spells it, and the
// server serves it.
func TestPoolsFileRule(t *testing.T) {
	pools, err := poolsfile.Parse("pools.yaml", []byte(`pools:
  - name: edge-ip
    rate: 1
    envoy: {domain: edge, descriptors: [{key: remote_address}]}
  - name: edge-login
    rate: 5
    burst: 5
    envoy:
      domain: edge
      descriptors:
        - key: path
          value: /login
        - key: remote_address
      max_buckets: 50
`))
	if err != nil {
		t.Fatal(err)
	}
	want := []limiter.EnvoyRule{
		{Domain: "edge", Descriptors: []limiter.EnvoyDescriptorKey{{Key: "remote_address"}}, MaxBuckets: limiter.DefaultEnvoyMaxBuckets},
		{Domain: "edge", Descriptors: []limiter.EnvoyDescriptorKey{{Key: "path", Value: "/login"}, {Key: "remote_address"}}, MaxBuckets: 50},
	}
	if len(pools) != 2 || !reflect.DeepEqual(pools[0].Envoy, want[0]) || !reflect.DeepEqual(pools[1].Envoy, want[1]) {
		t.Fatalf("rules %+v", pools)
	}
	e := newEnv(t, server.Config{})
	for _, p := range pools {
		if _, err := e.srv.Engine().CreatePool(p); err != nil {
			t.Fatal(err)
		}
	}
	a := desc("remote_address", "10.0.0.1")
	if code1(t, e.ask("edge", 0, a)) != ok || code1(t, e.ask("edge", 0, a)) != over {
		t.Fatal("edge-ip: burst 1 not applied")
	}
	st := e.ask("edge", 0, desc("path", "/login", "remote_address", "10.0.0.1")).GetStatuses()[0]
	if st.GetCode() != ok || st.GetCurrentLimit().GetName() != "edge-login" || st.GetLimitRemaining() != 4 {
		t.Fatalf("edge-login: %v", st)
	}

	for _, tc := range []struct{ file, want string }{
		{"pools:\n  - name: p\n    rate: 1\n    envoy: {descriptors: [{key: remote_address}]}\n", "pools.yaml:2: pool \"p\": envoy.domain is 0 bytes"},
		{"pools:\n  - name: p\n    rate: 1\n    envoy: {domain: edge}\n", "envoy.descriptors has 0 keys"},
		{"pools:\n  - name: p\n    concurrency: 1\n    envoy: {domain: edge, descriptors: [{key: k}]}\n", "needs a rate"},
		{"pools:\n  - name: p\n    rate: 1\n    envoy: {domain: edge, descriptors: [{name: k}]}\n", `unknown field "name"`},
	} {
		if _, err := poolsfile.Parse("pools.yaml", []byte(tc.file)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want %q", tc.file, err, tc.want)
		}
	}
}

// A pool's rule is stored with it: it is there after a restart.
func TestRuleIsStored(t *testing.T) {
	dir := t.TempDir()
	rule := limiter.EnvoyRule{Domain: "edge", Descriptors: []limiter.EnvoyDescriptorKey{{Key: "remote_address"}}, MaxBuckets: 7}
	srv, err := server.Open(server.Config{}, dir, []limiter.PoolConfig{{Name: "edge-ip", Rate: 1, Envoy: rule}})
	if err != nil {
		t.Fatal(err)
	}
	srv.Close()
	srv, err = server.Open(server.Config{}, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	info, err := srv.Engine().GetPool("edge-ip")
	if err != nil || !reflect.DeepEqual(info.Config.Envoy, rule) {
		t.Fatalf("after a restart: %+v, %v", info.Config.Envoy, err)
	}
}
