package refuse

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// About says what an error is about, for ErrorInfo metadata: the pool and
// lease id, when known. Empty fields are left out.
type About struct {
	Pool    string
	LeaseID string
}

// GRPCCode returns the gRPC code of c: the one of the same number, or
// INTERNAL for the zero Code and numbers gRPC does not define.
func GRPCCode(c apierr.Code) codes.Code {
	if c == 0 || c > apierr.CodeUnauthenticated {
		return codes.Internal
	}
	return codes.Code(c)
}

// Classify turns any error from a handler into an *apierr.Error: an
// *apierr.Error (the engine's, InvalidArg's) is kept, context errors become
// CANCELED or DEADLINE_EXCEEDED, and anything else becomes INTERNAL (and is
// logged, since it is a bug).
func Classify(log *slog.Logger, op string, err error, ab About) *apierr.Error {
	var le *apierr.Error
	switch {
	case errors.As(err, &le):
		if GRPCCode(le.Code) != codes.Code(le.Code) {
			log.Error("engine returned an error with an unknown code", "op", op, "code", le.Code, "reason", le.Reason, "err", le.Message, "pool", ab.Pool)
		}
		return withHint(le, ab)
	case errors.Is(err, context.Canceled):
		return &apierr.Error{Code: apierr.CodeCanceled, Reason: apierr.ReasonCanceled,
			Message: "the call was cancelled by the client before it finished; nothing was granted"}
	case errors.Is(err, context.DeadlineExceeded):
		return &apierr.Error{Code: apierr.CodeDeadlineExceeded, Reason: apierr.ReasonDeadlineExceeded,
			Message: "the call's deadline passed before it finished; nothing was granted; allow a longer deadline or retry"}
	}
	log.Error("internal error", "op", op, "err", err, "pool", ab.Pool, "lease_id", ab.LeaseID)
	return &apierr.Error{Code: apierr.CodeInternal, Reason: apierr.ReasonInternal,
		Message: fmt.Sprintf("internal server error in %s; it has been logged on the server; retry, and report it if it persists", op)}
}

// hints say how to fix an engine error with the tollgate command, by
// reason; %[1]s is the pool. The engine says what is wrong, in its own
// terms; the server, which knows its command line, adds how to fix it.
var hints = map[apierr.Reason]string{
	apierr.ReasonPoolNotFound:     " (tollgate pool create %[1]s --concurrency N)",
	apierr.ReasonPoolExists:       " (tollgate pool update %[1]s)",
	apierr.ReasonResourceNotFound: " (tollgate resource list %[1]s)",
}

// withHint returns le with the hint for its reason added to its message,
// when it has one and the pool is known; otherwise le itself.
func withHint(le *apierr.Error, ab About) *apierr.Error {
	h, ok := hints[le.Reason]
	if !ok || ab.Pool == "" {
		return le
	}
	out := *le
	out.Message += fmt.Sprintf(h, ab.Pool)
	return &out
}

// ToStatus converts a handler error into the gRPC status error returned to
// the client: the code of the same name, the message for people, an
// ErrorInfo detail {reason, domain tollgate.dev, metadata pool/lease_id}
// and, when the engine says when to retry, a RetryInfo detail.
func ToStatus(log *slog.Logger, op string, err error, ab About) error {
	if err == nil {
		return nil
	}
	if _, ok := err.(interface{ GRPCStatus() *status.Status }); ok {
		if st, ok := status.FromError(err); ok {
			return st.Err()
		}
	}
	le := Classify(log, op, err, ab)
	return StatusOf(le, ab).Err()
}

// StatusOf builds the status for an engine error.
func StatusOf(le *apierr.Error, ab About) *status.Status {
	msg := le.Message
	if msg == "" {
		msg = string(le.Reason)
	}
	st := status.New(GRPCCode(le.Code), msg)
	info := &errdetails.ErrorInfo{Reason: string(le.Reason), Domain: Domain}
	if ab.Pool != "" || ab.LeaseID != "" {
		info.Metadata = make(map[string]string, 2)
		if ab.Pool != "" {
			info.Metadata["pool"] = ab.Pool
		}
		if ab.LeaseID != "" {
			info.Metadata["lease_id"] = ab.LeaseID
		}
	}
	var err error
	if le.RetryAfter > 0 {
		st, err = st.WithDetails(info, &errdetails.RetryInfo{RetryDelay: durationpb.New(le.RetryAfter)})
	} else {
		st, err = st.WithDetails(info)
	}
	if err != nil {
		// Only a marshalling failure of well-known messages; keep the bare status.
		return status.New(GRPCCode(le.Code), msg)
	}
	return st
}
