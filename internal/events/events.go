// Package events keeps what operators may want to know happened: pool
// changes made through AdminService, leases that ended without their
// holder's release, adaptive control and mark crossings, instance
// changes. It holds the recent ones in a bounded ring and hands each new
// one to the watchers (WatchEvents streams) without ever waiting for them.
//
// The server records events and serves them; this package knows nothing
// of gRPC or of the engine. It may import only the standard library.
package events

import (
	"sync"
	"time"
)

// Types of Event.Type.
const (
	PoolCreated   = "pool_created"
	PoolUpdated   = "pool_updated"
	PoolDeleted   = "pool_deleted"
	LeaseExpired  = "lease_expired"
	LeaseRevoked  = "lease_revoked"  // the server ended the lease (its pool was deleted with force, ...)
	PoolThrottled = "pool_throttled" // adaptive control cut the pool's effective limits
	PoolRelieved  = "pool_relieved"  // adaptive control raised them toward the configured ones
	// Mark crossings.
	PoolOverload       = "pool_overload"        // the acquires waiting rose to the pool's overload mark
	PoolDrained        = "pool_drained"         // the pool became idle: nothing held, nothing waiting
	PoolNearFull       = "pool_near_full"       // held / effective concurrency limit rose to the near-full mark
	PoolLowUtilisation = "pool_low_utilisation" // it stayed below the low-utilisation mark for a whole period
	// Instance changes.
	ResourcesAdded   = "resources_added"   // an operator added instances to an active pool
	ResourcesRemoved = "resources_removed" // an operator removed instances from an active pool
	ProviderJoined   = "provider_joined"   // a provider registered with a passive pool
	ProviderLeft     = "provider_left"     // a provider left a passive pool (closed, died, missed its keep-alive)
	// Clusters.
	LeaderChanged = "leader_changed" // this server of a cluster became leader or stopped leading
)

// RecentLen is how many events a Ring keeps (for the server's
// RecentEvents and status page); older ones are dropped.
const RecentLen = 256

// Event is something operators may want to know happened: a pool change
// made through AdminService, or a lease that ended without its holder's
// release. Every event is also logged.
type Event struct {
	// Seq numbers events from 1 in the order they were recorded.
	Seq uint64 `json:"seq"`
	// Time by the server's clock.
	Time time.Time `json:"time"`
	// Type is one of the type constants (PoolCreated, ...).
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

// Ring keeps the last RecentLen events and hands each new one to the
// watchers. Its zero value is ready to use.
type Ring struct {
	mu       sync.Mutex
	buf      []Event
	next     int    // where the next event goes, once buf is full
	seq      uint64 // of the last event
	watchers map[*Watcher]struct{}
	// watchBuffer is each new watcher's buffer; 0 means WatchBuffer.
	// Tests lower it (SetWatchBuffer).
	watchBuffer int
}

// Add numbers ev, keeps it and hands it to the watchers interested in
// it.
func (r *Ring) Add(ev Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seq++
	ev.Seq = r.seq
	r.notifyLocked(ev)
	if len(r.buf) < RecentLen {
		r.buf = append(r.buf, ev)
		return
	}
	r.buf[r.next] = ev
	r.next = (r.next + 1) % RecentLen
}

// NewestFirst returns a copy of the events kept, newest first.
func (r *Ring) NewestFirst() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Event, 0, len(r.buf))
	for i := len(r.buf) - 1; i >= 0; i-- {
		out = append(out, r.buf[(r.next+i)%len(r.buf)])
	}
	return out
}

// messages are the log messages of the event types.
var messages = map[string]string{
	PoolCreated:        "pool created",
	PoolUpdated:        "pool updated",
	PoolDeleted:        "pool deleted",
	LeaseExpired:       "lease expired: its holder did not renew it; its permits are back in the pool",
	LeaseRevoked:       "lease ended by the server; its permits are back in the pool",
	PoolThrottled:      "pool throttled: adaptive control lowered its effective limits",
	PoolRelieved:       "pool relieved: adaptive control raised its effective limits",
	PoolOverload:       "pool overload: its queue reached the overload mark",
	PoolDrained:        "pool drained: nothing held and nothing waiting",
	PoolNearFull:       "pool near full: its utilisation reached the near-full mark",
	PoolLowUtilisation: "pool low utilisation: it stayed below the low-utilisation mark for a whole period",
	ResourcesAdded:     "instances added to an active pool",
	ResourcesRemoved:   "instances removed from an active pool",
	ProviderJoined:     "provider joined a passive pool",
	ProviderLeft:       "provider left a passive pool; its instances left with it",
	LeaderChanged:      "leadership changed",
}

// Message returns the log message of event type typ.
func Message(typ string) string { return messages[typ] }
