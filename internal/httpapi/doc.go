// Package httpapi is the server's HTTP side: the status page (web/, plain
// HTML, CSS and JavaScript), its JSON API over the engine's pools, leases
// and the recent events, Prometheus metrics and the health checks, behind
// the admin credentials when the server asks for them.
//
// It may import the engine (limiter), internal/events (the events it
// serves), internal/term (the term whose engine a request reads) and
// Prometheus; it reads the rest of the server through
// Options, and imports nothing of the server.
package httpapi
