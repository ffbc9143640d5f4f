package server

import (
	"github.com/tollgate/tollgate/internal/refuse"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// ErrorDomain is the domain of the google.rpc.ErrorInfo detail that every
// Tollgate error status carries.
const ErrorDomain = refuse.Domain

// Reasons the server itself gives, beside the engine's: short names for the
// generated apierr.Reason values (one list, the API's ErrorReason enum).
// They appear in ErrorInfo.reason, SessionError.reason and
// ProvideError.reason.
const (
	ReasonRequestIDInUse   = apierr.ReasonRequestIDInUse
	ReasonTooManyRequests  = apierr.ReasonTooManyRequests
	ReasonSessionOverflow  = apierr.ReasonSessionOverflow
	ReasonWatchOverflow    = apierr.ReasonWatchOverflow
	ReasonDeadlineExceeded = apierr.ReasonDeadlineExceeded
	ReasonInternal         = apierr.ReasonInternal
	ReasonProviderExpired  = apierr.ReasonProviderExpired
	// Authentication and authorization refusals.
	ReasonUnauthenticated  = apierr.ReasonUnauthenticated
	ReasonPermissionDenied = apierr.ReasonPermissionDenied
	// Refusals for Limits, all RESOURCE_EXHAUSTED.
	ReasonTooManyPools       = apierr.ReasonTooManyPools
	ReasonTooManyWaiters     = apierr.ReasonTooManyWaiters
	ReasonClientLeaseLimit   = apierr.ReasonClientLeaseLimit
	ReasonClientSessionLimit = apierr.ReasonClientSessionLimit
	ReasonClientRateLimited  = apierr.ReasonClientRateLimited
)
