package server

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// Event types of Event.Type.
const (
	EventPoolCreated   = "pool_created"
	EventPoolUpdated   = "pool_updated"
	EventPoolDeleted   = "pool_deleted"
	EventLeaseExpired  = "lease_expired"
	EventLeaseRevoked  = "lease_revoked"  // the server ended the lease (its pool was deleted with force, ...)
	EventPoolThrottled = "pool_throttled" // adaptive control cut the pool's effective limits: adaptive_events.go
	EventPoolRelieved  = "pool_relieved"  // adaptive control raised them toward the configured ones
	// Mark events (limiter/marks.go, server/marks_convert.go).
	EventPoolOverload       = "pool_overload"        // the acquires waiting rose to the pool's overload mark
	EventPoolDrained        = "pool_drained"         // the pool became idle: nothing held, nothing waiting
	EventPoolNearFull       = "pool_near_full"       // held / effective concurrency limit rose to the near-full mark
	EventPoolLowUtilisation = "pool_low_utilisation" // it stayed below the low-utilisation mark for a whole period
)

// RecentEventsLen is how many events the server keeps for RecentEvents and
// the status page; older ones are dropped.
const RecentEventsLen = 256

// Event is something operators may want to know happened: a pool change
// made through AdminService, or a lease that ended without its holder's
// release. Every event is also logged.
type Event struct {
	// Seq numbers events from 1 in the order they were recorded.
	Seq uint64 `json:"seq"`
	// Time by the server's clock.
	Time time.Time `json:"time"`
	// Type is one of the Event* constants.
	Type string `json:"type"`
	// Pool is the pool the event is about.
	Pool string `json:"pool"`
	// LeaseID, ClientID and Description are the lease's, for lease events.
	LeaseID     string `json:"lease_id,omitempty"`
	ClientID    string `json:"client_id,omitempty"`
	Description string `json:"description,omitempty"`
	// Actor is who made a pool change, or revoked a lease (RevokeLease,
	// SuspendPool with revoke_held, or UpdatePool under a revoke policy):
	// its authenticated name, or its address when it presented no
	// credentials. Empty for what the server did by itself.
	Actor string `json:"actor,omitempty"`
	// Detail says more, for people (the new limits, the fields changed).
	Detail string `json:"detail,omitempty"`
	// ProviderID is the provider of provider events; ResourceIDs the
	// instances of resource events.
	ProviderID  string   `json:"provider_id,omitempty"`
	ResourceIDs []string `json:"resource_ids,omitempty"`
}

// eventRing keeps the last RecentEventsLen events and hands each new one
// to the watchers (events_watch.go).
type eventRing struct {
	mu       sync.Mutex
	buf      []Event
	next     int    // where the next event goes, once buf is full
	seq      uint64 // of the last event
	watchers map[*eventWatcher]struct{}
	// watchBuffer is each new watcher's buffer; 0 means
	// WatchEventsBuffer. Tests lower it.
	watchBuffer int
}

func (r *eventRing) add(ev Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seq++
	ev.Seq = r.seq
	r.notifyLocked(ev) // events_watch.go
	if len(r.buf) < RecentEventsLen {
		r.buf = append(r.buf, ev)
		return
	}
	r.buf[r.next] = ev
	r.next = (r.next + 1) % RecentEventsLen
}

// newestFirst returns a copy of the events kept, newest first.
func (r *eventRing) newestFirst() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Event, 0, len(r.buf))
	for i := len(r.buf) - 1; i >= 0; i-- {
		out = append(out, r.buf[(r.next+i)%len(r.buf)])
	}
	return out
}

// RecentEvents returns the last RecentEventsLen events, newest first.
func (s *Server) RecentEvents() []Event { return s.events.newestFirst() }

// recordEvent keeps ev and logs it at info level with its fields.
func (s *Server) recordEvent(ev Event) {
	if ev.Time.IsZero() {
		ev.Time = s.engine.Clock().Now()
	}
	s.events.add(ev)
	attrs := []slog.Attr{slog.String("event", ev.Type), slog.String("pool", ev.Pool)}
	for _, a := range []struct{ k, v string }{
		{"lease_id", ev.LeaseID}, {"client_id", ev.ClientID}, {"description", ev.Description},
		{"by", ev.Actor}, {"detail", ev.Detail}, {"provider_id", ev.ProviderID},
	} {
		if a.v != "" {
			attrs = append(attrs, slog.String(a.k, a.v))
		}
	}
	s.log.LogAttrs(context.Background(), slog.LevelInfo, eventMessages[ev.Type], attrs...)
}

// eventMessages are the log messages of the event types.
var eventMessages = map[string]string{
	EventPoolCreated:        "pool created",
	EventPoolUpdated:        "pool updated",
	EventPoolDeleted:        "pool deleted",
	EventLeaseExpired:       "lease expired: its holder did not renew it; its permits are back in the pool",
	EventLeaseRevoked:       "lease ended by the server; its permits are back in the pool",
	EventPoolThrottled:      "pool throttled: adaptive control lowered its effective limits",
	EventPoolRelieved:       "pool relieved: adaptive control raised its effective limits",
	EventPoolOverload:       "pool overload: its queue reached the overload mark",
	EventPoolDrained:        "pool drained: nothing held and nothing waiting",
	EventPoolNearFull:       "pool near full: its utilisation reached the near-full mark",
	EventPoolLowUtilisation: "pool low utilisation: it stayed below the low-utilisation mark for a whole period",
	EventResourcesAdded:     "instances added to an active pool",
	EventResourcesRemoved:   "instances removed from an active pool",
	EventProviderJoined:     "provider joined a passive pool",
	EventProviderLeft:       "provider left a passive pool; its instances left with it",
}

// leaseEnded handles the end of a lease that its holder did not release
// (the engine's OnLeaseEnded): it stops counting it against its client
// and records and logs the event.
func (s *Server) leaseEnded(ev limiter.LeaseEnded) {
	l := ev.Lease
	s.quotas.LeaseEnded(l.Pool, l.FencingToken)
	typ, at, detail := EventLeaseExpired, l.ExpireTime, ""
	if ev.Reason != limiter.EndExpired {
		typ, at, detail = EventLeaseRevoked, time.Time{}, ev.Reason.String()+"; "
	}
	if ev.Message != "" {
		detail = ev.Reason.String() + ": " + strconv.Quote(ev.Message) + "; "
	}
	s.recordEvent(Event{
		Time:        at,
		Type:        typ,
		Pool:        l.Pool,
		LeaseID:     formatLeaseID(l.FencingToken),
		ClientID:    l.ClientID,
		Description: l.Description,
		Actor:       ev.Actor,
		Detail:      detail + "weight " + strconv.FormatInt(l.Weight, 10) + ", ttl " + l.TTL.String(),
	})
}
