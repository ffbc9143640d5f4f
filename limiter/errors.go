package limiter

import (
	"fmt"
	"time"
)

// Code classifies an engine error. Each Code maps one to one onto the gRPC
// status code of the same name; the engine itself knows nothing of gRPC.
type Code uint8

// Error codes.
const (
	CodeInvalidArgument Code = iota + 1
	CodeNotFound
	CodeAlreadyExists
	CodeResourceExhausted
	CodeFailedPrecondition
	CodeDeadlineExceeded
	CodeCanceled
	CodeUnavailable
)

// Reason is a stable, machine-readable name for why a call failed. Programs
// switch on reasons; people read Error.Message. The values are generated
// from the API's tollgate.v1.ErrorReason enum (go generate ./proto), which
// defines them once for the engine, the server and the clients.
type Reason string

// Error is the error every engine call returns. Match a kind of failure with
// errors.Is against the Err* values below, which compare by Reason.
type Error struct {
	Code    Code
	Reason  Reason
	Message string
	// RetryAfter, when positive, says how long until the call could succeed
	// (set for ReasonRateLimited).
	RetryAfter time.Duration
}

// Error returns the message for people.
func (e *Error) Error() string {
	if e.Message == "" {
		return string(e.Reason)
	}
	return e.Message
}

// Is reports whether target is an *Error with the same Reason.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Reason == e.Reason
}

// Errors to match with errors.Is.
var (
	ErrInvalidArgument  = &Error{Code: CodeInvalidArgument, Reason: ReasonInvalidArgument}
	ErrPoolNotFound     = &Error{Code: CodeNotFound, Reason: ReasonPoolNotFound}
	ErrPoolExists       = &Error{Code: CodeAlreadyExists, Reason: ReasonPoolExists}
	ErrPoolBusy         = &Error{Code: CodeFailedPrecondition, Reason: ReasonPoolBusy}
	ErrPoolDeleted      = &Error{Code: CodeNotFound, Reason: ReasonPoolDeleted}
	ErrLeaseNotFound    = &Error{Code: CodeNotFound, Reason: ReasonLeaseNotFound}
	ErrLeaseExpired     = &Error{Code: CodeNotFound, Reason: ReasonLeaseExpired}
	ErrLeaseRevoked     = &Error{Code: CodeNotFound, Reason: ReasonLeaseRevoked}
	ErrNoCapacity       = &Error{Code: CodeResourceExhausted, Reason: ReasonNoCapacity}
	ErrQueueFull        = &Error{Code: CodeResourceExhausted, Reason: ReasonQueueFull}
	ErrWaitTimeout      = &Error{Code: CodeDeadlineExceeded, Reason: ReasonWaitTimeout}
	ErrCanceled         = &Error{Code: CodeCanceled, Reason: ReasonCanceled}
	ErrLimitBelowWeight = &Error{Code: CodeFailedPrecondition, Reason: ReasonLimitBelowWeight}
	ErrNoRateLimit      = &Error{Code: CodeFailedPrecondition, Reason: ReasonNoRateLimit}
	ErrRateLimited      = &Error{Code: CodeResourceExhausted, Reason: ReasonRateLimited}
	ErrShuttingDown     = &Error{Code: CodeUnavailable, Reason: ReasonShuttingDown}
	// ErrNotLeader: the engine's owner no longer leads (Options.Live);
	// nothing was changed.
	ErrNotLeader = &Error{Code: CodeUnavailable, Reason: ReasonNotLeader}
	// ErrStorageFailed: a Persister write failed; the change was not made.
	ErrStorageFailed = &Error{Code: CodeUnavailable, Reason: ReasonStorageFailed}
	// ErrRecovering: a no-wait acquire in a pool still in its recovery
	// window; RetryAfter says when the window ends.
	ErrRecovering = &Error{Code: CodeUnavailable, Reason: ReasonRecovering}
	// ErrLeaseNotReadopted: a renew named a lease from before a restart
	// that the engine could not take back (it would not fit under the
	// limit, or the renew did not say the lease's weight).
	ErrLeaseNotReadopted = &Error{Code: CodeNotFound, Reason: ReasonLeaseNotReadopted}
	// Errors of active and passive pools.
	ErrNotActive        = &Error{Code: CodeFailedPrecondition, Reason: ReasonNotActive}
	ErrNotPassive       = &Error{Code: CodeFailedPrecondition, Reason: ReasonNotPassive}
	ErrNotResourcePool  = &Error{Code: CodeFailedPrecondition, Reason: ReasonNotResourcePool}
	ErrResourceExists   = &Error{Code: CodeAlreadyExists, Reason: ReasonResourceExists}
	ErrResourceNotFound = &Error{Code: CodeNotFound, Reason: ReasonResourceNotFound}
	ErrTooManyResources = &Error{Code: CodeResourceExhausted, Reason: ReasonTooManyResources}
	ErrProviderExists   = &Error{Code: CodeAlreadyExists, Reason: ReasonProviderExists}
	ErrProviderNotFound = &Error{Code: CodeNotFound, Reason: ReasonProviderNotFound}
	ErrTooManyProviders = &Error{Code: CodeResourceExhausted, Reason: ReasonTooManyProviders}
)

// errorf returns an *Error like kind with a formatted message.
func errorf(kind *Error, format string, args ...any) *Error {
	return &Error{Code: kind.Code, Reason: kind.Reason, Message: fmt.Sprintf(format, args...)}
}
