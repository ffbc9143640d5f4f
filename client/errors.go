package client

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// ErrorDomain is the domain of the google.rpc.ErrorInfo detail that every
// Tollgate error status carries.
const ErrorDomain = "tollgate.dev"

// Error is a failure reported by a Tollgate server: a gRPC status with a
// google.rpc.ErrorInfo detail, or a SessionError on the Session stream.
//
// Match a kind of failure with errors.Is against the Err* values of package
// apierr (one for every reason the server sends, such as
// apierr.ErrNoCapacity); they compare by Reason only. Read Code for the broad
// class and Message for people.
type Error struct {
	// Code is the gRPC status code.
	Code codes.Code
	// Reason is the machine-readable reason (ErrorInfo.reason or
	// SessionError.reason), such as "NO_CAPACITY". It is empty when the
	// status carried none, as for transport failures.
	Reason apierr.Reason
	// Message is the status message, for people.
	Message string
	// RetryAfter, when positive, is the server's google.rpc.RetryInfo
	// delay: how long until the call could succeed (RATE_LIMITED,
	// RECOVERING and NOT_LEADER answers carry one).
	RetryAfter time.Duration
	// Metadata is the ErrorInfo's metadata, when the status carried any:
	// NOT_LEADER names the address of the leader of the pool's shard
	// ("leader", empty while none is known), its epoch ("epoch") and the
	// shard ("shard").
	Metadata map[string]string
}

// Error returns "<message> (<CODE> <REASON>)", for example
// `pool "x" not found (NOT_FOUND POOL_NOT_FOUND)`.
func (e *Error) Error() string {
	msg := e.Message
	if msg == "" {
		msg = string(e.Reason)
	}
	if msg == "" {
		msg = "error"
	}
	if e.Reason == "" || string(e.Reason) == CodeName(e.Code) {
		return fmt.Sprintf("%s (%s)", msg, CodeName(e.Code))
	}
	return fmt.Sprintf("%s (%s %s)", msg, CodeName(e.Code), e.Reason)
}

// Is reports whether target is an *Error or an *apierr.Error with the same,
// non-empty Reason.
func (e *Error) Is(target error) bool {
	var r apierr.Reason
	switch t := target.(type) {
	case *Error:
		r = t.Reason
	case *apierr.Error:
		r = t.Reason
	}
	return r != "" && r == e.Reason
}

// GRPCStatus returns e as a gRPC status (with its ErrorInfo detail), so that
// status.Code and status.FromError work on errors of this package.
func (e *Error) GRPCStatus() *status.Status {
	st := status.New(e.Code, e.Message)
	if e.Reason == "" {
		return st
	}
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: string(e.Reason), Domain: ErrorDomain, Metadata: e.Metadata}); err == nil {
		return d
	}
	return st
}

// Errors of the client itself.
var (
	// ErrLeaseLost matches every error that says a lease ended without its
	// holder's release: expired or revoked on the server, refused at renew,
	// its local deadline passed without a successful renew, or its Client
	// was closed. Such errors also match their cause (apierr.ErrLeaseExpired,
	// apierr.ErrLeaseRevoked, apierr.ErrLeaseNotFound, ErrClosed, ...) when it has one.
	ErrLeaseLost = errors.New("tollgate: lease lost")
	// ErrReleased is Lease.Err after the holder released the lease.
	ErrReleased = errors.New("tollgate: lease released")
	// ErrClosed is returned by calls on a closed Client, and by calls that
	// were in flight when it was closed.
	ErrClosed = errors.New("tollgate: client closed")
)

// errDeadline is the cause of a loss by the local deadline.
var errDeadline = errors.New("not renewed before its local deadline (expiry estimate minus safety margin)")

// FromError converts an error returned by a tollgate.v1 RPC into an *Error:
// an *Error (even wrapped) is returned as is; a gRPC status error gives its
// code, message, the reason of its ErrorInfo detail (if the domain is
// ErrorDomain) and the delay of its RetryInfo detail. It returns nil and
// false for nil, for errors that are not statuses, and for an OK status.
func FromError(err error) (*Error, bool) {
	if err == nil {
		return nil, false
	}
	var e *Error
	if errors.As(err, &e) {
		return e, true
	}
	var se interface{ GRPCStatus() *status.Status }
	if !errors.As(err, &se) {
		return nil, false
	}
	st := se.GRPCStatus() // not status.FromError: it would prefix wrappers' text
	if st.Code() == codes.OK {
		return nil, false
	}
	e = &Error{Code: st.Code(), Message: st.Message()}
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			if d.GetDomain() == ErrorDomain || d.GetDomain() == "" {
				e.Reason, e.Metadata = apierr.Reason(d.GetReason()), d.GetMetadata()
			}
		case *errdetails.RetryInfo:
			e.RetryAfter = d.GetRetryDelay().AsDuration()
		}
	}
	return e, true
}

// fromSessionError converts a Session stream error answer.
func fromSessionError(se *tollgatev1.SessionError) *Error {
	return &Error{Code: codes.Code(se.GetCode()), Reason: apierr.Reason(se.GetReason()), Message: se.GetMessage(), RetryAfter: se.GetRetryAfter().AsDuration(), Metadata: se.GetMetadata()}
}

// lostError returns the error of a lease that ended without its holder's
// release: it matches ErrLeaseLost and cause.
func lostError(l *Lease, cause error) error {
	return fmt.Errorf("%w: lease %s of pool %q: %w", ErrLeaseLost, l.id, l.pool, cause)
}

// codeNames are the canonical (google.rpc.Code) names of gRPC codes.
var codeNames = [...]string{
	codes.OK:                 "OK",
	codes.Canceled:           "CANCELLED",
	codes.Unknown:            "UNKNOWN",
	codes.InvalidArgument:    "INVALID_ARGUMENT",
	codes.DeadlineExceeded:   "DEADLINE_EXCEEDED",
	codes.NotFound:           "NOT_FOUND",
	codes.AlreadyExists:      "ALREADY_EXISTS",
	codes.PermissionDenied:   "PERMISSION_DENIED",
	codes.ResourceExhausted:  "RESOURCE_EXHAUSTED",
	codes.FailedPrecondition: "FAILED_PRECONDITION",
	codes.Aborted:            "ABORTED",
	codes.OutOfRange:         "OUT_OF_RANGE",
	codes.Unimplemented:      "UNIMPLEMENTED",
	codes.Internal:           "INTERNAL",
	codes.Unavailable:        "UNAVAILABLE",
	codes.DataLoss:           "DATA_LOSS",
	codes.Unauthenticated:    "UNAUTHENTICATED",
}

// CodeName returns the canonical upper-case name of a gRPC code, as in
// google.rpc.Code ("NOT_FOUND", "RESOURCE_EXHAUSTED"), or "CODE(n)" for an
// unknown one.
func CodeName(c codes.Code) string {
	if int(c) < len(codeNames) {
		return codeNames[c]
	}
	return "CODE(" + strconv.FormatUint(uint64(c), 10) + ")"
}
