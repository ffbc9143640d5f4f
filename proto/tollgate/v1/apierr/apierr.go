// Package apierr is the vocabulary of Tollgate's failures, shared by the
// engine (limiter), the server and the client: the reasons of the API's
// tollgate.v1.ErrorReason enum, the gRPC code each is sent with, and the
// error type that carries them.
//
// The reasons and their Err* values are generated from
// proto/tollgate/v1/errors.proto (go generate ./proto), so each is defined
// once, in the API. The package imports only the standard library: the
// engine returns its errors without knowing gRPC.
package apierr

import (
	"time"
)

// Code is the class of a failure, numbered as google.rpc.Code and grpc-go's
// codes.Code, so that codes.Code(c) converts it. The zero Code is not a
// failure; the server sends an Error without a Code as INTERNAL.
type Code uint32

// Codes, named as in grpc-go.
const (
	CodeCanceled           Code = 1
	CodeUnknown            Code = 2
	CodeInvalidArgument    Code = 3
	CodeDeadlineExceeded   Code = 4
	CodeNotFound           Code = 5
	CodeAlreadyExists      Code = 6
	CodePermissionDenied   Code = 7
	CodeResourceExhausted  Code = 8
	CodeFailedPrecondition Code = 9
	CodeAborted            Code = 10
	CodeOutOfRange         Code = 11
	CodeUnimplemented      Code = 12
	CodeInternal           Code = 13
	CodeUnavailable        Code = 14
	CodeDataLoss           Code = 15
	CodeUnauthenticated    Code = 16
)

// Reason is a stable, machine-readable name for why a call failed, as sent
// in the status's google.rpc.ErrorInfo: the name of an ErrorReason value
// without ERROR_REASON_. Programs switch on reasons; people read
// Error.Message.
type Reason string

// Error is a failure with its reason: what the engine returns, and what the
// server converts into a gRPC status (the code, the message, an ErrorInfo
// with the reason, a RetryInfo with RetryAfter). Match a kind of failure with
// errors.Is against the Err* values, which compare by Reason.
type Error struct {
	Code    Code
	Reason  Reason
	Message string
	// RetryAfter, when positive, says how long until the call could succeed
	// (set for ReasonRateLimited and ReasonRecovering).
	RetryAfter time.Duration
}

// Error returns the message for people, or the reason when there is none.
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
