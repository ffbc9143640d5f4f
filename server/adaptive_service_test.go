package server

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/events"
	"github.com/tollgate/tollgate/limiter"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

func outcome(r tollgatev1.OutcomeResult, latency time.Duration) *tollgatev1.Outcome {
	o := &tollgatev1.Outcome{Result: r}
	if latency > 0 {
		o.Latency = dur(latency)
	}
	return o
}

// TestAdaptiveOverGRPC: a pool with adaptive settings is created and shown
// with defaults filled in; errors reported on release and in Report cut
// its effective limit, shown beside the configured one, and the change is
// an event.
func TestAdaptiveOverGRPC(t *testing.T) {
	e := newEnv(t)
	p := e.createPool(&tollgatev1.Pool{Name: "db", ConcurrencyLimit: 10, Adaptive: &tollgatev1.Adaptive{Enabled: true, MinSamples: 4}})
	a := p.GetAdaptive()
	if !a.GetEnabled() || a.GetBackoff() != limiter.DefaultAdaptiveBackoff || a.GetWindow().AsDuration() != limiter.DefaultAdaptiveWindow ||
		a.GetTarget() != tollgatev1.AdaptiveTarget_ADAPTIVE_TARGET_ALL || a.GetMinConcurrency() != 1 ||
		a.GetProbeInterval().AsDuration() != 5*limiter.DefaultAdaptiveInterval {
		t.Fatalf("adaptive settings as stored: %v", a)
	}
	for i := 0; i < 2; i++ {
		l := e.acquire(&tollgatev1.AcquireRequest{Pool: "db"})
		if _, err := e.lim.Release(e.ctx(), &tollgatev1.ReleaseRequest{Pool: "db", LeaseId: l.GetId(),
			Outcome: outcome(tollgatev1.OutcomeResult_OUTCOME_RESULT_TIMEOUT, 3*time.Second)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.lim.Report(e.ctx(), &tollgatev1.ReportRequest{Reports: []*tollgatev1.PoolReport{{Pool: "db", Errors: 2,
		Latency: &tollgatev1.LatencySummary{Count: 2, Sum: dur(2 * time.Second), Max: dur(time.Second)}}}}); err != nil {
		t.Fatal(err)
	}
	st := e.status("db")
	if st.GetEffectiveConcurrencyLimit() != 8 || st.GetThrottleReason() != tollgatev1.ThrottleReason_THROTTLE_REASON_ERRORS ||
		st.GetTimeoutsReported() != 2 || st.GetErrorsReported() != 2 || st.GetLastAdaptiveChange() == nil {
		t.Fatalf("status after errors: %v", st)
	}
	evs := e.srv.RecentEvents()
	if len(evs) == 0 || evs[0].Type != events.PoolThrottled || !strings.Contains(evs[0].Detail, "concurrency 10 → 8 (configured 10)") ||
		!strings.Contains(evs[0].Detail, "100.0% of 4 outcomes") {
		t.Fatalf("events: %+v", evs)
	}
	// An update of one adaptive field keeps the others.
	resp, err := e.adm.UpdatePool(e.ctx(), &tollgatev1.UpdatePoolRequest{Pool: &tollgatev1.Pool{Name: "db", SafeRate: 0,
		Adaptive: &tollgatev1.Adaptive{Backoff: 0.5, ProbeInterval: dur(7 * time.Second)}}, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"adaptive.backoff", "adaptive.probe_interval"}}})
	if err != nil {
		t.Fatal(err)
	}
	if a := resp.GetPool().GetAdaptive(); a.GetBackoff() != 0.5 || a.GetMinSamples() != 4 || !a.GetEnabled() || a.GetProbeInterval().AsDuration() != 7*time.Second {
		t.Fatalf("after updating adaptive.backoff: %v", a)
	}
	// Turning it off restores the configured limit.
	if _, err := e.adm.UpdatePool(e.ctx(), &tollgatev1.UpdatePoolRequest{Pool: &tollgatev1.Pool{Name: "db"},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"adaptive"}}}); err != nil {
		t.Fatal(err)
	}
	if st := e.status("db"); st.GetEffectiveConcurrencyLimit() != 10 || st.GetThrottleReason() != tollgatev1.ThrottleReason_THROTTLE_REASON_UNSPECIFIED {
		t.Fatalf("status with adaptive off: %v", st)
	}
}

// TestOutcomeErrorsOverGRPC: bad outcomes and reports get clear statuses
// and change nothing.
func TestOutcomeErrorsOverGRPC(t *testing.T) {
	e := newEnv(t)
	e.createPool(&tollgatev1.Pool{Name: "db", ConcurrencyLimit: 2})
	l := e.acquire(&tollgatev1.AcquireRequest{Pool: "db"})
	_, err := e.lim.Release(e.ctx(), &tollgatev1.ReleaseRequest{Pool: "db", LeaseId: l.GetId(), Outcome: &tollgatev1.Outcome{}})
	wantStatus(t, err, codes.InvalidArgument, apierr.ReasonInvalidArgument)
	_, err = e.lim.Release(e.ctx(), &tollgatev1.ReleaseRequest{Pool: "db", LeaseId: l.GetId(), Outcome: &tollgatev1.Outcome{Result: 7}})
	st := wantStatus(t, err, codes.InvalidArgument, apierr.ReasonInvalidArgument)
	if !strings.Contains(st.Message(), "OUTCOME_RESULT_SUCCESS") {
		t.Fatalf("message does not say what to send: %q", st.Message())
	}
	_, err = e.lim.Release(e.ctx(), &tollgatev1.ReleaseRequest{Pool: "db", LeaseId: l.GetId(), Outcome: &tollgatev1.Outcome{Result: tollgatev1.OutcomeResult_OUTCOME_RESULT_SUCCESS, Latency: dur(-time.Second)}})
	wantStatus(t, err, codes.InvalidArgument, apierr.ReasonInvalidArgument)
	if st := e.status("db"); st.GetHeld() != 1 {
		t.Fatal("a release with a bad outcome released the lease")
	}
	for _, tc := range []struct {
		req    *tollgatev1.ReportRequest
		code   codes.Code
		reason apierr.Reason
	}{
		{&tollgatev1.ReportRequest{Reports: []*tollgatev1.PoolReport{{Pool: "nope", Errors: 1}}}, codes.NotFound, apierr.ReasonPoolNotFound},
		{&tollgatev1.ReportRequest{Reports: []*tollgatev1.PoolReport{{Pool: "", Errors: 1}}}, codes.InvalidArgument, apierr.ReasonInvalidArgument},
		{&tollgatev1.ReportRequest{Reports: []*tollgatev1.PoolReport{{Pool: "db", Errors: -1}}}, codes.InvalidArgument, apierr.ReasonInvalidArgument},
		{&tollgatev1.ReportRequest{Reports: []*tollgatev1.PoolReport{{Pool: "db", Errors: 1}, {Pool: "db", Errors: 1}}}, codes.InvalidArgument, apierr.ReasonInvalidArgument},
		{&tollgatev1.ReportRequest{Reports: []*tollgatev1.PoolReport{{Pool: "db", Successes: 1, Latency: &tollgatev1.LatencySummary{Count: 1, Sum: dur(-time.Second)}}}}, codes.InvalidArgument, apierr.ReasonInvalidArgument},
		{&tollgatev1.ReportRequest{Reports: []*tollgatev1.PoolReport{{Pool: "db", Successes: 1, Latency: &tollgatev1.LatencySummary{Count: 5}}}}, codes.InvalidArgument, apierr.ReasonInvalidArgument},
	} {
		_, err := e.lim.Report(e.ctx(), tc.req)
		wantStatus(t, err, tc.code, tc.reason)
	}
	if st := e.status("db"); st.GetErrorsReported() != 0 || st.GetSuccessesReported() != 0 {
		t.Fatalf("refused reports counted: %v", st)
	}
	// Adaptive settings out of range name their field.
	_, err = e.adm.CreatePool(e.ctx(), &tollgatev1.CreatePoolRequest{Pool: &tollgatev1.Pool{Name: "x", ConcurrencyLimit: 1,
		Adaptive: &tollgatev1.Adaptive{Enabled: true, Backoff: 1.5}}})
	if st := wantStatus(t, err, codes.InvalidArgument, apierr.ReasonInvalidArgument); !strings.Contains(st.Message(), "adaptive.backoff") {
		t.Fatalf("message: %q", st.Message())
	}
	_, err = e.adm.CreatePool(e.ctx(), &tollgatev1.CreatePoolRequest{Pool: &tollgatev1.Pool{Name: "x", ConcurrencyLimit: 1,
		Adaptive: &tollgatev1.Adaptive{Enabled: true, Target: 9}}})
	wantStatus(t, err, codes.InvalidArgument, apierr.ReasonInvalidArgument)
	_, err = e.adm.UpdatePool(e.ctx(), &tollgatev1.UpdatePoolRequest{Pool: &tollgatev1.Pool{Name: "db"}, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"adaptive.nope"}}})
	wantStatus(t, err, codes.InvalidArgument, apierr.ReasonInvalidArgument)
}

// TestSharesOverGRPC: unary share calls, their errors, and a Session
// stream that is pushed the growth of its share when another holder gives
// rate back.
func TestSharesOverGRPC(t *testing.T) {
	e := newEnv(t)
	e.createPool(&tollgatev1.Pool{Name: "api", Rate: 100, Burst: 50, SafeRate: 2})
	e.createPool(&tollgatev1.Pool{Name: "db", ConcurrencyLimit: 2})

	resp, err := e.lim.AcquireShare(e.ctx(), &tollgatev1.AcquireShareRequest{Pool: "api", Want: 60, ClientId: "unary"})
	if err != nil {
		t.Fatal(err)
	}
	a := resp.GetShare()
	if a.GetRate() != 60 || a.GetBurst() != 30 || a.GetSafeRate() != 2 || a.GetRefreshInterval().AsDuration() != limiter.DefaultLeaseTTL/3 ||
		a.GetExpireTime() == nil || a.GetClientId() != "unary" || a.GetId() == "" {
		t.Fatalf("share: %v", a)
	}
	s := e.session()
	s.call(&tollgatev1.SessionRequest{RequestId: 1, Kind: &tollgatev1.SessionRequest_Hello{Hello: &tollgatev1.Hello{ClientId: "streamer"}}})
	r := s.call(&tollgatev1.SessionRequest{RequestId: 2, Kind: &tollgatev1.SessionRequest_AcquireShare{AcquireShare: &tollgatev1.AcquireShareRequest{Pool: "api", Want: 100}}})
	b := r.GetAcquireShare().GetShare()
	if b.GetRate() != 40 || b.GetClientId() != "streamer" {
		t.Fatalf("second share (only what is free): %v", r)
	}
	if st := e.status("api"); st.GetShareHolders() != 2 || st.GetSharesGranted() != 100 || st.GetEffectiveRate() != 100 {
		t.Fatalf("status: %v", st)
	}
	// The unary holder refreshes: it shrinks to its fair 50, and the
	// stream is pushed its growth to 50.
	rr, err := e.lim.RefreshShare(e.ctx(), &tollgatev1.RefreshShareRequest{Pool: "api", ShareId: a.GetId()})
	if err != nil || rr.GetShare().GetRate() != 50 {
		t.Fatalf("refresh: %v %v", rr, err)
	}
	ev := s.next().GetShareEvent()
	if ev.GetType() != tollgatev1.ShareEventType_SHARE_EVENT_TYPE_CHANGED || ev.GetShare().GetId() != b.GetId() || ev.GetShare().GetRate() != 50 {
		t.Fatalf("pushed event: %v", ev)
	}
	// Report and release on the stream.
	r = s.call(&tollgatev1.SessionRequest{RequestId: 3, Kind: &tollgatev1.SessionRequest_Report{Report: &tollgatev1.ReportRequest{Reports: []*tollgatev1.PoolReport{{Pool: "api", Successes: 3}}}}})
	if r.GetReport() == nil {
		t.Fatalf("report answer: %v", r)
	}
	r = s.call(&tollgatev1.SessionRequest{RequestId: 4, Kind: &tollgatev1.SessionRequest_Report{Report: &tollgatev1.ReportRequest{Reports: []*tollgatev1.PoolReport{{Pool: "api", Timeouts: -1}}}}})
	wantSessionError(t, r, codes.InvalidArgument, apierr.ReasonInvalidArgument)
	r = s.call(&tollgatev1.SessionRequest{RequestId: 5, Kind: &tollgatev1.SessionRequest_Report{Report: &tollgatev1.ReportRequest{Reports: []*tollgatev1.PoolReport{{Pool: "nope", Successes: 3}}}}})
	wantSessionError(t, r, codes.NotFound, apierr.ReasonPoolNotFound)
	r = s.call(&tollgatev1.SessionRequest{RequestId: 6, Kind: &tollgatev1.SessionRequest_ReleaseShare{ReleaseShare: &tollgatev1.ReleaseShareRequest{Pool: "api", ShareId: b.GetId()}}})
	if r.GetReleaseShare() == nil {
		t.Fatalf("release answer: %v", r)
	}
	if st := e.status("api"); st.GetShareHolders() != 1 || st.GetSuccessesReported() != 3 {
		t.Fatalf("status: %v", st)
	}

	for _, tc := range []struct {
		req    *tollgatev1.AcquireShareRequest
		code   codes.Code
		reason apierr.Reason
	}{
		{&tollgatev1.AcquireShareRequest{Pool: "api", Want: 0}, codes.InvalidArgument, apierr.ReasonInvalidArgument},
		{&tollgatev1.AcquireShareRequest{Pool: "api", Want: -5}, codes.InvalidArgument, apierr.ReasonInvalidArgument},
		{&tollgatev1.AcquireShareRequest{Pool: "api", Want: 5, Weight: i64(0)}, codes.InvalidArgument, apierr.ReasonInvalidArgument},
		{&tollgatev1.AcquireShareRequest{Pool: "api", Want: 5, Weight: i64(1001)}, codes.InvalidArgument, apierr.ReasonInvalidArgument},
		{&tollgatev1.AcquireShareRequest{Pool: "api", Want: 5, Ttl: dur(time.Hour)}, codes.InvalidArgument, apierr.ReasonInvalidArgument},
		{&tollgatev1.AcquireShareRequest{Pool: "nope", Want: 5}, codes.NotFound, apierr.ReasonPoolNotFound},
		{&tollgatev1.AcquireShareRequest{Pool: "db", Want: 5}, codes.FailedPrecondition, apierr.ReasonNoRateLimit},
	} {
		_, err := e.lim.AcquireShare(e.ctx(), tc.req)
		wantStatus(t, err, tc.code, tc.reason)
	}
	_, err = e.lim.RefreshShare(e.ctx(), &tollgatev1.RefreshShareRequest{Pool: "api", ShareId: "x1"})
	wantStatus(t, err, codes.InvalidArgument, apierr.ReasonInvalidArgument)
	_, err = e.lim.RefreshShare(e.ctx(), &tollgatev1.RefreshShareRequest{Pool: "api", ShareId: b.GetId()})
	wantStatus(t, err, codes.NotFound, apierr.ReasonShareNotFound)
	_, err = e.lim.ReleaseShare(e.ctx(), &tollgatev1.ReleaseShareRequest{Pool: "api", ShareId: ""})
	wantStatus(t, err, codes.InvalidArgument, apierr.ReasonInvalidArgument)

	// The unary share expires unrefreshed.
	e.clock.Advance(limiter.DefaultLeaseTTL)
	if st := e.status("api"); st.GetShareHolders() != 0 || st.GetSharesGranted() != 0 {
		t.Fatalf("after the TTL: %v", st)
	}
	_, err = e.lim.RefreshShare(e.ctx(), &tollgatev1.RefreshShareRequest{Pool: "api", ShareId: a.GetId()})
	if st := wantStatus(t, err, codes.NotFound, apierr.ReasonShareNotFound); !strings.Contains(st.Message(), "expired") {
		t.Fatalf("message: %q", st.Message())
	}
}

// TestReportNeedsPoolAccess: with a policy, a client may not report on (and
// so throttle) a pool it may not use, nor take a share of it.
func TestReportNeedsPoolAccess(t *testing.T) {
	pki := newPKI(t, true)
	pol := &auth.Policy{Rules: []auth.PolicyRule{{Clients: []string{"worker-*"}, Pools: []string{"orders-*"}}}}
	o := startOps(t, Config{Auth: &auth.Config{AdminNames: []string{"ops-admin"}, Policy: pol, ClientCerts: true}}, pki.server)
	admin := o.env(pki.creds(t, "ops-admin"))
	worker := o.env(pki.creds(t, "worker-1"))
	admin.createPool(&tollgatev1.Pool{Name: "orders-db", ConcurrencyLimit: 5, Rate: 10})
	admin.createPool(&tollgatev1.Pool{Name: "billing-db", ConcurrencyLimit: 5, Rate: 10})

	_, err := worker.lim.Report(worker.ctx(), &tollgatev1.ReportRequest{Reports: []*tollgatev1.PoolReport{{Pool: "orders-db", Errors: 1}, {Pool: "billing-db", Errors: 1}}})
	wantRefusal(t, err, codes.PermissionDenied, "PERMISSION_DENIED", `"billing-db"`)
	if _, err := worker.lim.Report(worker.ctx(), &tollgatev1.ReportRequest{Reports: []*tollgatev1.PoolReport{{Pool: "orders-db", Errors: 1}}}); err != nil {
		t.Fatal(err)
	}
	_, err = worker.lim.AcquireShare(worker.ctx(), &tollgatev1.AcquireShareRequest{Pool: "billing-db", Want: 1})
	wantRefusal(t, err, codes.PermissionDenied, "PERMISSION_DENIED")
	s := worker.session()
	r := s.call(&tollgatev1.SessionRequest{RequestId: 1, Kind: &tollgatev1.SessionRequest_Report{Report: &tollgatev1.ReportRequest{Reports: []*tollgatev1.PoolReport{{Pool: "billing-db", Errors: 1}}}}})
	wantSessionError(t, r, codes.PermissionDenied, "PERMISSION_DENIED")
	r = s.call(&tollgatev1.SessionRequest{RequestId: 2, Kind: &tollgatev1.SessionRequest_AcquireShare{AcquireShare: &tollgatev1.AcquireShareRequest{Pool: "billing-db", Want: 1}}})
	wantSessionError(t, r, codes.PermissionDenied, "PERMISSION_DENIED")
	if st := admin.status("billing-db"); st.GetErrorsReported() != 0 {
		t.Fatalf("a refused report counted: %v", st)
	}
}
