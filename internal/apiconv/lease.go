package apiconv

import (
	"strconv"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tollgate/tollgate/internal/leaseid"
	"github.com/tollgate/tollgate/internal/poolconv"
	"github.com/tollgate/tollgate/internal/refuse"
	"github.com/tollgate/tollgate/internal/tracing"
	"github.com/tollgate/tollgate/limiter"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// FormatLeaseID returns a lease's fencing token in decimal: how events,
// logs and page tokens name a lease. Holders get a signed id instead
// (internal/leaseid).
func FormatLeaseID(token uint64) string { return strconv.FormatUint(token, 10) }

// CheckPoolName validates the pool name of a request; field names the
// request field for the message.
func CheckPoolName(field, name string) error {
	if name == "" {
		return refuse.InvalidArg("%s is required: name the pool (1 to %d characters of [A-Za-z0-9._:/-]); list pools with: tollgate pool list", field, limiter.MaxPoolNameLen)
	}
	return limiter.ValidatePoolName(name)
}

// CountArg converts an optional count (weight, tokens): unset means 1; set
// values must be at least 1.
func CountArg(field string, v *int64) (int64, error) {
	if v == nil {
		return 1, nil
	}
	if *v < 1 {
		return 0, refuse.InvalidArg("%s is %d; it must be at least 1 (leave it unset for 1)", field, *v)
	}
	return *v, nil
}

// AcquireFromProto builds the engine's request from the wire request. The
// caller sets Owner and any default client id.
func AcquireFromProto(r *tollgatev1.AcquireRequest) (limiter.AcquireRequest, error) {
	var ar limiter.AcquireRequest
	if r == nil {
		r = &tollgatev1.AcquireRequest{}
	}
	if err := CheckPoolName("pool", r.GetPool()); err != nil {
		return ar, err
	}
	weight, err := CountArg("weight", r.Weight)
	if err != nil {
		return ar, err
	}
	ttl, err := poolconv.Duration("ttl", r.GetTtl())
	if err != nil {
		return ar, err
	}
	wait, err := poolconv.Duration("wait_timeout", r.GetWaitTimeout())
	if err != nil {
		return ar, err
	}
	if err := tracing.CheckContext(r.GetTraceContext()); err != nil {
		return ar, err
	}
	return limiter.AcquireRequest{
		Pool:        r.GetPool(),
		Weight:      weight,
		TTL:         ttl,
		Priority:    r.GetPriority(),
		WaitTimeout: wait,
		NoWait:      r.GetNoWait(),
		ClientID:    r.GetClientId(),
		Description: r.GetDescription(),
	}, nil
}

// LeaseToProto converts an engine lease to the wire, with the signed id
// its holder uses (internal/leaseid).
func LeaseToProto(ids *leaseid.IDs, l limiter.Lease) *tollgatev1.Lease {
	return new(LeaseMsg).Fill(ids, l)
}

// LeaseMsg is a wire lease with room for its times, so that a lease costs
// one allocation rather than four; a response may hold one in its own
// allocation (Fill).
type LeaseMsg struct {
	lease           tollgatev1.Lease
	expire, acquire timestamppb.Timestamp
	ttl             durationpb.Duration
}

// Fill sets m to the wire form of l, as LeaseToProto returns it, and
// returns it. m must be new: the lease returned points into it.
func (m *LeaseMsg) Fill(ids *leaseid.IDs, l limiter.Lease) *tollgatev1.Lease {
	m.lease = tollgatev1.Lease{
		Id:           ids.Format(l.Pool, l.FencingToken),
		Pool:         l.Pool,
		Weight:       l.Weight,
		FencingToken: l.FencingToken,
		ExpireTime:   fillTimestamp(&m.expire, l.ExpireTime),
		ClientId:     l.ClientID,
		Description:  l.Description,
		Ttl:          &m.ttl,
		Priority:     l.Priority,
		AcquireTime:  fillTimestamp(&m.acquire, l.AcquireTime),
		Resources:    resourcesToProto(l.Resources),
		// What a restarted server asks to re-adopt the lease
		ExpiryReceipt: ids.Receipt(l.Pool, l.FencingToken, l.ExpireTime, l.Weight, resourceIDs(l.Resources)),
		Share:         ConcShareToProto(l.Share),
	}
	m.ttl.Seconds, m.ttl.Nanos = int64(l.TTL/time.Second), int32(l.TTL%time.Second)
	return &m.lease
}

// fillTimestamp sets ts to t and returns it, or nil for the zero time (as
// Timestamp does).
func fillTimestamp(ts *timestamppb.Timestamp, t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	ts.Seconds, ts.Nanos = t.Unix(), int32(t.Nanosecond())
	return ts
}

// ConcShareToProto converts a concurrency share, nil for an ordinary lease.
func ConcShareToProto(c *limiter.ConcShare) *tollgatev1.ConcurrencyShare {
	if c == nil {
		return nil
	}
	return &tollgatev1.ConcurrencyShare{Want: c.Want, Target: c.Target, Version: c.Version}
}

// Timestamp converts t, leaving the zero time unset.
func Timestamp(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

// StatusToProto converts a pool's live status to the wire.
func StatusToProto(s limiter.PoolStatus) *tollgatev1.PoolStatus {
	out := &tollgatev1.PoolStatus{
		Held:             s.Held,
		Leases:           s.Leases,
		Waiting:          s.Waiting,
		WaitingWeight:    s.WaitingWeight,
		Granted:          s.Granted,
		Released:         s.Released,
		Expired:          s.Expired,
		Revoked:          s.Revoked,
		Rejected:         s.Rejected,
		WaitTimeouts:     s.WaitTimeouts,
		Canceled:         s.Canceled,
		TokensGranted:    s.TokensGranted,
		TokensAvailable:  s.TokensAvailable,
		LastFencingToken: s.LastFencingToken,
		Readopted:        s.Readopted,
		RecoveringUntil:  Timestamp(s.RecoveringUntil),
		Suspended:        s.Suspended,
		Resources:        s.Resources,
		ResourcesFree:    s.ResourcesFree,
		Providers:        s.Providers,
		Utilisation:      s.Utilisation,
	}
	adaptiveStatusToProto(s.AdaptiveStatus, out) // effective limits, outcomes, shares
	return out
}

// LeaseEventToProto converts a lease that ended by itself into the event
// pushed to its session.
func LeaseEventToProto(ids *leaseid.IDs, ev limiter.LeaseEnded) *tollgatev1.LeaseEvent {
	out := &tollgatev1.LeaseEvent{Lease: LeaseToProto(ids, ev.Lease)}
	switch ev.Reason {
	case limiter.EndExpired:
		out.Type = tollgatev1.LeaseEventType_LEASE_EVENT_TYPE_EXPIRED
		out.Reason = "the lease was not renewed before its expire_time; its permits are back in the pool; stop using it and acquire a new lease"
	case limiter.EndPoolDeleted:
		out.Type = tollgatev1.LeaseEventType_LEASE_EVENT_TYPE_REVOKED
		out.Reason = "the pool " + strconv.Quote(ev.Lease.Pool) + " was deleted with force; stop using the lease"
	case limiter.EndRevoked:
		out.Type = tollgatev1.LeaseEventType_LEASE_EVENT_TYPE_REVOKED
		out.Reason = "the lease was revoked: " + limiter.RevokeReasonBy(ev.Message, ev.Actor) + "; stop using it"
	default:
		out.Type = tollgatev1.LeaseEventType_LEASE_EVENT_TYPE_REVOKED
		out.Reason = "the lease ended (" + ev.Reason.String() + "); stop using it"
	}
	return out
}

// resourceIDs returns the ids of rs (nil for none), as a receipt signs them.
func resourceIDs(rs []limiter.Resource) []string {
	if len(rs) == 0 {
		return nil
	}
	ids := make([]string, len(rs))
	for i, r := range rs {
		ids[i] = r.ID
	}
	return ids
}
