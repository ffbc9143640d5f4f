package server

import (
	"cmp"
	"context"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/tollgate/tollgate/internal/fanout"
	"github.com/tollgate/tollgate/internal/pagetoken"
	"github.com/tollgate/tollgate/internal/refuse"
	rlsv3 "github.com/tollgate/tollgate/proto/envoy/service/ratelimit/v3"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// One cluster to operators: the listings of every pool (ListPools,
// GetStats without a pool), ListClients without a pool and WatchEvents
// without a pool, asked of any server of a cluster, gather every server's
// part (internal/fanout) and merge them. Calls naming a pool are the
// pool's owner's, like every pool call. Each server stamps what it answers
// with its advertised address: a pool status's owner, a session's and an
// event's server.

// fanoutUnary answers a listing of a server of a cluster from every
// server. It runs after authentication: the caller's rights were checked
// here first, and each server checks them again.
func (s *Server) fanoutUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if r, ok := req.(*rlsv3.RateLimitRequest); ok && s.fan != nil && !fanout.Local(ctx) {
		return s.fanEnvoy(ctx, r, handler)
	}
	if !fansOut(req) || s.fan == nil || fanout.Local(ctx) {
		resp, err := handler(ctx, req)
		if err == nil {
			s.stamp(resp)
			s.count(ctx, resp)
		}
		return resp, err
	}
	release, err := s.fan.Begin(s.auth().Identify(ctx).ClientKey(""))
	if err != nil {
		return nil, err
	}
	defer release()
	switch r := req.(type) {
	case *tollgatev1.ListPoolsRequest:
		return s.fanListPools(ctx, r, handler)
	case *tollgatev1.GetStatsRequest:
		return s.fanGetStats(ctx, r, handler)
	case *tollgatev1.ListClientsRequest:
		return s.fanListClients(ctx, r, handler)
	}
	return handler(ctx, req) // unreachable: fansOut lists the cases above
}

// fansOut reports whether req is a listing that a server of a cluster
// answers from every server.
func fansOut(req any) bool {
	switch r := req.(type) {
	case *tollgatev1.ListPoolsRequest:
		return true
	case *tollgatev1.GetStatsRequest:
		return r.GetPool() == ""
	case *tollgatev1.ListClientsRequest:
		return r.GetPool() == ""
	}
	return false
}

// stamp sets this server's address on what it answers itself.
func (s *Server) stamp(resp any) {
	self := s.advertise
	switch r := resp.(type) {
	case *tollgatev1.GetPoolResponse:
		if r.Status != nil {
			r.Status.Owner = cmp.Or(r.Status.Owner, self)
		}
	case *tollgatev1.ListPoolsResponse:
		for _, st := range r.GetStatuses() {
			st.Owner = cmp.Or(st.Owner, self)
		}
	case *tollgatev1.GetStatsResponse:
		for _, st := range r.GetStats() {
			if st.Status != nil {
				st.Status.Owner = cmp.Or(st.Status.Owner, self)
			}
		}
	case *tollgatev1.ListClientsResponse:
		for _, c := range r.GetClients() {
			c.Server = cmp.Or(c.Server, self)
		}
	case *tollgatev1.WatchEventsResponse:
		if r.Event != nil {
			r.Event.Server = cmp.Or(r.Event.Server, self)
		}
	}
}

// count sets the total of a ListPools answer of this server's: the pools
// of the shards it leads.
func (s *Server) count(ctx context.Context, resp any) {
	if r, ok := resp.(*tollgatev1.ListPoolsResponse); ok {
		n := 0
		for _, t := range s.localTerms(ctx) {
			n += t.Engine().NumPools()
		}
		r.TotalSize = int32(n)
	}
}

// gather asks every other server for its part (ask, given the server's
// address) while this server answers its own with handler and local, its
// request: every part, this server's last. A NOT_LEADER answer of this
// server's (it leads none of the shards) is no part; another error of its
// own is the call's.
func gather[R any](s *Server, ctx context.Context, local any, handler grpc.UnaryHandler,
	ask func(ctx context.Context, addr string, cc *grpc.ClientConn) (R, error)) ([]fanout.Part[R], error) {
	peers := s.fan.Peers()
	var parts []fanout.Part[R]
	var wg sync.WaitGroup
	wg.Go(func() { parts = fanout.Ask(ctx, s.fan, peers, ask) })
	resp, err := handler(ctx, local)
	wg.Wait()
	switch {
	case err != nil && fanout.NotLeader(err):
		return parts, nil
	case err != nil:
		return nil, err
	}
	s.stamp(resp)
	s.count(ctx, resp)
	return append(parts, fanout.Part[R]{Server: s.advertise, Resp: resp.(R)}), nil
}

// poolItem is one pool of a ListPools page.
type poolItem struct {
	pool   *tollgatev1.Pool
	status *tollgatev1.PoolStatus
}

func (s *Server) fanListPools(ctx context.Context, req *tollgatev1.ListPoolsRequest, handler grpc.UnaryHandler) (any, error) {
	size, err := pageSize(req.GetPageSize())
	if err == nil {
		_, err = pagetoken.Pool(req.GetPageToken()) // refused here, not by every server
	}
	if err != nil {
		return nil, refuse.ToStatus(s.log, "ListPools", err, refuse.About{})
	}
	parts, err := gather(s, ctx, req, handler, func(ctx context.Context, _ string, cc *grpc.ClientConn) (*tollgatev1.ListPoolsResponse, error) {
		return tollgatev1.NewAdminServiceClient(cc).ListPools(ctx, req)
	})
	if err != nil {
		return nil, err
	}
	var lists []fanout.List[poolItem]
	for _, p := range parts {
		if p.Err != nil {
			continue
		}
		var l []poolItem
		for i, pool := range p.Resp.GetPools() {
			st := &tollgatev1.PoolStatus{}
			if i < len(p.Resp.GetStatuses()) {
				st = p.Resp.GetStatuses()[i]
			}
			st.Owner = cmp.Or(st.Owner, p.Server)
			l = append(l, poolItem{pool, st})
		}
		lists = append(lists, fanout.List[poolItem]{Items: l, More: p.Resp.GetNextPageToken() != ""})
	}
	page, more := fanout.Merge(lists, func(a, b poolItem) int { return cmp.Compare(a.pool.GetName(), b.pool.GetName()) },
		func(it poolItem) string { return it.pool.GetName() }, size)
	resp := &tollgatev1.ListPoolsResponse{Unreachable: fanout.Missing(parts)}
	for _, p := range parts {
		resp.TotalSize += p.Resp.GetTotalSize()
	}
	for _, it := range page {
		resp.Pools = append(resp.Pools, it.pool)
		resp.Statuses = append(resp.Statuses, it.status)
	}
	if more && len(page) > 0 {
		resp.NextPageToken = pagetoken.Encode(page[len(page)-1].pool.GetName())
	}
	return resp, nil
}

func (s *Server) fanGetStats(ctx context.Context, req *tollgatev1.GetStatsRequest, handler grpc.UnaryHandler) (any, error) {
	size, err := pageSize(req.GetPageSize())
	if err == nil {
		_, err = pagetoken.Pool(req.GetPageToken()) // refused here, not by every server
	}
	if err != nil {
		return nil, refuse.ToStatus(s.log, "GetStats", err, refuse.About{})
	}
	parts, err := gather(s, ctx, req, handler, func(ctx context.Context, _ string, cc *grpc.ClientConn) (*tollgatev1.GetStatsResponse, error) {
		return tollgatev1.NewAdminServiceClient(cc).GetStats(ctx, req)
	})
	if err != nil {
		return nil, err
	}
	var lists []fanout.List[*tollgatev1.PoolStats]
	for _, p := range parts {
		if p.Err != nil {
			continue
		}
		for _, st := range p.Resp.GetStats() {
			if st.Status == nil {
				st.Status = &tollgatev1.PoolStatus{}
			}
			st.Status.Owner = cmp.Or(st.Status.Owner, p.Server)
		}
		lists = append(lists, fanout.List[*tollgatev1.PoolStats]{Items: p.Resp.GetStats(), More: p.Resp.GetNextPageToken() != ""})
	}
	page, more := fanout.Merge(lists, func(a, b *tollgatev1.PoolStats) int { return cmp.Compare(a.GetPool(), b.GetPool()) },
		(*tollgatev1.PoolStats).GetPool, size)
	resp := &tollgatev1.GetStatsResponse{Stats: page, Unreachable: fanout.Missing(parts)}
	if more && len(page) > 0 {
		resp.NextPageToken = pagetoken.Encode(page[len(page)-1].GetPool())
	}
	return resp, nil
}

// fanListClients lists the sessions of every server in (server, session
// id) order. The page token names the server and session id of the last
// session of the previous page: the servers before it are asked only for
// their unattached counts, the server itself for the sessions after that
// id, the later ones from their first session.
func (s *Server) fanListClients(ctx context.Context, req *tollgatev1.ListClientsRequest, handler grpc.UnaryHandler) (any, error) {
	size, err := pageSize(req.GetPageSize())
	if err != nil {
		return nil, refuse.ToStatus(s.log, "ListClients", err, refuse.About{})
	}
	tokServer, after, err := pagetoken.Session(req.GetPageToken(), s.advertise)
	if err != nil {
		return nil, refuse.ToStatus(s.log, "ListClients", err, refuse.About{})
	}
	reqFor := func(server string) *tollgatev1.ListClientsRequest {
		r := proto.CloneOf(req)
		switch {
		case server < tokServer: // only its unattached counts
			r.PageSize, r.PageToken = 1, pagetoken.Encode(strconv.FormatUint(math.MaxUint64, 10))
		case server == tokServer:
			r.PageToken = pagetoken.Encode(strconv.FormatUint(after, 10))
		default:
			r.PageToken = ""
		}
		return r
	}
	parts, err := gather(s, ctx, reqFor(s.advertise), handler, func(ctx context.Context, addr string, cc *grpc.ClientConn) (*tollgatev1.ListClientsResponse, error) {
		return tollgatev1.NewAdminServiceClient(cc).ListClients(ctx, reqFor(addr))
	})
	if err != nil {
		return nil, err
	}
	resp := &tollgatev1.ListClientsResponse{Unreachable: fanout.Missing(parts)}
	var lists []fanout.List[*tollgatev1.ClientSession]
	for _, p := range parts {
		if p.Err != nil {
			continue
		}
		resp.UnattachedLeases += p.Resp.GetUnattachedLeases()
		resp.UnattachedWeight += p.Resp.GetUnattachedWeight()
		if p.Server < tokServer {
			continue
		}
		for _, c := range p.Resp.GetClients() {
			c.Server = cmp.Or(c.Server, p.Server)
		}
		lists = append(lists, fanout.List[*tollgatev1.ClientSession]{Items: p.Resp.GetClients(), More: p.Resp.GetNextPageToken() != ""})
	}
	id := func(c *tollgatev1.ClientSession) uint64 {
		n, _ := strconv.ParseUint(c.GetSessionId(), 10, 64)
		return n
	}
	page, more := fanout.Merge(lists, func(a, b *tollgatev1.ClientSession) int {
		return cmp.Or(cmp.Compare(a.GetServer(), b.GetServer()), cmp.Compare(id(a), id(b)))
	}, func(c *tollgatev1.ClientSession) string { return c.GetServer() + "/" + c.GetSessionId() }, size)
	resp.Clients = page
	if more && len(page) > 0 {
		last := page[len(page)-1]
		resp.NextPageToken = pagetoken.EncodeSession(last.GetServer(), id(last))
	}
	return resp, nil
}

// fanoutStream serves WatchEvents without a pool on a server of a
// cluster from a watch on every server, merged into the caller's stream
// as they come. A server's watch that ends (it left, died, was cut off)
// is reported once in a response naming it in unreachable, and the others
// go on; a server that leads nothing (NOT_LEADER) is simply not watched.
// The watch ends with the first error that is the caller's (it reads too
// slowly: WATCH_OVERFLOW, from this server's watch or another's) or this
// server's (shutting down), or when every part has ended.
func (s *Server) fanoutStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if info.FullMethod != tollgatev1.AdminService_WatchEvents_FullMethodName || s.fan == nil {
		return handler(srv, stampStream{ServerStream: ss, s: s})
	}
	ctx := ss.Context()
	if fanout.Local(ctx) {
		// The forwarding server waits for this header to know the watch
		// is open.
		if err := ss.SendHeader(nil); err != nil {
			return err
		}
		return handler(srv, stampStream{ServerStream: ss, s: s})
	}
	req := &tollgatev1.WatchEventsRequest{}
	if err := ss.RecvMsg(req); err != nil {
		return err
	}
	replay := &replayStream{ServerStream: ss, s: s, req: req}
	if req.GetPool() != "" {
		return handler(srv, replay)
	}
	release, err := s.fan.Begin(s.auth().Identify(ctx).ClientKey(""))
	if err != nil {
		return err
	}
	defer release()
	ctx, cancel := context.WithCancel(ctx)
	// No part sends once the watch has returned: each ends with ctx (a
	// send blocked on a caller that does not read ends when the stream
	// does, as a single server's watch would).
	var parts sync.WaitGroup
	defer func() { cancel(); parts.Wait() }()
	replay.ctx, replay.ready = ctx, make(chan struct{})
	peers := s.fan.Peers()
	ended := make(chan error, len(peers)+1) // one per part: nil, or the watch's end
	opened := make(chan struct{}, len(peers))
	parts.Go(func() {
		err := handler(srv, replay)
		if fanout.NotLeader(err) {
			err = nil
		} else if err == nil {
			err = status.Error(codes.Unavailable, "this server's event watch ended; watch again")
		}
		ended <- err
	})
	for _, addr := range peers {
		parts.Go(func() { ended <- s.watchPeer(ctx, addr, req, replay, opened) })
	}
	// The caller's header says that every other server's watch is open
	// (or timed out); nothing is sent before it.
	for range peers {
		select {
		case <-opened:
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		}
	}
	if err := ss.SendHeader(nil); err != nil {
		return err
	}
	close(replay.ready)
	for range len(peers) + 1 {
		if err := <-ended; err != nil {
			return err
		}
	}
	return status.Error(codes.Unavailable, "no server of the cluster has events to watch (none leads a shard now); watch again")
}

// watchPeer relays the events of server addr's watch to out until ctx is
// done or its watch ends. It signals opened once its watch is open, or
// failed to open within the timeout. It returns the error that ends the
// whole watch (the caller reads too slowly), or nil when only this part
// ended.
func (s *Server) watchPeer(ctx context.Context, addr string, req *tollgatev1.WatchEventsRequest, out *replayStream, opened chan<- struct{}) error {
	var once sync.Once
	signal := func() { once.Do(func() { opened <- struct{}{} }) }
	defer signal()
	lost := func(err error) error {
		signal()
		if ctx.Err() != nil || fanout.NotLeader(err) {
			return nil
		}
		if st, _ := status.FromError(err); st.Code() == codes.ResourceExhausted && watchOverflow(st) {
			return err
		}
		s.log.Warn("a server of the cluster stopped giving its part of an event watch", "server", addr, "err", err)
		return out.SendMsg(&tollgatev1.WatchEventsResponse{Unreachable: []string{addr}})
	}
	cc, err := s.fan.Conn(addr)
	if err != nil {
		return lost(err)
	}
	wctx, cancel := context.WithCancel(fanout.Outgoing(ctx))
	defer cancel()
	var stream grpc.ServerStreamingClient[tollgatev1.WatchEventsResponse]
	header := make(chan error, 1)
	go func() { // both wait for the connection: a frozen server's never comes
		var err error
		if stream, err = tollgatev1.NewAdminServiceClient(cc).WatchEvents(wctx, req); err == nil {
			_, err = stream.Header()
		}
		header <- err
	}()
	timer := time.NewTimer(s.fan.Timeout())
	defer timer.Stop()
	select {
	case err := <-header:
		if err != nil {
			return lost(err)
		}
		signal()
	case <-timer.C:
		cancel()
		return lost(status.Errorf(codes.DeadlineExceeded, "%s did not open its watch within %s", addr, s.fan.Timeout()))
	case <-ctx.Done():
		return nil
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			return lost(err)
		}
		if resp.Event != nil {
			resp.Event.Server = cmp.Or(resp.Event.Server, addr)
		}
		if err := out.SendMsg(resp); err != nil {
			return err
		}
	}
}

// watchOverflow reports whether st is a watch's WATCH_OVERFLOW.
func watchOverflow(st *status.Status) bool {
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetReason() == string(apierr.ReasonWatchOverflow) {
			return true
		}
	}
	return false
}

// stampStream stamps what this server sends on a stream (stamp).
type stampStream struct {
	grpc.ServerStream
	s *Server
}

func (st stampStream) SendMsg(m any) error {
	st.s.stamp(m)
	return st.ServerStream.SendMsg(m)
}

// replayStream is the caller's WatchEvents stream as this server's part
// sees it: its request, read already, is read again; its sends are
// stamped, wait for the header (ready, when set) and are serialized with
// the other parts'; its context ends with the whole watch.
type replayStream struct {
	grpc.ServerStream
	s     *Server
	req   *tollgatev1.WatchEventsRequest
	ctx   context.Context
	ready chan struct{}
	mu    sync.Mutex // serializes sends
	read  atomic.Bool
}

func (r *replayStream) Context() context.Context {
	if r.ctx != nil {
		return r.ctx
	}
	return r.ServerStream.Context()
}

func (r *replayStream) RecvMsg(m any) error {
	if r.read.Swap(true) {
		return r.ServerStream.RecvMsg(m)
	}
	proto.Merge(m.(proto.Message), r.req)
	return nil
}

func (r *replayStream) SendMsg(m any) error {
	r.s.stamp(m)
	if r.ready != nil {
		select {
		case <-r.ready:
		case <-r.Context().Done():
			return status.FromContextError(r.Context().Err()).Err()
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.Context().Err(); err != nil {
		return status.FromContextError(err).Err()
	}
	return r.ServerStream.SendMsg(m)
}

// peerDialOptions are the options of the connections to the other
// servers: opts, or plaintext when opts is nil.
func peerDialOptions(opts []grpc.DialOption) []grpc.DialOption {
	if opts == nil {
		return []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	return opts
}
