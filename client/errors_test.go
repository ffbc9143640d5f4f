package client_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tollgate/tollgate/client"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

func TestFromError(t *testing.T) {
	st, err := status.New(codes.ResourceExhausted, "slow down").WithDetails(
		&errdetails.ErrorInfo{Reason: "RATE_LIMITED", Domain: client.ErrorDomain},
		&errdetails.RetryInfo{RetryDelay: durationpb.New(1500 * time.Millisecond)},
	)
	if err != nil {
		t.Fatal(err)
	}
	wrapped := fmt.Errorf("calling: %w", st.Err())
	e, ok := client.FromError(wrapped)
	if !ok {
		t.Fatal("FromError: not a status")
	}
	if e.Code != codes.ResourceExhausted || e.Reason != "RATE_LIMITED" || e.Message != "slow down" || e.RetryAfter != 1500*time.Millisecond {
		t.Fatalf("FromError = %+v", e)
	}
	if !errors.Is(e, apierr.ErrRateLimited) || errors.Is(e, apierr.ErrNoCapacity) {
		t.Fatal("Is does not match by reason")
	}
	if got, want := e.Error(), "slow down (RESOURCE_EXHAUSTED RATE_LIMITED)"; got != want {
		t.Fatalf("Error() = %q; want %q", got, want)
	}
	if status.Code(e) != codes.ResourceExhausted {
		t.Fatalf("status.Code = %v", status.Code(e))
	}

	e, ok = client.FromError(status.Error(codes.Unavailable, "connection refused"))
	if !ok || e.Reason != "" || e.Error() != "connection refused (UNAVAILABLE)" {
		t.Fatalf("FromError of a bare status = %v, %v", e, ok)
	}
	if errors.Is(e, &client.Error{}) {
		t.Fatal("an error without reason matches an empty sentinel")
	}
	for _, err := range []error{nil, errors.New("x"), status.Error(codes.OK, "")} {
		if e, ok := client.FromError(err); ok || e != nil {
			t.Fatalf("FromError(%v) = %v, %v", err, e, ok)
		}
	}
	if client.CodeName(codes.Canceled) != "CANCELLED" || client.CodeName(codes.Code(99)) != "CODE(99)" {
		t.Fatal("CodeName")
	}
}
