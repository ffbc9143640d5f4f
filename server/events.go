package server

import (
	"context"
	"fmt"
	"log/slog"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/tollgate/tollgate/internal/apiconv"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/events"
	"github.com/tollgate/tollgate/internal/refuse"
	"github.com/tollgate/tollgate/limiter"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// RecentEvents returns the last events.RecentLen events, newest first.
func (s *Server) RecentEvents() []events.Event { return s.events.NewestFirst() }

// recordEvent keeps ev and logs it at info level with its fields. A
// server of a cluster publishes nothing about the pools of a shard it does
// not lead: from its leadership deadline on, an event of its term of the
// shard (a change whose answer came back late, say) is dropped; the
// shard's pools are the successor's to report.
func (s *Server) recordEvent(ev events.Event) {
	if ev.Pool != "" && s.leadership != nil && !s.terms.Of(ev.Pool).Get().Leading() {
		return
	}
	if ev.Time.IsZero() {
		ev.Time = s.Engine().Clock().Now()
	}
	s.events.Add(ev)
	attrs := []slog.Attr{slog.String("event", ev.Type), slog.String("pool", ev.Pool)}
	for _, a := range []struct{ k, v string }{
		{"lease_id", ev.LeaseID}, {"client_id", ev.ClientID}, {"description", ev.Description},
		{"by", ev.Actor}, {"detail", ev.Detail}, {"provider_id", ev.ProviderID},
	} {
		if a.v != "" {
			attrs = append(attrs, slog.String(a.k, a.v))
		}
	}
	s.log.LogAttrs(context.Background(), slog.LevelInfo, events.Message(ev.Type), attrs...)
}

// leaseEnded handles the end of a lease that its holder did not release
// (the engine's OnLeaseEnded): it stops counting it against its client
// and records and logs the event.
func (s *Server) leaseEnded(ev limiter.LeaseEnded) {
	s.quotas.LeaseEnded(ev.Lease.Pool, ev.Lease.FencingToken)
	s.recordEvent(audit.LeaseEnded(ev))
}

// WatchEvents streams the server's events: the recent ones first when
// asked, then live ones, until the caller cancels, falls too far behind
// (RESOURCE_EXHAUSTED) or the server shuts down (UNAVAILABLE).
func (a *adminService) WatchEvents(req *tollgatev1.WatchEventsRequest, stream grpc.ServerStreamingServer[tollgatev1.WatchEventsResponse]) error {
	pool := req.GetPool()
	if pool != "" {
		if err := apiconv.CheckPoolName("pool", pool); err != nil {
			return refuse.ToStatus(a.srv.log, "WatchEvents", err, refuse.About{Pool: pool})
		}
	}
	w, recent := a.srv.events.Watch(pool, req.GetIncludeRecent())
	if w == nil {
		return refuse.StatusOf(&apierr.Error{Code: apierr.CodeResourceExhausted, Reason: ReasonTooManyRequests,
			Message: fmt.Sprintf("%d event watchers are already open on this server; close one, or retry later", events.MaxWatchers)}, refuse.About{}).Err()
	}
	defer a.srv.events.Unwatch(w)
	for _, ev := range recent {
		if err := stream.Send(&tollgatev1.WatchEventsResponse{Event: apiconv.EventToProto(ev)}); err != nil {
			return err
		}
	}
	ctx := stream.Context()
	idle := a.srv.terms.Idle() // it leads no shard any more
	for {
		select {
		case ev := <-w.C():
			if err := stream.Send(&tollgatev1.WatchEventsResponse{Event: apiconv.EventToProto(ev)}); err != nil {
				return err
			}
		case <-w.Overflow():
			a.srv.log.Warn("ending an event watch whose client does not read fast enough", "buffer", cap(w.C()))
			return refuse.StatusOf(&apierr.Error{Code: apierr.CodeResourceExhausted, Reason: ReasonWatchOverflow,
				Message: fmt.Sprintf("the event stream was ended because its client fell %d events behind; read faster, then reconnect (with include_recent to catch up on the recent events the server keeps)", cap(w.C()))}, refuse.About{}).Err()
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-idle:
			return a.srv.notLeader(0)
		case <-a.srv.draining:
			return refuse.StatusOf(&apierr.Error{Code: apierr.CodeUnavailable, Reason: apierr.ReasonShuttingDown,
				Message: "the server is shutting down; reconnect (to another server if there is one) to keep watching"}, refuse.About{}).Err()
		}
	}
}
