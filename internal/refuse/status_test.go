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

	"github.com/tollgate/tollgate/limiter"
)

func TestErrorMapping(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	cases := []struct {
		err    error
		code   codes.Code
		reason limiter.Reason
	}{
		{&limiter.Error{Code: limiter.CodeNotFound, Reason: limiter.ReasonPoolNotFound, Message: "m"}, codes.NotFound, limiter.ReasonPoolNotFound},
		{&limiter.Error{Code: limiter.CodeUnavailable, Reason: limiter.ReasonShuttingDown, Message: "m"}, codes.Unavailable, limiter.ReasonShuttingDown},
		{&limiter.Error{Code: limiter.CodeAlreadyExists, Reason: limiter.ReasonPoolExists, Message: "m"}, codes.AlreadyExists, limiter.ReasonPoolExists},
		{context.Canceled, codes.Canceled, limiter.ReasonCanceled},
		{context.DeadlineExceeded, codes.DeadlineExceeded, limiter.ReasonDeadlineExceeded},
		{errors.New("boom"), codes.Internal, limiter.ReasonInternal},
		{&limiter.Error{Code: 200, Reason: "ODD", Message: "m"}, codes.Internal, "ODD"},
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
	err := ToStatus(log, "Op", &limiter.Error{Code: limiter.CodeResourceExhausted, Reason: limiter.ReasonRateLimited, Message: "m", RetryAfter: 1500 * time.Millisecond}, About{})
	if _, ri := details(t, err, codes.ResourceExhausted, limiter.ReasonRateLimited); ri.GetRetryDelay().AsDuration() != 1500*time.Millisecond {
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
func details(t *testing.T, err error, code codes.Code, reason limiter.Reason) (*errdetails.ErrorInfo, *errdetails.RetryInfo) {
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
