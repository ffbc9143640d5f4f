// Package audit describes what happened as the events operators read
// (internal/events): pool changes made through AdminService, with the new
// values; leases that ended without their holder's release; adaptive
// control's changes and mark crossings, with details for people. It
// builds the events; the server records, logs and streams them.
//
// It may import the engine (limiter), the wire types (proto/tollgate/v1),
// internal/events, internal/apiconv, internal/poolconv and
// internal/refuse; nothing of the server.
package audit
