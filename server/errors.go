package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tollgate/tollgate/limiter"
)

// ErrorDomain is the domain of the google.rpc.ErrorInfo detail that every
// Tollgate error status carries.
const ErrorDomain = "tollgate.dev"

// Reasons the server itself gives, beside the engine's: short names for the
// generated limiter.Reason values (one list, the API's ErrorReason enum).
// They appear in ErrorInfo.reason, SessionError.reason and
// ProvideError.reason.
const (
	ReasonRequestIDInUse   = limiter.ReasonRequestIDInUse
	ReasonTooManyRequests  = limiter.ReasonTooManyRequests
	ReasonSessionOverflow  = limiter.ReasonSessionOverflow
	ReasonWatchOverflow    = limiter.ReasonWatchOverflow
	ReasonDeadlineExceeded = limiter.ReasonDeadlineExceeded
	ReasonInternal         = limiter.ReasonInternal
	ReasonProviderExpired  = limiter.ReasonProviderExpired
	// Authentication and authorization refusals.
	ReasonUnauthenticated  = limiter.ReasonUnauthenticated
	ReasonPermissionDenied = limiter.ReasonPermissionDenied
	// Refusals for Limits, all RESOURCE_EXHAUSTED.
	ReasonTooManyPools       = limiter.ReasonTooManyPools
	ReasonTooManyWaiters     = limiter.ReasonTooManyWaiters
	ReasonClientLeaseLimit   = limiter.ReasonClientLeaseLimit
	ReasonClientSessionLimit = limiter.ReasonClientSessionLimit
	ReasonClientRateLimited  = limiter.ReasonClientRateLimited
)

// errCtx says what an error is about, for ErrorInfo metadata: the pool and
// lease id, when known. Empty fields are left out.
type errCtx struct {
	pool    string
	leaseID string
}

// invalidArg returns an INVALID_ARGUMENT engine-style error with a message
// formatted for people.
func invalidArg(format string, args ...any) *limiter.Error {
	return &limiter.Error{Code: limiter.CodeInvalidArgument, Reason: limiter.ReasonInvalidArgument, Message: fmt.Sprintf(format, args...)}
}

// grpcCode maps an engine code onto the gRPC code of the same name.
func grpcCode(c limiter.Code) codes.Code {
	switch c {
	case limiter.CodeInvalidArgument:
		return codes.InvalidArgument
	case limiter.CodeNotFound:
		return codes.NotFound
	case limiter.CodeAlreadyExists:
		return codes.AlreadyExists
	case limiter.CodeResourceExhausted:
		return codes.ResourceExhausted
	case limiter.CodeFailedPrecondition:
		return codes.FailedPrecondition
	case limiter.CodeDeadlineExceeded:
		return codes.DeadlineExceeded
	case limiter.CodeCanceled:
		return codes.Canceled
	case limiter.CodeUnavailable:
		return codes.Unavailable
	}
	return codes.Internal
}

// classify turns any error from a handler into the engine's error shape:
// *limiter.Error is kept, context errors become CANCELED or
// DEADLINE_EXCEEDED, and anything else becomes INTERNAL (and is logged,
// since it is a bug).
func classify(log *slog.Logger, op string, err error, ec errCtx) *limiter.Error {
	var le *limiter.Error
	switch {
	case errors.As(err, &le):
		if grpcCode(le.Code) == codes.Internal {
			log.Error("engine returned an error with an unknown code", "op", op, "code", le.Code, "reason", le.Reason, "err", le.Message, "pool", ec.pool)
		}
		return withHint(le, ec)
	case errors.Is(err, context.Canceled):
		return &limiter.Error{Code: limiter.CodeCanceled, Reason: limiter.ReasonCanceled,
			Message: "the call was cancelled by the client before it finished; nothing was granted"}
	case errors.Is(err, context.DeadlineExceeded):
		return &limiter.Error{Code: limiter.CodeDeadlineExceeded, Reason: ReasonDeadlineExceeded,
			Message: "the call's deadline passed before it finished; nothing was granted; allow a longer deadline or retry"}
	}
	log.Error("internal error", "op", op, "err", err, "pool", ec.pool, "lease_id", ec.leaseID)
	return &limiter.Error{Code: 0, Reason: ReasonInternal,
		Message: fmt.Sprintf("internal server error in %s; it has been logged on the server; retry, and report it if it persists", op)}
}

// hints say how to fix an engine error with the tollgate command, by
// reason; %[1]s is the pool. The engine says what is wrong, in its own
// terms; the server, which knows its command line, adds how to fix it.
var hints = map[limiter.Reason]string{
	limiter.ReasonPoolNotFound:     " (tollgate pool create %[1]s --concurrency N)",
	limiter.ReasonPoolExists:       " (tollgate pool update %[1]s)",
	limiter.ReasonResourceNotFound: " (tollgate resource list %[1]s)",
}

// withHint returns le with the hint for its reason added to its message,
// when it has one and the pool is known; otherwise le itself.
func withHint(le *limiter.Error, ec errCtx) *limiter.Error {
	h, ok := hints[le.Reason]
	if !ok || ec.pool == "" {
		return le
	}
	out := *le
	out.Message += fmt.Sprintf(h, ec.pool)
	return &out
}

// toStatus converts a handler error into the gRPC status error returned to
// the client: the code of the same name, the message for people, an
// ErrorInfo detail {reason, domain tollgate.dev, metadata pool/lease_id}
// and, when the engine says when to retry, a RetryInfo detail.
func toStatus(log *slog.Logger, op string, err error, ec errCtx) error {
	if err == nil {
		return nil
	}
	if _, ok := err.(interface{ GRPCStatus() *status.Status }); ok {
		if st, ok := status.FromError(err); ok {
			return st.Err()
		}
	}
	le := classify(log, op, err, ec)
	return statusOf(le, ec).Err()
}

// statusOf builds the status for an engine error.
func statusOf(le *limiter.Error, ec errCtx) *status.Status {
	msg := le.Message
	if msg == "" {
		msg = string(le.Reason)
	}
	st := status.New(grpcCode(le.Code), msg)
	info := &errdetails.ErrorInfo{Reason: string(le.Reason), Domain: ErrorDomain}
	if ec.pool != "" || ec.leaseID != "" {
		info.Metadata = make(map[string]string, 2)
		if ec.pool != "" {
			info.Metadata["pool"] = ec.pool
		}
		if ec.leaseID != "" {
			info.Metadata["lease_id"] = ec.leaseID
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
		return status.New(grpcCode(le.Code), msg)
	}
	return st
}
