package apiconv

import (
	"strconv"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tollgate/tollgate/internal/leaseid"
	"github.com/tollgate/tollgate/internal/poolconv"
	"github.com/tollgate/tollgate/internal/refuse"
	"github.com/tollgate/tollgate/limiter"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// Adaptive limits, outcomes and rate shares. As for pools, range checks
// are the engine's; what is checked here is only what the wire can get
// wrong.

// adaptiveStatusToProto fills in the adaptive part of a wire status.
func adaptiveStatusToProto(s limiter.AdaptiveStatus, out *tollgatev1.PoolStatus) {
	out.EffectiveConcurrencyLimit = s.EffectiveConcurrencyLimit
	out.EffectiveRate = s.EffectiveRate
	switch s.ThrottleReason {
	case limiter.ThrottleErrors:
		out.ThrottleReason = tollgatev1.ThrottleReason_THROTTLE_REASON_ERRORS
	case limiter.ThrottleLatency:
		out.ThrottleReason = tollgatev1.ThrottleReason_THROTTLE_REASON_LATENCY
	}
	out.LastAdaptiveChange = Timestamp(s.LastAdaptiveChange)
	out.SuccessesReported, out.ErrorsReported, out.TimeoutsReported = s.SuccessesReported, s.ErrorsReported, s.TimeoutsReported
	out.WindowSamples, out.WindowErrorRatio = s.WindowSamples, s.WindowErrorRatio
	if s.WindowLatency > 0 {
		out.WindowLatency = durationpb.New(s.WindowLatency)
	}
	if s.LatencyBaseline > 0 {
		out.LatencyBaseline = durationpb.New(s.LatencyBaseline)
	}
	out.ShareHolders, out.SharesGranted = s.ShareHolders, s.SharesGranted
}

// OutcomeFromProto converts a release's outcome; nil for none.
func OutcomeFromProto(o *tollgatev1.Outcome) (*limiter.ReleaseOutcome, error) {
	if o == nil {
		return nil, nil
	}
	var r limiter.Outcome
	switch o.GetResult() {
	case tollgatev1.OutcomeResult_OUTCOME_RESULT_SUCCESS:
		r = limiter.OutcomeSuccess
	case tollgatev1.OutcomeResult_OUTCOME_RESULT_ERROR:
		r = limiter.OutcomeError
	case tollgatev1.OutcomeResult_OUTCOME_RESULT_TIMEOUT:
		r = limiter.OutcomeTimeout
	default:
		return nil, refuse.InvalidArg("outcome.result %s (%d) is not a result; use OUTCOME_RESULT_SUCCESS, OUTCOME_RESULT_ERROR or OUTCOME_RESULT_TIMEOUT, or leave outcome unset to report nothing", o.GetResult(), int32(o.GetResult()))
	}
	lat, err := poolconv.Duration("outcome.latency", o.GetLatency())
	if err != nil {
		return nil, err
	}
	return &limiter.ReleaseOutcome{Outcome: r, Latency: lat}, nil
}

// ReportsFromProto converts a Report request.
func ReportsFromProto(req *tollgatev1.ReportRequest) ([]limiter.OutcomeReport, error) {
	rs := req.GetReports()
	if len(rs) > limiter.MaxReportPools {
		return nil, refuse.InvalidArg("reports has %d entries; the most is %d: split the batch", len(rs), limiter.MaxReportPools)
	}
	out := make([]limiter.OutcomeReport, 0, len(rs))
	for i, r := range rs {
		field := "reports[" + strconv.Itoa(i) + "]"
		if err := CheckPoolName(field+".pool", r.GetPool()); err != nil {
			return nil, err
		}
		sum, err := poolconv.Duration(field+".latency.sum", r.GetLatency().GetSum())
		if err != nil {
			return nil, err
		}
		mx, err := poolconv.Duration(field+".latency.max", r.GetLatency().GetMax())
		if err != nil {
			return nil, err
		}
		out = append(out, limiter.OutcomeReport{
			Pool: r.GetPool(), Successes: r.GetSuccesses(), Errors: r.GetErrors(), Timeouts: r.GetTimeouts(),
			LatencyCount: r.GetLatency().GetCount(), LatencySum: sum, LatencyMax: mx,
		})
	}
	return out, nil
}

// ShareToProto converts an engine share to the wire, with the signed id
// its holder uses (signed by internal/leaseid).
func ShareToProto(ids *leaseid.IDs, s limiter.Share) *tollgatev1.RateShare {
	return &tollgatev1.RateShare{
		Id:              ids.FormatShare(s.Pool, s.ID),
		Pool:            s.Pool,
		Want:            s.Want,
		Weight:          s.Weight,
		Rate:            s.Rate,
		Burst:           s.Burst,
		SafeRate:        s.SafeRate,
		Ttl:             durationpb.New(s.TTL),
		RefreshInterval: durationpb.New(s.RefreshInterval),
		GrantTime:       Timestamp(s.GrantTime),
		ExpireTime:      Timestamp(s.ExpireTime),
		ClientId:        s.ClientID,
		Version:         s.Version,
	}
}

// ShareRequestFromProto converts an AcquireShare request. The caller sets
// Owner and any default client id.
func ShareRequestFromProto(r *tollgatev1.AcquireShareRequest) (limiter.ShareRequest, error) {
	var sr limiter.ShareRequest
	if err := CheckPoolName("pool", r.GetPool()); err != nil {
		return sr, err
	}
	ttl, err := poolconv.Duration("ttl", r.GetTtl())
	if err != nil {
		return sr, err
	}
	if r.Weight != nil && r.GetWeight() < 1 {
		return sr, refuse.InvalidArg("weight is %d; give 1 to %d, or leave it unset for 1", r.GetWeight(), limiter.MaxShareWeight)
	}
	if r.GetWant() == 0 {
		return sr, refuse.InvalidArg("want is required: the rate you would use, in tokens per second (above 0)")
	}
	return limiter.ShareRequest{Pool: r.GetPool(), Want: r.GetWant(), Weight: r.GetWeight(), TTL: ttl, ClientID: r.GetClientId()}, nil
}

// ShareRefreshFromProto converts a RefreshShare request.
func ShareRefreshFromProto(ids *leaseid.IDs, r *tollgatev1.RefreshShareRequest) (limiter.ShareRefresh, error) {
	var sr limiter.ShareRefresh
	if err := CheckPoolName("pool", r.GetPool()); err != nil {
		return sr, err
	}
	id, err := ids.ParseShare(r.GetPool(), r.GetShareId())
	if err != nil {
		return sr, err
	}
	ttl, err := poolconv.Duration("ttl", r.GetTtl())
	if err != nil {
		return sr, err
	}
	if r.GrantedRate != nil {
		if g := r.GetGrantedRate(); !(g > 0) || g > limiter.MaxRate {
			return sr, refuse.InvalidArg("granted_rate is %v; it must be the rate the share was granted, above 0 (or leave it unset)", g)
		}
		sr.Granted = r.GetGrantedRate()
	}
	if r.Want != nil && !(r.GetWant() > 0) {
		return sr, refuse.InvalidArg("want is %v; give a rate above 0, or leave it unset to keep the share's", r.GetWant())
	}
	if r.Weight != nil && r.GetWeight() < 1 {
		return sr, refuse.InvalidArg("weight is %d; give 1 to %d, or leave it unset to keep the share's", r.GetWeight(), limiter.MaxShareWeight)
	}
	sr.Pool, sr.ID, sr.Want, sr.Weight, sr.TTL = r.GetPool(), id, r.GetWant(), r.GetWeight(), ttl
	return sr, nil
}

// ShareEventToProto converts a share update pushed to its holder.
func ShareEventToProto(ids *leaseid.IDs, u limiter.ShareUpdate) *tollgatev1.ShareEvent {
	ev := &tollgatev1.ShareEvent{Share: ShareToProto(ids, u.Share)}
	switch u.Kind {
	case limiter.ShareChanged:
		ev.Type = tollgatev1.ShareEventType_SHARE_EVENT_TYPE_CHANGED
		ev.Reason = "the server changed the share's rate (rate given back by others, or a lower pool rate); spend the new rate from now on"
	case limiter.ShareExpired:
		ev.Type = tollgatev1.ShareEventType_SHARE_EVENT_TYPE_EXPIRED
		ev.Reason = "the share was not refreshed before its expire_time; its rate went to others; acquire a new share"
	default:
		ev.Type = tollgatev1.ShareEventType_SHARE_EVENT_TYPE_REVOKED
		ev.Reason = "the pool " + strconv.Quote(u.Share.Pool) + " was deleted or lost its rate; stop spending the share"
	}
	return ev
}
