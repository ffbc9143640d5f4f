// Package session serves LimiterService's Session stream: one
// bidirectional stream per client on which acquires, takes, releases,
// renewals, reports and shares are answered in any order, matched by
// request_id, with the lease and share events of what the stream owns
// pushed between the answers. Requests may come several to a message (a
// batch), and a client that says it reads them gets the answers queued at
// once in one message. It bounds what one stream (and one client's
// streams) may leave unanswered or unread, checks each request's rate and
// policy as it arrives, and keeps the open streams for ListClients.
//
// It may import the engine (limiter), the wire types, internal/holder
// (whose calls, bound to the stream's term, it answers requests with),
// internal/apiconv, internal/refuse and internal/term; nothing of the
// server, which it reaches through Host.
package session
