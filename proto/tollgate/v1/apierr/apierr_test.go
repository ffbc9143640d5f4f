package apierr

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// TestEveryReasonHasAnError checks the Err* values against the API's
// ErrorReason enum, the one list of what the server sends: one value per
// reason, with the code the enum gives it.
func TestEveryReasonHasAnError(t *testing.T) {
	byReason := make(map[Reason]*Error, len(all))
	for _, e := range all {
		if byReason[e.Reason] != nil {
			t.Errorf("two errors for %s", e.Reason)
		}
		byReason[e.Reason] = e
	}
	vals := tollgatev1.ErrorReason(0).Descriptor().Values()
	for i := range vals.Len() {
		v := vals.Get(i)
		if v.Number() == 0 {
			continue
		}
		reason := Reason(strings.TrimPrefix(string(v.Name()), "ERROR_REASON_"))
		e := byReason[reason]
		if e == nil {
			t.Errorf("no Err value for %s", v.Name())
			continue
		}
		delete(byReason, reason)
		code := proto.GetExtension(v.Options(), tollgatev1.E_GrpcCode).(string)
		if got := codes.Code(e.Code); code != strings.ToUpper(camelToSnake(got.String())) {
			t.Errorf("error of %s has code %v; the enum says %s", reason, got, code)
		}
	}
	for r := range byReason {
		t.Errorf("error %s is not in the ErrorReason enum", r)
	}
}

// camelToSnake turns grpc-go's code names (ResourceExhausted) into
// google.rpc.Code's (RESOURCE_EXHAUSTED, CANCELLED).
func camelToSnake(s string) string {
	if s == "Canceled" {
		return "CANCELLED"
	}
	var b strings.Builder
	for i, r := range s {
		if i > 0 && r >= 'A' && r <= 'Z' {
			b.WriteByte('_')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// TestCodesAreGRPCs checks that every Code converts to the gRPC code of the
// same name.
func TestCodesAreGRPCs(t *testing.T) {
	for c, want := range map[Code]codes.Code{
		CodeCanceled: codes.Canceled, CodeUnknown: codes.Unknown, CodeInvalidArgument: codes.InvalidArgument,
		CodeDeadlineExceeded: codes.DeadlineExceeded, CodeNotFound: codes.NotFound, CodeAlreadyExists: codes.AlreadyExists,
		CodePermissionDenied: codes.PermissionDenied, CodeResourceExhausted: codes.ResourceExhausted,
		CodeFailedPrecondition: codes.FailedPrecondition, CodeAborted: codes.Aborted, CodeOutOfRange: codes.OutOfRange,
		CodeUnimplemented: codes.Unimplemented, CodeInternal: codes.Internal, CodeUnavailable: codes.Unavailable,
		CodeDataLoss: codes.DataLoss, CodeUnauthenticated: codes.Unauthenticated,
	} {
		if codes.Code(c) != want {
			t.Errorf("Code %d converts to %v; want %v", c, codes.Code(c), want)
		}
	}
}

func TestErrorMatchesByReason(t *testing.T) {
	err := error(&Error{Code: CodeNotFound, Reason: ReasonPoolNotFound, Message: `pool "x" not found`})
	if !errors.Is(err, ErrPoolNotFound) || errors.Is(err, ErrPoolDeleted) {
		t.Errorf("errors.Is matches by reason: %v", err)
	}
	if err.Error() != `pool "x" not found` {
		t.Errorf("Error() = %q; want the message", err.Error())
	}
	if got := (&Error{Reason: ReasonQueueFull}).Error(); got != "QUEUE_FULL" {
		t.Errorf("Error() without a message = %q; want the reason", got)
	}
}
