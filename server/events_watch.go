package server

import (
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tollgate/tollgate/limiter"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// WatchEventsBuffer is how many live events a WatchEvents stream may have
// waiting to be sent; a watcher that falls further behind is ended with
// RESOURCE_EXHAUSTED (ReasonWatchOverflow) rather than slowing the server
// down or making it hold more.
const WatchEventsBuffer = 1024

// MaxEventWatchers bounds the WatchEvents streams open at once on a server.
const MaxEventWatchers = 64

// eventWatcher is one WatchEvents stream's subscription to the ring.
type eventWatcher struct {
	pool     string     // "" means every pool
	ch       chan Event // live events, bounded
	overflow chan struct{}
}

// notifyLocked hands ev to every watcher interested in it, without
// blocking: a watcher whose buffer is full is dropped and told so by
// closing its overflow channel. r.mu is held.
func (r *eventRing) notifyLocked(ev Event) {
	for w := range r.watchers {
		if w.pool != "" && w.pool != ev.Pool {
			continue
		}
		select {
		case w.ch <- ev:
		default:
			delete(r.watchers, w)
			close(w.overflow)
		}
	}
}

// watch subscribes to the events about pool ("" for all) and returns,
// with includeRecent, the events kept so far, oldest first. The snapshot
// and the subscription are taken together, so no event is missed or seen
// twice. It returns nil when MaxEventWatchers are already watching.
func (r *eventRing) watch(pool string, includeRecent bool) (*eventWatcher, []Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.watchers) >= MaxEventWatchers {
		return nil, nil
	}
	size := r.watchBuffer
	if size <= 0 {
		size = WatchEventsBuffer
	}
	w := &eventWatcher{pool: pool, ch: make(chan Event, size), overflow: make(chan struct{})}
	if r.watchers == nil {
		r.watchers = make(map[*eventWatcher]struct{})
	}
	r.watchers[w] = struct{}{}
	var recent []Event
	if includeRecent {
		for i := range r.buf {
			ev := r.buf[(r.next+i)%len(r.buf)]
			if pool == "" || ev.Pool == pool {
				recent = append(recent, ev)
			}
		}
	}
	return w, recent
}

// unwatch ends w's subscription; it may already have been dropped.
func (r *eventRing) unwatch(w *eventWatcher) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.watchers, w)
}

// numWatchers returns how many watchers are subscribed.
func (r *eventRing) numWatchers() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.watchers)
}

// WatchEvents streams the server's events: the recent ones first when
// asked, then live ones, until the caller cancels, falls too far behind
// (RESOURCE_EXHAUSTED) or the server shuts down (UNAVAILABLE).
func (a *adminService) WatchEvents(req *tollgatev1.WatchEventsRequest, stream grpc.ServerStreamingServer[tollgatev1.WatchEventsResponse]) error {
	pool := req.GetPool()
	if pool != "" {
		if err := checkPoolName("pool", pool); err != nil {
			return toStatus(a.srv.log, "WatchEvents", err, errCtx{pool: pool})
		}
	}
	w, recent := a.srv.events.watch(pool, req.GetIncludeRecent())
	if w == nil {
		return statusOf(&limiter.Error{Code: limiter.CodeResourceExhausted, Reason: ReasonTooManyRequests,
			Message: fmt.Sprintf("%d event watchers are already open on this server; close one, or retry later", MaxEventWatchers)}, errCtx{}).Err()
	}
	defer a.srv.events.unwatch(w)
	for _, ev := range recent {
		if err := stream.Send(&tollgatev1.WatchEventsResponse{Event: eventToProto(ev)}); err != nil {
			return err
		}
	}
	ctx := stream.Context()
	for {
		select {
		case ev := <-w.ch:
			if err := stream.Send(&tollgatev1.WatchEventsResponse{Event: eventToProto(ev)}); err != nil {
				return err
			}
		case <-w.overflow:
			a.srv.log.Warn("ending an event watch whose client does not read fast enough", "buffer", cap(w.ch))
			return statusOf(&limiter.Error{Code: limiter.CodeResourceExhausted, Reason: ReasonWatchOverflow,
				Message: fmt.Sprintf("the event stream was ended because its client fell %d events behind; read faster, then reconnect (with include_recent to catch up on the recent events the server keeps)", cap(w.ch))}, errCtx{}).Err()
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-a.srv.draining:
			return statusOf(&limiter.Error{Code: limiter.CodeUnavailable, Reason: limiter.ReasonShuttingDown,
				Message: "the server is shutting down; reconnect (to another server if there is one) to keep watching"}, errCtx{}).Err()
		}
	}
}

// eventToProto converts an event for the wire.
func eventToProto(ev Event) *tollgatev1.PoolEvent {
	return &tollgatev1.PoolEvent{
		Seq:         ev.Seq,
		Time:        timestamppb.New(ev.Time),
		Type:        ev.Type,
		Pool:        ev.Pool,
		Detail:      ev.Detail,
		LeaseId:     ev.LeaseID,
		ClientId:    ev.ClientID,
		Description: ev.Description,
		Actor:       ev.Actor,
		ProviderId:  ev.ProviderID,
		ResourceIds: ev.ResourceIDs,
	}
}
