// Package refuse builds the errors with which the server's parts refuse a
// call, quotes what a caller sent in their messages, and converts every
// error a handler returns (the engine's, a context's, a refusal, a bug)
// into the gRPC status the caller gets: the code of the same name, a
// message for people and a google.rpc.ErrorInfo detail of Domain.
//
// It is the lowest layer of the server's packages: it imports the error
// type and reasons of package apierr and gRPC's status types; nothing of
// the engine or the server.
package refuse

import (
	"fmt"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// Domain is the domain of the google.rpc.ErrorInfo detail that every
// Tollgate error status carries.
const Domain = "tollgate.dev"

// InvalidArg returns an INVALID_ARGUMENT *apierr.Error with a message
// formatted for people.
func InvalidArg(format string, args ...any) *apierr.Error {
	return &apierr.Error{Code: apierr.CodeInvalidArgument, Reason: apierr.ReasonInvalidArgument, Message: fmt.Sprintf(format, args...)}
}

// Truncate shortens s to at most n bytes for quoting in messages.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// Quote quotes s for a message, cut to 64 bytes.
func Quote(s string) string { return `"` + Truncate(s, 64) + `"` }

// Refusal is an error the server's parts give before a call reaches the
// engine (UNAUTHENTICATED, PERMISSION_DENIED, a client's limits). It converts
// to a status with an ErrorInfo detail like every other Tollgate error, but
// without the pool and lease metadata and hints ToStatus adds to an
// *apierr.Error.
type Refusal struct {
	code   codes.Code
	reason apierr.Reason
	msg    string
}

// Newf returns a refusal with code and reason and a message formatted for
// people.
func Newf(code codes.Code, reason apierr.Reason, format string, args ...any) *Refusal {
	return &Refusal{code: code, reason: reason, msg: fmt.Sprintf(format, args...)}
}

// Error returns the message for people.
func (r *Refusal) Error() string { return r.msg }

// Code returns the gRPC code of the refusal.
func (r *Refusal) Code() codes.Code { return r.code }

// Reason returns the reason of the refusal.
func (r *Refusal) Reason() apierr.Reason { return r.reason }

// GRPCStatus returns the status the client gets.
func (r *Refusal) GRPCStatus() *status.Status {
	st := status.New(r.code, r.msg)
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: string(r.reason), Domain: Domain}); err == nil {
		return d
	}
	return st
}
