// Package apiconv converts the wire types (proto/tollgate/v1) of leases,
// pool statuses, outcomes, rate shares, resource instances and providers
// to and from the engine's (limiter), and events (internal/events) to the
// wire. Conversions from the wire validate
// what the engine cannot see (unset versus zero, malformed durations,
// signed ids); range checks of values are the engine's. Pools convert in
// internal/poolconv.
//
// It may import the engine, the wire types, internal/events,
// internal/leaseid (the ids holders see), internal/poolconv,
// internal/refuse and internal/tracing (the bounds of a request's
// trace_context); nothing of the server.
package apiconv
