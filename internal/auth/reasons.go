package auth

import "github.com/tollgate/tollgate/limiter"

// Reasons of the server's authentication and authorization refusals.
const (
	// ReasonUnauthenticated: the call needs credentials it did not present,
	// or presented ones the server does not accept (UNAUTHENTICATED).
	ReasonUnauthenticated limiter.Reason = "UNAUTHENTICATED"
	// ReasonPermissionDenied: the caller is known but not allowed to do
	// this (PERMISSION_DENIED).
	ReasonPermissionDenied limiter.Reason = "PERMISSION_DENIED"
)
