package server

import (
	"context"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tollgate/tollgate/internal/apiconv"
	"github.com/tollgate/tollgate/internal/holder"
	"github.com/tollgate/tollgate/internal/refuse"
	"github.com/tollgate/tollgate/internal/session"
	"github.com/tollgate/tollgate/internal/term"
	"github.com/tollgate/tollgate/limiter"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// limiterService implements tollgatev1.LimiterServiceServer over the engine.
type limiterService struct {
	tollgatev1.UnimplementedLimiterServiceServer
	srv *Server
}

// Acquire grants a lease, waiting until granted, the wait timeout passes or
// the call's context ends. A lease granted after the caller has gone away is
// released at once, so a caller that gives up never holds a permit.
func (l *limiterService) Acquire(ctx context.Context, req *tollgatev1.AcquireRequest) (*tollgatev1.AcquireResponse, error) {
	lease, err := l.srv.callsOf(ctx).Acquire(ctx, req)
	if err != nil {
		return nil, refuse.ToStatus(l.srv.log, "Acquire", err, refuse.About{Pool: req.GetPool()})
	}
	return &tollgatev1.AcquireResponse{Lease: apiconv.LeaseToProto(l.srv.ids, lease)}, nil
}

// Release ends a lease.
func (l *limiterService) Release(ctx context.Context, req *tollgatev1.ReleaseRequest) (*tollgatev1.ReleaseResponse, error) {
	if err := l.srv.callsOf(ctx).Release(req); err != nil {
		return nil, refuse.ToStatus(l.srv.log, "Release", err, refuse.About{Pool: req.GetPool(), LeaseID: req.GetLeaseId()})
	}
	return &tollgatev1.ReleaseResponse{}, nil
}

// Renew extends a lease. A unary renew does not change which session, if
// any, is told about the lease's end.
func (l *limiterService) Renew(ctx context.Context, req *tollgatev1.RenewRequest) (*tollgatev1.RenewResponse, error) {
	lease, err := l.srv.callsOf(ctx).Renew(ctx, req, nil, "")
	if err != nil {
		return nil, refuse.ToStatus(l.srv.log, "Renew", err, refuse.About{Pool: req.GetPool(), LeaseID: req.GetLeaseId()})
	}
	return &tollgatev1.RenewResponse{Lease: apiconv.LeaseToProto(l.srv.ids, lease)}, nil
}

// Take takes rate tokens, waiting up to max_wait, capped by the call's
// deadline.
func (l *limiterService) Take(ctx context.Context, req *tollgatev1.TakeRequest) (*tollgatev1.TakeResponse, error) {
	res, err := l.srv.callsOf(ctx).Take(ctx, req)
	if err != nil {
		return nil, refuse.ToStatus(l.srv.log, "Take", err, refuse.About{Pool: req.GetPool()})
	}
	return &tollgatev1.TakeResponse{Tokens: res.Tokens, Waited: durationpb.New(res.Waited)}, nil
}

// GetQueuePosition reports where a client's acquires wait in a pool's
// queue, to that client (by its certificate's names) or an admin.
func (l *limiterService) GetQueuePosition(ctx context.Context, req *tollgatev1.GetQueuePositionRequest) (*tollgatev1.GetQueuePositionResponse, error) {
	err := apiconv.CheckPoolName("pool", req.GetPool())
	if err == nil && req.GetClientId() != "" && len(req.GetClientId()) <= limiter.MaxClientIDLen {
		a := l.srv.auth()
		err = a.CheckClientOf(a.Identify(ctx), req.GetClientId())
	}
	if err == nil {
		var queued []limiter.QueuedAcquire
		var waiting int64
		if queued, waiting, err = l.srv.termOf(ctx).Engine().QueuePositions(req.GetPool(), req.GetClientId()); err == nil {
			resp := &tollgatev1.GetQueuePositionResponse{Waiting: waiting}
			for _, q := range queued {
				resp.Acquires = append(resp.Acquires, &tollgatev1.QueuedAcquire{Position: q.Position, Weight: q.Weight, Priority: q.Priority, Waited: durationpb.New(q.Waited)})
			}
			return resp, nil
		}
	}
	return nil, refuse.ToStatus(l.srv.log, "GetQueuePosition", err, refuse.About{Pool: req.GetPool()})
}

// Bounds of one Session stream (see internal/session).
const (
	// MaxSessionPending is the most acquire and take requests one Session
	// stream may have unanswered at once.
	MaxSessionPending = session.MaxPending
	// MaxSessionEvents is the most lease events queued for one Session
	// stream whose client is not reading.
	MaxSessionEvents = session.DefaultMaxEvents
	// MaxSessionUnread is the most answers queued for one Session stream
	// whose client is not reading, and four times it the most for all the
	// streams of one client.
	MaxSessionUnread = session.DefaultMaxUnread
	// MaxSessionBatch is the most requests one SessionRequest.batch may
	// hold.
	MaxSessionBatch = session.MaxBatch
)

// Session serves one bidirectional Session stream: requests are answered
// in any order, matched by request_id. When the client half-closes, the
// stream ends once every request in flight is answered; when it breaks,
// waiting requests are cancelled. Either way its leases are kept, to be
// renewed on another stream or to expire.
func (l *limiterService) Session(stream tollgatev1.LimiterService_SessionServer) error {
	key := l.srv.auth().Identify(stream.Context()).ClientKey("")
	defer l.srv.quotas.DropUnreadCounter(key)
	l.srv.liveSessions.Add(1)
	defer l.srv.liveSessions.Add(-1)
	return l.srv.sessions.Serve(stream, l.srv.quotas.UnreadCounter(key))
}

// Provide serves one provider's stream.
func (l *limiterService) Provide(stream tollgatev1.LimiterService_ProvideServer) error {
	return l.srv.providers.Serve(stream)
}

// callsOf is the holder's calls of the call of ctx, on its term's engine.
func (s *Server) callsOf(ctx context.Context) *holder.Calls { return s.calls.In(s.termOf(ctx)) }

// streamHost is the server as the host of its Session and Provide
// streams.
type streamHost struct{ s *Server }

// Term is the term of pool's shard served now: a standalone server's
// one, or, on a server of a cluster, the shard's term while it leads, and
// NOT_LEADER naming the shard's leader otherwise.
func (h streamHost) Term(pool string) (*term.Term, error) {
	i := h.s.terms.ShardOf(pool)
	t := h.s.terms.Shard(i).Get()
	if h.s.leadership != nil && !t.Leading() {
		return nil, h.s.notLeader(i)
	}
	return t, nil
}

// NotLeader is NOT_LEADER naming the leader of pool's shard; of shard 0
// for "" (a stream that ends because the server leads no shard).
func (h streamHost) NotLeader(pool string) error {
	if pool == "" {
		return h.s.notLeader(0)
	}
	return h.s.notLeaderOf(pool)
}

func (h streamHost) Idle() <-chan struct{}     { return h.s.terms.Idle() }
func (h streamHost) Draining() <-chan struct{} { return h.s.draining }
func (h streamHost) Now() time.Time            { return h.s.Engine().Clock().Now() }
