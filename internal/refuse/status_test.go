package refuse

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

func TestErrorMapping(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	cases := []struct {
		err    error
		code   codes.Code
		reason apierr.Reason
	}{
		{&apierr.Error{Code: apierr.CodeNotFound, Reason: apierr.ReasonPoolNotFound, Message: "m"}, codes.NotFound, apierr.ReasonPoolNotFound},
		{&apierr.Error{Code: apierr.CodeUnavailable, Reason: apierr.ReasonShuttingDown, Message: "m"}, codes.Unavailable, apierr.ReasonShuttingDown},
		{&apierr.Error{Code: apierr.CodeAlreadyExists, Reason: apierr.ReasonPoolExists, Message: "m"}, codes.AlreadyExists, apierr.ReasonPoolExists},
		{context.Canceled, codes.Canceled, apierr.ReasonCanceled},
		{context.DeadlineExceeded, codes.DeadlineExceeded, apierr.ReasonDeadlineExceeded},
		{errors.New("boom"), codes.Internal, apierr.ReasonInternal},
		{&apierr.Error{Code: 200, Reason: "ODD", Message: "m"}, codes.Internal, "ODD"},
	}
	for _, c := range cases {
		err := ToStatus(log, "Op", c.err, About{Pool: "p", LeaseID: "7"})
		info, _ := details(t, err, c.code, c.reason)
		if md := info.GetMetadata(); md["pool"] != "p" || md["lease_id"] != "7" {
			t.Errorf("%v: metadata %v", c.err, md)
		}
		if _, ri := details(t, err, c.code, c.reason); ri != nil {
			t.Errorf("%v: unexpected RetryInfo", c.err)
		}
	}
	err := ToStatus(log, "Op", &apierr.Error{Code: apierr.CodeResourceExhausted, Reason: apierr.ReasonRateLimited, Message: "m", RetryAfter: 1500 * time.Millisecond}, About{})
	if _, ri := details(t, err, codes.ResourceExhausted, apierr.ReasonRateLimited); ri.GetRetryDelay().AsDuration() != 1500*time.Millisecond {
		t.Fatalf("RetryInfo = %v", ri)
	}
	if ToStatus(log, "Op", nil, About{}) != nil {
		t.Fatal("nil error mapped to a status")
	}
	// A status error passes through unchanged.
	in := status.Error(codes.Aborted, "x")
	if got := ToStatus(log, "Op", in, About{}); status.Code(got) != codes.Aborted {
		t.Fatalf("status passed through as %v", got)
	}
}

// details checks that err is a status with code, a message and an
// ErrorInfo of Domain and reason, and returns the ErrorInfo and the
// RetryInfo (nil if none).
func details(t *testing.T, err error, code codes.Code, reason apierr.Reason) (*errdetails.ErrorInfo, *errdetails.RetryInfo) {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok || st.Code() != code || st.Message() == "" {
		t.Fatalf("error %v, want a status with code %v and a message", err, code)
	}
	var info *errdetails.ErrorInfo
	var ri *errdetails.RetryInfo
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			info = d
		case *errdetails.RetryInfo:
			ri = d
		}
	}
	if info.GetDomain() != Domain || info.GetReason() != string(reason) {
		t.Fatalf("ErrorInfo = %v, want domain %s reason %s (message %q)", info, Domain, reason, st.Message())
	}
	return info, ri
}
