package server

import (
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/peer"
)

// This file is the registry of connected client sessions that
// AdminService.ListClients reads. A session joins it
// when its Session stream's handler starts and leaves it when the handler
// returns, so it holds exactly the open streams, which the guard bounds
// per client (Limits.MaxClientSessions).

// sessionRegistry is the server's open Session streams by id.
type sessionRegistry struct {
	mu   sync.Mutex
	last uint64 // id of the last session added; ids are never reused
	byID map[uint64]*session
}

// add gives s the next id, records who it is and when it connected, and
// keeps it until remove.
func (r *sessionRegistry) add(s *session, now time.Time) {
	s.connectTime = now
	s.lastActive.Store(now.UnixNano())
	if p, ok := peer.FromContext(s.stream.Context()); ok && p.Addr != nil {
		s.peerAddr = p.Addr.String()
	}
	s.identity = s.srv.auth().Identify(s.stream.Context()).Principal()
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
func (r *sessionRegistry) remove(s *session) {
	r.mu.Lock()
	delete(r.byID, s.id)
	r.mu.Unlock()
}

// after returns the sessions whose ids are above id, in id order.
func (r *sessionRegistry) after(id uint64) []*session {
	r.mu.Lock()
	out := make([]*session, 0, len(r.byID))
	for sid, s := range r.byID {
		if sid > id {
			out = append(out, s)
		}
	}
	r.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
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
func (s *session) touch() { s.lastActive.Store(s.srv.Engine().Clock().Now().UnixNano()) }

// declaredClientID is the client id of the stream's hello ("" if none);
// safe to call from any goroutine.
func (s *session) declaredClientID() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.helloID
}
