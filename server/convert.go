package server

import (
	"errors"
	"strconv"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tollgate/tollgate/internal/poolconv"
	"github.com/tollgate/tollgate/internal/refuse"
	"github.com/tollgate/tollgate/limiter"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// This file converts between the wire types (tollgatev1) and the engine's
// (limiter). Conversions from the wire validate what the engine cannot see
// (unset versus zero, malformed durations, lease ids); range checks of
// values are the engine's.

// formatLeaseID returns a lease's fencing token in decimal: how events,
// logs and page tokens name a lease. Holders get a signed id instead
// (internal/leaseid).
func formatLeaseID(token uint64) string { return strconv.FormatUint(token, 10) }

// checkPoolName validates the pool name of a request; field names the
// request field for the message.
func checkPoolName(field, name string) error {
	if name == "" {
		return invalidArg("%s is required: name the pool (1 to %d characters of [A-Za-z0-9._:/-]); list pools with: tollgate pool list", field, limiter.MaxPoolNameLen)
	}
	return limiter.ValidatePoolName(name)
}

// countArg converts an optional count (weight, tokens): unset means 1; set
// values must be at least 1.
func countArg(field string, v *int64) (int64, error) {
	if v == nil {
		return 1, nil
	}
	if *v < 1 {
		return 0, invalidArg("%s is %d; it must be at least 1 (leave it unset for 1)", field, *v)
	}
	return *v, nil
}

// acquireFromProto builds the engine's request from the wire request. The
// caller sets Owner and any default client id.
func acquireFromProto(r *tollgatev1.AcquireRequest) (limiter.AcquireRequest, error) {
	var ar limiter.AcquireRequest
	if r == nil {
		r = &tollgatev1.AcquireRequest{}
	}
	if err := checkPoolName("pool", r.GetPool()); err != nil {
		return ar, err
	}
	weight, err := countArg("weight", r.Weight)
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
	if err := checkTraceContext(r.GetTraceContext()); err != nil {
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

// leaseToProto converts an engine lease to the wire, with the signed id
// its holder uses (internal/leaseid).
func (s *Server) leaseToProto(l limiter.Lease) *tollgatev1.Lease {
	return &tollgatev1.Lease{
		Id:           s.ids.Format(l.Pool, l.FencingToken),
		Pool:         l.Pool,
		Weight:       l.Weight,
		FencingToken: l.FencingToken,
		ExpireTime:   timestamp(l.ExpireTime),
		ClientId:     l.ClientID,
		Description:  l.Description,
		Ttl:          durationpb.New(l.TTL),
		Priority:     l.Priority,
		AcquireTime:  timestamp(l.AcquireTime),
		Resources:    resourcesToProto(l.Resources),
		// What a restarted server asks to re-adopt the lease
		ExpiryReceipt: s.ids.Receipt(l.Pool, l.FencingToken, l.ExpireTime),
	}
}

// timestamp converts t, leaving the zero time unset.
func timestamp(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

// statusToProto converts a pool's live status to the wire.
func statusToProto(s limiter.PoolStatus) *tollgatev1.PoolStatus {
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
		RecoveringUntil:  timestamp(s.RecoveringUntil),
		Suspended:        s.Suspended,
		Resources:        s.Resources,
		ResourcesFree:    s.ResourcesFree,
		Providers:        s.Providers,
		Utilisation:      s.Utilisation,
	}
	adaptiveStatusToProto(s.AdaptiveStatus, out) // effective limits, outcomes, shares
	return out
}

// leaseEventToProto converts a lease that ended by itself into the event
// pushed to its session.
func (s *Server) leaseEventToProto(ev limiter.LeaseEnded) *tollgatev1.LeaseEvent {
	out := &tollgatev1.LeaseEvent{Lease: s.leaseToProto(ev.Lease)}
	switch ev.Reason {
	case limiter.EndExpired:
		out.Type = tollgatev1.LeaseEventType_LEASE_EVENT_TYPE_EXPIRED
		out.Reason = "the lease was not renewed before its expire_time; its permits are back in the pool; stop using it and acquire a new lease"
	case limiter.EndPoolDeleted:
		out.Type = tollgatev1.LeaseEventType_LEASE_EVENT_TYPE_REVOKED
		out.Reason = "the pool " + strconv.Quote(ev.Lease.Pool) + " was deleted with force; stop using the lease"
	case limiter.EndRevoked:
		out.Type = tollgatev1.LeaseEventType_LEASE_EVENT_TYPE_REVOKED
		out.Reason = "the lease was revoked: " + limiter.RevokeReasonBy(ev.Message, ev.Actor) + "; its permits are back in the pool; stop using it"
	default:
		out.Type = tollgatev1.LeaseEventType_LEASE_EVENT_TYPE_REVOKED
		out.Reason = "the lease ended (" + ev.Reason.String() + "); stop using it"
	}
	return out
}

// truncate shortens s to at most n bytes for quoting in messages.
func truncate(s string, n int) string { return refuse.Truncate(s, n) }

// parseHolderLeaseID is ids.Parse for a holder's call on pool, except that
// an id refused in a pool that does not exist reports the missing pool,
// which says more.
func (s *Server) parseHolderLeaseID(pool, id string) (uint64, error) {
	tok, err := s.ids.Parse(pool, id)
	if err != nil && errors.Is(err, limiter.ErrLeaseNotFound) {
		if _, perr := s.Engine().GetPool(pool); perr != nil {
			return 0, perr
		}
	}
	return tok, err
}
