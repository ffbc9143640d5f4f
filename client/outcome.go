package client

import (
	"context"
	"errors"
	"os"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Outcome is how one run of protected work ended, as the protected system
// saw it: the signal that adaptive limits feed on. Do classifies the error
// of its fn with the Client's Classifier, gives the Outcome to the Observer
// (WorkEvent.Outcome) and reports it to the server with the release of its
// lease (Lease.ReleaseWithOutcome): the same classification serves both.
// Work under rate tokens or shares reports outcomes with Client.Report.
// OutcomeCanceled is never reported to the server.
type Outcome uint8

const (
	// OutcomeSuccess: the protected system did what was asked (fn returned
	// nil, or an error the classifier counts as success, such as a 404).
	OutcomeSuccess Outcome = iota + 1
	// OutcomeError: the protected system failed or pushed back (a 5xx, a
	// 429, a refused connection).
	OutcomeError
	// OutcomeTimeout: the protected system did not answer in time.
	OutcomeTimeout
	// OutcomeCanceled: the work was abandoned before it finished (its
	// context was cancelled: the caller went away, a Group stopped, the
	// lease was lost). It says nothing about the protected system's health
	// and is not counted against it.
	OutcomeCanceled
)

// String returns "success", "error", "timeout", "canceled" or "unknown".
func (o Outcome) String() string {
	switch o {
	case OutcomeSuccess:
		return "success"
	case OutcomeError:
		return "error"
	case OutcomeTimeout:
		return "timeout"
	case OutcomeCanceled:
		return "canceled"
	}
	return "unknown"
}

// Classifier maps the error returned by the work that Do ran to an
// Outcome. It is called once per run, on the goroutine that called Do, and
// must be safe for concurrent use. A Classifier that returns a value other
// than the Outcome constants has it treated as OutcomeError.
type Classifier func(err error) Outcome

// DefaultClassifier is the Classifier a Client uses unless
// Dialer.Classifier sets another:
//   - nil is OutcomeSuccess;
//   - context.DeadlineExceeded, os.ErrDeadlineExceeded, a gRPC status with
//     code DEADLINE_EXCEEDED, and any error with a Timeout() bool method that
//     returns true (net.Error, *url.Error) are OutcomeTimeout;
//   - context.Canceled (and a gRPC CANCELLED status) is OutcomeCanceled;
//   - every other error is OutcomeError.
//
// Wrapped errors are unwrapped (errors.Is, errors.As).
func DefaultClassifier(err error) Outcome {
	if err == nil {
		return OutcomeSuccess
	}
	var timeout interface{ Timeout() bool }
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded),
		errors.As(err, &timeout) && timeout.Timeout():
		return OutcomeTimeout
	case errors.Is(err, context.Canceled):
		return OutcomeCanceled
	}
	var se interface{ GRPCStatus() *status.Status }
	if errors.As(err, &se) {
		switch se.GRPCStatus().Code() {
		case codes.DeadlineExceeded:
			return OutcomeTimeout
		case codes.Canceled:
			return OutcomeCanceled
		}
	}
	return OutcomeError
}

// classify returns the Outcome of err by the Client's classifier.
func (c *Client) classify(err error) Outcome {
	switch o := c.settings.classify(err); o {
	case OutcomeSuccess, OutcomeError, OutcomeTimeout, OutcomeCanceled:
		return o
	}
	return OutcomeError
}
