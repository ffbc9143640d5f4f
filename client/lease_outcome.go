package client

import (
	"context"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// ReleaseWithOutcome is Release, also reporting how the work done under the
// lease ended, for the pool's adaptive limits: o is OutcomeSuccess,
// OutcomeError or OutcomeTimeout (OutcomeCanceled, or any other value,
// reports nothing: abandoned work says nothing about the protected
// system), and latency how long the work took (0: not measured). The
// server counts the outcome when the release succeeds, and when the lease
// had expired. Do reports the outcome of its work this way by itself.
func (l *Lease) ReleaseWithOutcome(ctx context.Context, o Outcome, latency time.Duration) error {
	return l.release(ctx, outcomeToProto(o, latency))
}

// releaseDetachedOutcome is releaseDetached, reporting o and latency.
func (l *Lease) releaseDetachedOutcome(ctx context.Context, o Outcome, latency time.Duration) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	return l.ReleaseWithOutcome(ctx, o, latency)
}

// outcomeToProto returns the wire outcome of o, or nil for one that is not
// reported (OutcomeCanceled, unknown values).
func outcomeToProto(o Outcome, latency time.Duration) *tollgatev1.Outcome {
	var r tollgatev1.OutcomeResult
	switch o {
	case OutcomeSuccess:
		r = tollgatev1.OutcomeResult_OUTCOME_RESULT_SUCCESS
	case OutcomeError:
		r = tollgatev1.OutcomeResult_OUTCOME_RESULT_ERROR
	case OutcomeTimeout:
		r = tollgatev1.OutcomeResult_OUTCOME_RESULT_TIMEOUT
	default:
		return nil
	}
	out := &tollgatev1.Outcome{Result: r}
	if latency > 0 {
		out.Latency = durationpb.New(latency)
	}
	return out
}

// withOutcome wraps a release's build to carry out (nil: unchanged).
func withOutcome(build func(int) (*tollgatev1.SessionRequest, error), out *tollgatev1.Outcome) func(int) (*tollgatev1.SessionRequest, error) {
	if out == nil {
		return build
	}
	return func(n int) (*tollgatev1.SessionRequest, error) {
		req, err := build(n)
		if r := req.GetRelease(); r != nil {
			r.Outcome = out
		}
		return req, err
	}
}
