package server

import (
	"github.com/tollgate/tollgate/internal/refuse"
	"github.com/tollgate/tollgate/limiter"
)

// ErrorDomain is the domain of the google.rpc.ErrorInfo detail that every
// Tollgate error status carries.
const ErrorDomain = refuse.Domain

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
