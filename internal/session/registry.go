package session

import (
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate/tollgate/internal/holder"
	"github.com/tollgate/tollgate/internal/term"
	"google.golang.org/grpc/peer"
)

// Host is what a Session stream needs of the server beyond a holder's
// calls: the term of each request's pool's shard, and when to end (the
// server drains, or it leads no shard any more).
type Host interface {
	// Term is the term that serves the shard of pool now, which a request
	// about pool takes when it comes and uses throughout; or, when this
	// server does not lead that shard, nil and the status to answer the
	// request with (NOT_LEADER naming the shard's leader).
	Term(pool string) (*term.Term, error)
	// Idle is closed once the server leads no shard (it stays open on a
	// standalone server): the streams open then end, with NotLeader("").
	Idle() <-chan struct{}
	// NotLeader is NOT_LEADER naming the leader of pool's shard: the
	// answer to a request about pool whose term stopped leading; for "",
	// the status of a stream that ends because the server leads no shard.
	NotLeader(pool string) error
	// Draining is closed when the server starts shutting down.
	Draining() <-chan struct{}
	// Now is the time by the server's clock.
	Now() time.Time
}

// Streams serves a server's Session streams and keeps the open ones, for
// AdminService.ListClients: a session joins when Serve starts and leaves
// when it returns, so it holds exactly the open streams, which the
// server's interceptors bound per client (Limits.MaxClientSessions). Set
// its exported fields before the first Serve.
type Streams struct {
	Host  Host
	Calls *holder.Calls
	// MaxUnread bounds the answers queued for one stream, and four times
	// it those for all the streams of one client (DefaultMaxUnread).
	MaxUnread int64
	// MaxEvents bounds the events queued for one stream
	// (DefaultMaxEvents).
	MaxEvents atomic.Int64

	mu   sync.Mutex
	last uint64 // id of the last session added; ids are never reused
	byID map[uint64]*session
}

// add gives s the next id, records who it is and when it connected, and
// keeps it until remove.
func (r *Streams) add(s *session, now time.Time) {
	s.connectTime = now
	s.lastActive.Store(now.UnixNano())
	if p, ok := peer.FromContext(s.stream.Context()); ok && p.Addr != nil {
		s.peerAddr = p.Addr.String()
	}
	s.identity = s.calls.Auth().Identify(s.stream.Context()).Principal()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.last++
	s.id = r.last
	if r.byID == nil {
		r.byID = make(map[uint64]*session)
	}
	r.byID[s.id] = s
}

// remove forgets s.
func (r *Streams) remove(s *session) {
	r.mu.Lock()
	delete(r.byID, s.id)
	r.mu.Unlock()
}

// Client is what ListClients shows of an open stream, as it was when
// Clients was called.
type Client struct {
	// Owner is the session as the engine's Holdings name the owner of
	// what it holds.
	Owner       any
	ID          uint64
	ClientID    string // the hello's, or ""
	PeerAddr    string
	Identity    string
	ConnectTime time.Time
	LastActive  time.Time
}

// Clients returns the open streams, in id order.
func (r *Streams) Clients() []Client {
	r.mu.Lock()
	open := make([]*session, 0, len(r.byID))
	for _, s := range r.byID {
		open = append(open, s)
	}
	r.mu.Unlock()
	sort.Slice(open, func(i, j int) bool { return open[i].id < open[j].id })
	out := make([]Client, len(open))
	for i, s := range open {
		out[i] = Client{Owner: s, ID: s.id, ClientID: s.declaredClientID(), PeerAddr: s.peerAddr, Identity: s.identity,
			ConnectTime: s.connectTime, LastActive: time.Unix(0, s.lastActive.Load())}
	}
	return out
}

// sessionInfo is what the registry knows of a session besides what it
// holds. id, peerAddr, identity and connectTime are set by add before the
// session is visible to other goroutines and never change.
type sessionInfo struct {
	id          uint64
	peerAddr    string
	identity    string
	connectTime time.Time
	// lastActive is when the last request arrived, in Unix nanoseconds by
	// the server's clock.
	lastActive atomic.Int64
}

// touch records that a request arrived now.
func (s *session) touch() { s.lastActive.Store(s.host.Now().UnixNano()) }

// declaredClientID is the client id of the stream's hello ("" if none);
// safe to call from any goroutine.
func (s *session) declaredClientID() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.helloID
}
