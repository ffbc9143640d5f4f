package apiconv

import (
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tollgate/tollgate/internal/leaseid"
	"github.com/tollgate/tollgate/internal/tracing"
	"github.com/tollgate/tollgate/limiter"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// wantInvalid fails t unless err is an invalid argument whose message
// names field.
func wantInvalid(t *testing.T, err error, field string) {
	t.Helper()
	var le *apierr.Error
	if !errors.As(err, &le) || le.Code != apierr.CodeInvalidArgument || !strings.Contains(le.Message, field) {
		t.Fatalf("error %v; want an invalid argument naming %s", err, field)
	}
}

func TestAcquireFromProto(t *testing.T) {
	got, err := AcquireFromProto(&tollgatev1.AcquireRequest{Pool: "db", Ttl: durationpb.New(time.Minute), WaitTimeout: durationpb.New(time.Second),
		Priority: 3, NoWait: true, ClientId: "w1", Description: "job"})
	want := limiter.AcquireRequest{Pool: "db", Weight: 1, TTL: time.Minute, WaitTimeout: time.Second, Priority: 3, NoWait: true, ClientID: "w1", Description: "job"}
	if err != nil || got != want {
		t.Fatalf("AcquireFromProto = %+v, %v; want %+v (weight unset is 1)", got, err, want)
	}

	tooBig := map[string]string{"traceparent": strings.Repeat("x", tracing.MaxContextBytes)}
	for field, r := range map[string]*tollgatev1.AcquireRequest{
		"pool":          nil,
		"weight":        {Pool: "db", Weight: proto.Int64(0)},
		"ttl":           {Pool: "db", Ttl: durationpb.New(-time.Second)},
		"wait_timeout":  {Pool: "db", WaitTimeout: &durationpb.Duration{Seconds: 1, Nanos: -1}},
		"trace_context": {Pool: "db", TraceContext: tooBig},
	} {
		_, err := AcquireFromProto(r)
		wantInvalid(t, err, field)
	}
	if _, err := AcquireFromProto(&tollgatev1.AcquireRequest{Pool: "bad name"}); err == nil {
		t.Fatal("an invalid pool name was accepted")
	}
}

func TestCountArg(t *testing.T) {
	if n, err := CountArg("tokens", nil); n != 1 || err != nil {
		t.Fatalf("unset: %d, %v; want 1", n, err)
	}
	if n, err := CountArg("tokens", proto.Int64(5)); n != 5 || err != nil {
		t.Fatalf("5: %d, %v", n, err)
	}
	_, err := CountArg("tokens", proto.Int64(-2))
	wantInvalid(t, err, "tokens")
}

func TestOutcomeFromProto(t *testing.T) {
	if o, err := OutcomeFromProto(nil); o != nil || err != nil {
		t.Fatalf("no outcome: %v, %v", o, err)
	}
	o, err := OutcomeFromProto(&tollgatev1.Outcome{Result: tollgatev1.OutcomeResult_OUTCOME_RESULT_TIMEOUT, Latency: durationpb.New(time.Second)})
	if err != nil || o.Outcome != limiter.OutcomeTimeout || o.Latency != time.Second {
		t.Fatalf("timeout outcome: %+v, %v", o, err)
	}
	_, err = OutcomeFromProto(&tollgatev1.Outcome{})
	wantInvalid(t, err, "outcome.result")
	_, err = OutcomeFromProto(&tollgatev1.Outcome{Result: tollgatev1.OutcomeResult_OUTCOME_RESULT_SUCCESS, Latency: durationpb.New(-time.Second)})
	wantInvalid(t, err, "outcome.latency")
}

func TestReportsFromProto(t *testing.T) {
	rs, err := ReportsFromProto(&tollgatev1.ReportRequest{Reports: []*tollgatev1.PoolReport{
		{Pool: "db", Successes: 3, Errors: 1, Latency: &tollgatev1.LatencySummary{Count: 4, Sum: durationpb.New(time.Second), Max: durationpb.New(time.Second / 2)}}}})
	if err != nil || len(rs) != 1 || rs[0].Successes != 3 || rs[0].LatencySum != time.Second || rs[0].LatencyMax != time.Second/2 {
		t.Fatalf("ReportsFromProto = %+v, %v", rs, err)
	}
	_, err = ReportsFromProto(&tollgatev1.ReportRequest{Reports: []*tollgatev1.PoolReport{{Pool: "db"}, {}}})
	wantInvalid(t, err, "reports[1].pool")
	_, err = ReportsFromProto(&tollgatev1.ReportRequest{Reports: make([]*tollgatev1.PoolReport, limiter.MaxReportPools+1)})
	wantInvalid(t, err, "reports")
}

func TestShareRequests(t *testing.T) {
	ids := leaseid.New([]byte("0123456789abcdef0123456789abcdef"))
	sr, err := ShareRequestFromProto(&tollgatev1.AcquireShareRequest{Pool: "api", Want: 5, ClientId: "c"})
	if err != nil || sr.Pool != "api" || sr.Want != 5 || sr.ClientID != "c" {
		t.Fatalf("ShareRequestFromProto = %+v, %v", sr, err)
	}
	_, err = ShareRequestFromProto(&tollgatev1.AcquireShareRequest{Pool: "api"})
	wantInvalid(t, err, "want")
	_, err = ShareRequestFromProto(&tollgatev1.AcquireShareRequest{Pool: "api", Want: 1, Weight: proto.Int64(0)})
	wantInvalid(t, err, "weight")

	shareID := ShareToProto(ids, limiter.Share{Pool: "api", ID: 7}).GetId()
	ref, err := ShareRefreshFromProto(ids, &tollgatev1.RefreshShareRequest{Pool: "api", ShareId: shareID, GrantedRate: proto.Float64(2)})
	if err != nil || ref.ID != 7 || ref.Granted != 2 {
		t.Fatalf("ShareRefreshFromProto = %+v, %v", ref, err)
	}
	if _, err := ShareRefreshFromProto(ids, &tollgatev1.RefreshShareRequest{Pool: "other", ShareId: shareID}); err == nil {
		t.Fatal("a share id of another pool was accepted")
	}
	for field, r := range map[string]*tollgatev1.RefreshShareRequest{
		"granted_rate": {Pool: "api", ShareId: shareID, GrantedRate: proto.Float64(0)},
		"want":         {Pool: "api", ShareId: shareID, Want: proto.Float64(-1)},
		"weight":       {Pool: "api", ShareId: shareID, Weight: proto.Int64(0)},
	} {
		_, err := ShareRefreshFromProto(ids, r)
		wantInvalid(t, err, field)
	}
}
