package server

import (
	"fmt"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tollgate/tollgate/limiter"
)

// refusal is an error with a gRPC code the engine has no Code for
// (UNAUTHENTICATED, PERMISSION_DENIED). It converts to a status with an
// ErrorInfo detail like every other Tollgate error.
type refusal struct {
	code   codes.Code
	reason limiter.Reason
	msg    string
}

func refusef(code codes.Code, reason limiter.Reason, format string, args ...any) *refusal {
	return &refusal{code: code, reason: reason, msg: fmt.Sprintf(format, args...)}
}

// Error returns the message for people.
func (r *refusal) Error() string { return r.msg }

// GRPCStatus returns the status the client gets.
func (r *refusal) GRPCStatus() *status.Status {
	st := status.New(r.code, r.msg)
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: string(r.reason), Domain: ErrorDomain}); err == nil {
		return d
	}
	return st
}
