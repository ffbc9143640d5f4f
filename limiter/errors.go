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
// switch on reasons; people read Error.Message.
type Reason string

// Reasons.
const (
	ReasonInvalidArgument  Reason = "INVALID_ARGUMENT"   // a request field is out of range
	ReasonPoolNotFound     Reason = "POOL_NOT_FOUND"     // no pool has that name
	ReasonPoolExists       Reason = "POOL_EXISTS"        // CreatePool of a taken name
	ReasonPoolBusy         Reason = "POOL_BUSY"          // DeletePool without force while leases are held
	ReasonPoolDeleted      Reason = "POOL_DELETED"       // the pool was deleted while the caller waited
	ReasonLeaseNotFound    Reason = "LEASE_NOT_FOUND"    // no live lease has that id (released, or never granted)
	ReasonLeaseExpired     Reason = "LEASE_EXPIRED"      // the lease was not renewed in time
	ReasonLeaseRevoked     Reason = "LEASE_REVOKED"      // the server took the lease back
	ReasonNoCapacity       Reason = "NO_CAPACITY"        // try mode, and the grant was not possible at once
	ReasonQueueFull        Reason = "QUEUE_FULL"         // the pool's wait queue is at max_waiters
	ReasonWaitTimeout      Reason = "WAIT_TIMEOUT"       // the wait ended ungranted at its timeout or deadline
	ReasonCanceled         Reason = "CANCELED"           // the caller went away while waiting
	ReasonLimitBelowWeight Reason = "LIMIT_BELOW_WEIGHT" // the limit was lowered below a waiter's weight
	ReasonNoRateLimit      Reason = "NO_RATE_LIMIT"      // Take on a pool that has no rate
	ReasonRateLimited      Reason = "RATE_LIMITED"       // Take's tokens would not come within the wait limit
	ReasonShuttingDown     Reason = "SHUTTING_DOWN"      // the engine is closed
	// Reasons of persistence and the recovery window.
	ReasonStorageFailed     Reason = "STORAGE_FAILED"      // a change could not be made durable, so it was not made
	ReasonRecovering        Reason = "RECOVERING"          // the pool is in its recovery window after a restart
	ReasonLeaseNotReadopted Reason = "LEASE_NOT_READOPTED" // a lease from before a restart could not be re-adopted
	// Reasons of active and passive pools.
	ReasonNotActive        Reason = "NOT_ACTIVE"         // an operator's instance call on a pool that is not active
	ReasonNotPassive       Reason = "NOT_PASSIVE"        // a provider registering with a pool that is not passive
	ReasonNotResourcePool  Reason = "NOT_RESOURCE_POOL"  // an instance call on a free pool
	ReasonResourceExists   Reason = "RESOURCE_EXISTS"    // an instance id already in the pool
	ReasonResourceNotFound Reason = "RESOURCE_NOT_FOUND" // no instance has that id (or the provider does not offer it)
	ReasonTooManyResources Reason = "TOO_MANY_RESOURCES" // the pool would hold more than MaxResourcesPerPool
	ReasonProviderExists   Reason = "PROVIDER_EXISTS"    // a live provider of the pool has that id
	ReasonProviderNotFound Reason = "PROVIDER_NOT_FOUND" // no live provider has that id (it left or expired)
	ReasonTooManyProviders Reason = "TOO_MANY_PROVIDERS" // the pool has MaxProvidersPerPool live providers
)

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
