package session

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tollgate/tollgate/internal/apiconv"
	"github.com/tollgate/tollgate/internal/holder"
	"github.com/tollgate/tollgate/internal/refuse"
	"github.com/tollgate/tollgate/internal/term"
	"github.com/tollgate/tollgate/limiter"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// Bounds of one Session stream.
const (
	// MaxPending is the most acquire and take requests one Session
	// stream may have unanswered at once; past it, new ones are refused
	// with RESOURCE_EXHAUSTED (TOO_MANY_REQUESTS). Release, renew, hello
	// and cancel are answered inline and do not count.
	MaxPending = 1024
	// DefaultMaxEvents is the most lease events queued for one Session
	// stream whose client is not reading; past it the stream is ended
	// with RESOURCE_EXHAUSTED (SESSION_OVERFLOW) rather than block the
	// engine or grow memory. Its leases stay, as for any ended stream.
	DefaultMaxEvents = 4096
	// DefaultMaxUnread is the most answers queued for one Session stream
	// whose client is not reading, and four times it the most for all the
	// streams of one client (see limits.Limits for who is a client); past
	// either the stream is ended with RESOURCE_EXHAUSTED
	// (SESSION_OVERFLOW). Queuing an answer never blocks, so a request
	// holds no goroutine once it is answered.
	DefaultMaxUnread = 4096
	// MaxWriting is the most acquires of one Session stream made apart
	// from its reader at once, each waiting for the write of its pool's
	// reservations (limiter.Engine.GrantWrites); past it, the reader
	// makes the next one itself, and reads on once it is made.
	MaxWriting = 64
)

// Serve serves one bidirectional Session stream (see session): requests
// are answered in any order, matched by request_id. When the client
// half-closes, the stream ends once every request in flight is answered;
// when it breaks, waiting requests are cancelled. Either way its leases are
// kept, to be renewed on another stream or to expire. clientUnread counts
// the answers queued on all the streams of the stream's client.
func (r *Streams) Serve(stream tollgatev1.LimiterService_SessionServer, clientUnread *atomic.Int64) error {
	s := newSession(r, stream)
	s.clientUnread = clientUnread
	r.add(s, r.Host.Now()) // for ListClients
	defer r.remove(s)
	return s.run()
}

// session is one Session stream. The handler goroutine is the only one that
// calls stream.Send (writeLoop); a reader goroutine receives and dispatches
// requests. An acquire or take decided at once is answered inline by the
// reader, except an acquire whose grant must first write its pool's
// reservations: that one is made apart (startWriting), at most MaxWriting
// at once, so that the stream reads on meanwhile. One that waits is a record (queueWait: in its pool's queue, or
// with the engine's timer for a take), answered by the callback that the
// engine calls once it has unlocked the pool, traced or not: no request
// holds a goroutine. A CancelRequest or the end of the stream
// gives a wait up. Queuing an answer never blocks (send), the queue being
// bounded by Streams.MaxUnread. Release, renew and hello are answered
// inline by the reader. The session is the Owner of the leases acquired or
// renewed on it, so the engine's OnLeaseEnded reaches pushEvent.
//
// Each request about a pool takes the term of the pool's shard when it
// comes (a call), and uses that term's engine throughout: its answer,
// when it grants, goes out only while that term leads (else the request
// is answered NOT_LEADER and what it was granted is released). A request
// for a shard this server does not lead is answered NOT_LEADER naming the
// shard's leader; the stream goes on. It ends when the server drains or
// leads no shard any more.
type session struct {
	streams *Streams
	host    Host
	calls   *holder.Calls // bound to no term: for what is not a term's
	stream  tollgatev1.LimiterService_SessionServer
	// ctx ends when the stream ends, the session fails, or the server
	// drains; its cause is the status the handler returns.
	ctx    context.Context
	cancel context.CancelCauseFunc
	// idle is the host's Idle when the stream began: the stream ends when
	// it is closed.
	idle <-chan struct{}

	// ready is signalled (non-blocking, capacity 1) after answers or
	// events grow.
	ready chan struct{}
	// clientUnread counts the answers queued on all the streams of this
	// stream's client.
	clientUnread *atomic.Int64
	// unread counts this stream's answers queued or being sent.
	unread atomic.Int64
	// finished is closed once the client has half-closed and every
	// acquire and take is answered.
	finished chan struct{}

	// Owned by the reader goroutine.
	clientID   string
	seenAnyReq bool
	bound      map[*term.Term]*holder.Calls // the calls of each term used lately (callsIn)

	sessionInfo // id, peer, identity, times, for ListClients

	// batchAnswers is set when the client said Hello with batch_answers.
	batchAnswers atomic.Bool

	mu           sync.Mutex
	closed       bool               // no new waits or events
	pending      map[uint64]waiting // waiting acquires and takes by id
	inflight     int                // waits that have not yet queued their answer
	eof          bool               // the client half-closed
	finishClosed bool
	writing      int      // acquires made apart (startWriting) in progress
	answers      []answer // queued for the writer
	events       []*tollgatev1.SessionResponse
	helloID      string // clientID as hello set it, for other goroutines
}

// waiting is an acquire or a take of the session that waits
// (sessionWait), or an acquire being made apart from the reader
// (apartAcquire).
type waiting interface {
	// stop gives the request up.
	stop()
}

func newSession(r *Streams, stream tollgatev1.LimiterService_SessionServer) *session {
	// The stream's requests all come from one caller: identify it once.
	ctx, cancel := context.WithCancelCause(r.Calls.Auth().WithIdentity(stream.Context()))
	return &session{
		streams:  r,
		host:     r.Host,
		calls:    r.Calls,
		stream:   stream,
		ctx:      ctx,
		cancel:   cancel,
		ready:    make(chan struct{}, 1),
		finished: make(chan struct{}),
		pending:  make(map[uint64]waiting),
		idle:     r.Host.Idle(),
	}
}

// call is one request of the stream about a pool: its id, its pool, and
// the term of the pool's shard it took when it came, with the holder's
// calls on that term's engine.
type call struct {
	id    uint64
	pool  string
	t     *term.Term
	calls *holder.Calls
}

// maxBound bounds the calls a session keeps bound to terms (callsIn).
const maxBound = 64

// callsIn is the holder's calls bound to t. Only the reader calls it.
func (s *session) callsIn(t *term.Term) *holder.Calls {
	if c, ok := s.bound[t]; ok {
		return c
	}
	if s.bound == nil || len(s.bound) >= maxBound {
		s.bound = make(map[*term.Term]*holder.Calls)
	}
	c := s.calls.In(t)
	s.bound[t] = c
	return c
}

// take takes the term of pool's shard for request id: it reports false,
// having answered the request, when pool is not a valid name or this
// server does not lead its shard (NOT_LEADER naming its leader).
func (s *session) take(id uint64, pool string) (call, bool) {
	if err := apiconv.CheckPoolName("pool", pool); err != nil {
		s.answerErr(id, err, refuse.About{Pool: pool})
		return call{}, false
	}
	t, err := s.host.Term(pool)
	if err != nil {
		s.answerStatus(id, err)
		return call{}, false
	}
	return call{id: id, pool: pool, t: t, calls: s.callsIn(t)}, true
}

// run serves the stream until it ends and returns the stream's status.
func (s *session) run() error {
	go s.readLoop()
	err := s.writeLoop()
	s.close(err)
	return err
}

// writeLoop sends answers and events until the stream is done. It returns
// nil when the client half-closed and every answer went out.
func (s *session) writeLoop() error {
	for {
		select {
		case <-s.ready:
			if err := s.sendQueued(); err != nil {
				return err
			}
		case <-s.finished:
			return s.flush()
		case <-s.ctx.Done():
			return s.endStatus()
		case <-s.host.Draining():
			return refuse.StatusOf(&apierr.Error{Code: apierr.CodeUnavailable, Reason: apierr.ReasonShuttingDown,
				Message: "the server is shutting down; reconnect (to another server if there is one) and renew your leases on the new stream: they were not released"}, refuse.About{}).Err()
		case <-s.idle:
			return s.host.NotLeader("")
		}
	}
}

// answer is an answer queued for the writer: when it grants (a lease, a
// share or tokens), with the term that granted it and its pool.
type answer struct {
	r    *tollgatev1.SessionResponse
	t    *term.Term // nil: it goes out whatever the terms
	pool string
}

// vet replaces each answer whose term stopped leading with NOT_LEADER
// (naming the leader of its pool's shard), releasing the lease it
// carries: past its term's leadership deadline no grant goes out.
func (s *session) vet(answers []answer) {
	for i, a := range answers {
		if a.t == nil || a.t.Leading() {
			continue
		}
		s.releaseUndelivered(a)
		answers[i] = answer{r: s.statusAnswer(a.r.GetRequestId(), s.host.NotLeader(a.pool))}
	}
}

// sendQueued sends the queued answers, then the queued events. An answer
// carrying a lease that cannot be delivered has its lease released.
func (s *session) sendQueued() error {
	s.mu.Lock()
	answers := s.answers
	s.answers = nil
	s.mu.Unlock()
	s.vet(answers)
	if s.batchAnswers.Load() {
		return s.sendBatched(answers)
	}
	for i, a := range answers {
		err := s.stream.Send(a.r)
		s.unread.Add(-1)
		s.clientUnread.Add(-1)
		if err != nil {
			for _, r := range answers[i+1:] {
				s.unread.Add(-1)
				s.clientUnread.Add(-1)
				s.releaseUndelivered(r)
			}
			s.releaseUndelivered(a)
			return err
		}
	}
	for _, ev := range s.takeEvents() {
		if err := s.stream.Send(ev); err != nil {
			return err
		}
	}
	return nil
}

// flush sends what is queued after the client half-closed and nothing is in
// flight.
func (s *session) flush() error { return s.sendQueued() }

// endStatus is the status to end the stream with once ctx is done.
func (s *session) endStatus() error {
	cause := context.Cause(s.ctx)
	if _, ok := status.FromError(cause); ok && cause != nil {
		return cause
	}
	return status.FromContextError(cause).Err()
}

// close ends the session after the writer stopped: no new waits or
// events, waiting requests are cancelled, and leases granted but not sent
// are released. Leases already delivered are not released.
func (s *session) close(err error) {
	s.mu.Lock()
	s.closed = true
	s.events = nil
	waits := make([]waiting, 0, len(s.pending))
	for _, p := range s.pending {
		waits = append(waits, p)
	}
	s.mu.Unlock()
	if err == nil {
		err = errSessionEnded
	}
	s.cancel(err)
	for _, p := range waits {
		p.stop()
	}
	s.mu.Lock()
	answers := s.answers
	s.answers = nil
	s.mu.Unlock()
	s.unread.Add(-int64(len(answers)))
	s.clientUnread.Add(-int64(len(answers)))
	for _, a := range answers {
		s.releaseUndelivered(a)
	}
}

var errSessionEnded = errors.New("session ended")

// releaseUndelivered releases, in the engine of the term that granted it,
// the lease of an acquire answer that could not be sent.
func (s *session) releaseUndelivered(a answer) {
	k, ok := a.r.GetKind().(*tollgatev1.SessionResponse_Acquire)
	if !ok || a.t == nil {
		return
	}
	l := k.Acquire.GetLease()
	if l == nil {
		return
	}
	err := s.calls.In(a.t).ReleaseLease(l.GetPool(), l.GetFencingToken(), nil)
	s.calls.Log.Debug("released a lease whose grant could not be sent on its session", "pool", l.GetPool(), "lease_id", l.GetId(), "err", err)
}

// readLoop receives requests until the stream ends. A panic while handling
// a request ends the stream with INTERNAL rather than the process.
func (s *session) readLoop() {
	defer func() {
		if p := recover(); p != nil {
			le := refuse.Classify(s.calls.Log, "Session", fmt.Errorf("panic: %v", p), refuse.About{})
			s.cancel(refuse.StatusOf(le, refuse.About{}).Err())
		}
	}()
	for {
		req, err := s.stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				s.halfClosed()
				return
			}
			if _, ok := status.FromError(err); !ok {
				err = status.FromContextError(err).Err()
			}
			s.cancel(err)
			return
		}
		s.touch()
		if b := req.GetBatch(); b != nil {
			if err := checkBatch(b); err != nil {
				s.cancel(refuse.StatusOf(err, refuse.About{}).Err())
				return
			}
			for _, r := range b.GetRequests() {
				s.handle(r)
			}
		} else {
			s.handle(req)
		}
	}
}

// halfClosed records that the client sent its last request; the stream ends
// once the acquires and takes in flight have answered.
func (s *session) halfClosed() {
	s.mu.Lock()
	s.eof = true
	s.maybeFinishLocked()
	s.mu.Unlock()
}

func (s *session) maybeFinishLocked() {
	if s.eof && s.inflight == 0 && !s.finishClosed {
		s.finishClosed = true
		close(s.finished)
	}
}

// handle dispatches one request.
func (s *session) handle(req *tollgatev1.SessionRequest) {
	id := req.GetRequestId()
	first := !s.seenAnyReq
	s.seenAnyReq = true
	if err := s.guardRequest(req); err != nil { // rate and policy
		s.answerRefusal(id, err)
		return
	}
	switch k := req.GetKind().(type) {
	case *tollgatev1.SessionRequest_Cancel:
		s.cancelRequest(k.Cancel.GetRequestId())
		return
	case nil:
		s.answerErr(id, refuse.InvalidArg("request %d has nothing in it; set one of hello, acquire, release, renew, take, cancel, report, acquire_share, refresh_share, release_share or resize_lease", id), refuse.About{})
		return
	}
	s.mu.Lock()
	_, busy := s.pending[id]
	s.mu.Unlock()
	if busy {
		s.answerErr(id, &apierr.Error{Code: apierr.CodeInvalidArgument, Reason: apierr.ReasonRequestIDInUse,
			Message: fmt.Sprintf("request_id %d is already in use by an unanswered request of this stream; use a request_id not in use (for example a counter)", id)}, refuse.About{})
		return
	}
	switch k := req.GetKind().(type) {
	case *tollgatev1.SessionRequest_Hello:
		s.hello(id, k.Hello, first)
		return
	case *tollgatev1.SessionRequest_Report: // outcomes, answered inline; its pools may be of several shards
		s.report(id, k.Report)
		return
	}
	pool, ok := poolOf(req)
	if !ok {
		s.answerErr(id, refuse.InvalidArg("request %d is of a kind this server does not know (%T); upgrade the server or send hello, acquire, release, renew, take, cancel, report, acquire_share, refresh_share, release_share or resize_lease", id, req.GetKind()), refuse.About{})
		return
	}
	q, ok := s.take(id, pool)
	if !ok {
		return
	}
	switch k := req.GetKind().(type) {
	case *tollgatev1.SessionRequest_Acquire:
		s.startAcquire(q, k.Acquire)
	case *tollgatev1.SessionRequest_Take:
		s.startTake(q, k.Take)
	case *tollgatev1.SessionRequest_Release:
		r := k.Release
		if err := q.calls.Release(r); err != nil {
			s.answerErrIn(q, err, refuse.About{Pool: r.GetPool(), LeaseID: r.GetLeaseId()})
			return
		}
		s.send(released(id))
	case *tollgatev1.SessionRequest_Renew:
		r := k.Renew
		lease, err := q.calls.Renew(s.ctx, r, s, s.clientID)
		if err != nil {
			s.answerErrIn(q, err, refuse.About{Pool: r.GetPool(), LeaseID: r.GetLeaseId()})
			return
		}
		s.sendIn(q, &tollgatev1.SessionResponse{RequestId: id, Kind: &tollgatev1.SessionResponse_Renew{Renew: &tollgatev1.RenewResponse{Lease: apiconv.LeaseToProto(s.calls.IDs, lease)}}})
	case *tollgatev1.SessionRequest_AcquireShare: // rate shares
		s.acquireShare(q, k.AcquireShare)
	case *tollgatev1.SessionRequest_RefreshShare:
		s.refreshShare(q, k.RefreshShare)
	case *tollgatev1.SessionRequest_ReleaseShare:
		s.releaseShare(q, k.ReleaseShare)
	case *tollgatev1.SessionRequest_ResizeLease: // concurrency shares
		s.resizeLease(q, k.ResizeLease)
	default:
		s.answerErr(id, refuse.InvalidArg("request %d is of a kind this server does not know (%T); upgrade the server or send hello, acquire, release, renew, take, cancel, report, acquire_share, refresh_share, release_share or resize_lease", id, k), refuse.About{})
	}
}

// hello sets the stream's default client id.
func (s *session) hello(id uint64, h *tollgatev1.Hello, first bool) {
	if !first {
		s.answerErr(id, refuse.InvalidArg("hello must be the first request of a stream, and come at most once; open a new stream to change the client id, or set client_id on each acquire"), refuse.About{})
		return
	}
	if n := len(h.GetClientId()); n > limiter.MaxClientIDLen {
		s.answerErr(id, refuse.InvalidArg("hello.client_id is %d bytes; the most is %d", n, limiter.MaxClientIDLen), refuse.About{})
		return
	}
	s.clientID = h.GetClientId()
	s.batchAnswers.Store(h.GetBatchAnswers())
	s.mu.Lock()
	s.helloID = s.clientID
	s.mu.Unlock()
	s.send(&tollgatev1.SessionResponse{RequestId: id, Kind: &tollgatev1.SessionResponse_Welcome{Welcome: &tollgatev1.Welcome{ClientId: s.clientID, BatchRequests: true}}})
}

// startAcquire validates an acquire and answers it on the reader when it
// needs no wait; one that waits is a record in its pool's queue
// (queueWait).
func (s *session) startAcquire(q call, r *tollgatev1.AcquireRequest) {
	ar, err := apiconv.AcquireFromProto(r)
	if err != nil {
		s.answerErr(q.id, err, refuse.About{Pool: r.GetPool()})
		return
	}
	if ar.ClientID == "" {
		ar.ClientID = s.clientID
	}
	ar.Owner = s
	if !s.mayStart(q.id) {
		return
	}
	if q.calls.Engine().GrantWrites(ar.Pool, ar.Weight, ar.TTL) && s.startWriting(q, ar, r.GetTraceContext()) {
		return
	}
	lease, wait, err := q.calls.StartAcquire(s.ctx, ar, r.GetTraceContext())
	if wait.Waits() {
		queueWait(s, q, wait, (*session).answerAcquire)
		return
	}
	s.answerAcquire(q, lease, err)
}

// startWriting makes an acquire whose grant must first write its pool's
// reservations apart from the reader (acquireApart), so that the stream
// reads on while the write commits (shared with the other pools' writes).
// It reports false, doing nothing, when MaxWriting acquires of the stream
// are already being made so, or the session is closed.
func (s *session) startWriting(q call, ar limiter.AcquireRequest, tc map[string]string) bool {
	a := &apartAcquire{}
	s.mu.Lock()
	if s.closed || s.writing >= MaxWriting {
		s.mu.Unlock()
		return false
	}
	s.writing++
	s.pending[q.id] = a
	s.inflight++
	s.mu.Unlock()
	go s.acquireApart(q, ar, tc, a)
	return true
}

// acquireApart makes the acquire startWriting recorded as a: answered at
// once, or turned into a wait in its pool's queue (queueWait), which a
// CancelRequest or the end of the session that came meanwhile gives up.
func (s *session) acquireApart(q call, ar limiter.AcquireRequest, tc map[string]string, a *apartAcquire) {
	lease, wait, err := q.calls.StartAcquire(s.ctx, ar, tc)
	s.mu.Lock()
	s.writing--
	s.mu.Unlock()
	if wait.Waits() {
		queueWait(s, q, wait, (*session).answerAcquire)
		a.queued(wait.Cancel)
	} else {
		s.forget(q.id)
		s.answerAcquire(q, lease, err)
	}
	s.waitEnded()
}

// apartAcquire is an acquire being made apart from the reader
// (acquireApart) until it is answered or waits. Giving it up meanwhile
// (stop) is kept, and cancels the wait it turns into; one answered at once
// stands, as a grant that raced with a CancelRequest does.
type apartAcquire struct {
	mu      sync.Mutex
	stopped bool
	cancel  func(cause error) // its wait's, once it waits
}

// stop gives the acquire up.
func (a *apartAcquire) stop() {
	a.mu.Lock()
	a.stopped = true
	cancel := a.cancel
	a.mu.Unlock()
	if cancel != nil {
		cancel(context.Canceled)
	}
}

// queued records that the acquire waits, cancelled by cancel; it is given
// up at once if stop came first.
func (a *apartAcquire) queued(cancel func(cause error)) {
	a.mu.Lock()
	a.cancel = cancel
	stopped := a.stopped
	a.mu.Unlock()
	if stopped {
		cancel(context.Canceled)
	}
}

// startTake validates a take and answers it on the reader when it needs
// no wait; one that waits is a record with the engine's timer (queueWait).
func (s *session) startTake(q call, r *tollgatev1.TakeRequest) {
	if !s.mayStart(q.id) {
		return
	}
	res, wait, err := q.calls.StartTake(s.ctx, r)
	if wait.Waits() {
		queueWait(s, q, wait, (*session).answerTake)
		return
	}
	s.answerTake(q, res, err)
}

// sessionWait is an acquire or a take of a session that waits: one record,
// with no goroutine, answered (by answer) when the engine delivers its
// outcome.
type sessionWait[T limiter.Lease | limiter.TakeResult] struct {
	s      *session
	q      call
	w      holder.Wait[T]
	answer func(s *session, q call, v T, err error)
}

// queueWait keeps a request that waits as a record: the engine delivers
// its outcome, which is answered then. A CancelRequest or the end of the
// session gives it up; a request that comes as the session closes is
// given up at once, and a grant that raced with that is released
// (answerAcquire).
func queueWait[T limiter.Lease | limiter.TakeResult](s *session, q call, w holder.Wait[T], answer func(*session, call, T, error)) {
	sw := &sessionWait[T]{s: s, q: q, w: w, answer: answer}
	if !s.hold(q.id, sw) {
		sw.w.Notify(sw.answered)
		sw.w.Cancel(context.Canceled)
		return
	}
	sw.w.Notify(sw.done)
}

// done answers the wait's outcome and frees its id.
func (sw *sessionWait[T]) done(v T, err error) {
	s := sw.s
	s.forget(sw.q.id)
	sw.answered(v, err)
	s.waitEnded()
}

// answered answers the wait's outcome.
func (sw *sessionWait[T]) answered(v T, err error) { sw.answer(sw.s, sw.q, v, err) }

// stop gives the wait up.
func (sw *sessionWait[T]) stop() { sw.w.Cancel(context.Canceled) }

// answerAcquire queues the answer to an acquire. A grant that raced with a
// CancelRequest stands; one whose stream is gone is released here or by
// close.
func (s *session) answerAcquire(q call, lease limiter.Lease, err error) {
	if err != nil {
		s.answerErrIn(q, err, refuse.About{Pool: q.pool})
		return
	}
	if !s.sendIn(q, acquired(q.id, s.calls.IDs, lease)) {
		q.calls.ReleaseQuietly(lease, "session ended before the grant was sent")
	}
}

// mayStart reports whether the session may take another acquire or take,
// refusing it (with an answer) past MaxPending; it returns false
// without an answer once the session is closed.
func (s *session) mayStart(id uint64) bool {
	s.mu.Lock()
	closed, full := s.closed, s.inflight >= MaxPending
	s.mu.Unlock()
	if full && !closed {
		s.refuseTooMany(id)
	}
	return !closed && !full
}

// hold records a waiting acquire or take under id; once the session is
// closed it records nothing and reports false.
func (s *session) hold(id uint64, p waiting) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.pending[id] = p
	s.inflight++
	return true
}

// forget frees the id of a wait whose outcome is known, before its answer
// is queued, so that the client may reuse the id once it sees the answer.
func (s *session) forget(id uint64) {
	s.mu.Lock()
	delete(s.pending, id)
	s.mu.Unlock()
}

// waitEnded ends a wait after its answer was queued (or dropped).
func (s *session) waitEnded() {
	s.mu.Lock()
	s.inflight--
	s.maybeFinishLocked()
	s.mu.Unlock()
}

// answerTake queues the answer to a take.
func (s *session) answerTake(q call, res limiter.TakeResult, err error) {
	if err != nil {
		s.answerErrIn(q, err, refuse.About{Pool: q.pool})
		return
	}
	s.sendIn(q, &tollgatev1.SessionResponse{RequestId: q.id, Kind: &tollgatev1.SessionResponse_Take{Take: &tollgatev1.TakeResponse{Tokens: res.Tokens, Waited: durationpb.New(res.Waited)}}})
}

// refuseTooMany answers request id that it is one past MaxPending.
func (s *session) refuseTooMany(id uint64) {
	s.answerErr(id, &apierr.Error{Code: apierr.CodeResourceExhausted, Reason: apierr.ReasonTooManyRequests,
		Message: fmt.Sprintf("this stream already has %d unanswered acquire and take requests, the most allowed; wait for answers or cancel some before sending more, or open another stream", MaxPending)}, refuse.About{})
}

// cancelRequest cancels a waiting acquire or take; unknown ids (already
// answered, or never sent) are ignored.
func (s *session) cancelRequest(id uint64) {
	s.mu.Lock()
	p, ok := s.pending[id]
	s.mu.Unlock()
	if ok {
		p.stop()
	}
}

// send queues an answer that grants nothing (or an error) for the writer;
// see queue.
func (s *session) send(r *tollgatev1.SessionResponse) bool { return s.queue(answer{r: r}) }

// sendIn queues r, the answer to q that grants, for the writer: it goes
// out only while q's term leads.
func (s *session) sendIn(q call, r *tollgatev1.SessionResponse) bool {
	return s.queue(answer{r: r, t: q.t, pool: q.pool})
}

// queue queues an answer for the writer without blocking; it reports
// false if the session ended first, or ends it (SESSION_OVERFLOW) because
// its client leaves too many answers unread.
func (s *session) queue(a answer) bool {
	s.mu.Lock()
	if s.closed || s.ctx.Err() != nil {
		s.mu.Unlock()
		return false
	}
	n, c, most := s.unread.Load(), s.clientUnread.Load(), s.streams.MaxUnread
	if n >= most || c >= 4*most {
		s.closed = true
		s.events = nil
		s.mu.Unlock()
		what := fmt.Sprintf("%d answers were waiting to be read on it, the most one stream may have (%d)", n, most)
		if n < most {
			what = fmt.Sprintf("%d answers were waiting to be read on this client's streams, the most one client may have (%d)", c, 4*most)
		}
		s.calls.Log.Warn("ending a session stream whose client does not read its answers", "queued", n, "client_queued", c)
		s.cancel(refuse.StatusOf(&apierr.Error{Code: apierr.CodeResourceExhausted, Reason: apierr.ReasonSessionOverflow,
			Message: "the stream was ended because " + what + "; read the stream as fast as you send, then reconnect and renew your leases (they were not released)"}, refuse.About{}).Err())
		return false
	}
	s.answers = append(s.answers, a)
	s.unread.Add(1)
	s.clientUnread.Add(1)
	s.mu.Unlock()
	s.signal()
	return true
}

// signal wakes the writer.
func (s *session) signal() {
	select {
	case s.ready <- struct{}{}:
	default:
	}
}

// answerErrIn queues a SessionError answer for q: NOT_LEADER when its term
// stopped leading meanwhile and err does not say that the outcome is
// unknown (the error is then its frozen or closing engine's, and nothing
// was applied), as the unary calls' leader gate answers.
func (s *session) answerErrIn(q call, err error, ec refuse.About) {
	if !q.t.Leading() && !outcomeUnknown(err) {
		s.answerStatus(q.id, s.host.NotLeader(q.pool))
		return
	}
	s.answerErr(q.id, err, ec)
}

// outcomeUnknown reports whether err says a change may or may not have
// been applied (OUTCOME_UNKNOWN).
func outcomeUnknown(err error) bool {
	var le *apierr.Error
	return errors.As(err, &le) && le.Reason == apierr.ReasonOutcomeUnknown
}

// answerStatus queues the answer to request id that failed with err, a
// gRPC status (as NOT_LEADER is), its ErrorInfo's reason and metadata and
// its RetryInfo's delay carried over.
func (s *session) answerStatus(id uint64, err error) {
	s.send(s.statusAnswer(id, err))
}

// statusAnswer is the answer to request id that failed with the gRPC
// status err.
func (s *session) statusAnswer(id uint64, err error) *tollgatev1.SessionResponse {
	st := status.Convert(err)
	se := &tollgatev1.SessionError{Code: int32(st.Code()), Message: st.Message()}
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			se.Reason, se.Metadata = d.GetReason(), d.GetMetadata()
		case *errdetails.RetryInfo:
			se.RetryAfter = d.GetRetryDelay()
		}
	}
	return &tollgatev1.SessionResponse{RequestId: id, Kind: &tollgatev1.SessionResponse_Error{Error: se}}
}

// answerErr queues a SessionError answer for request id.
func (s *session) answerErr(id uint64, err error, ec refuse.About) {
	le := refuse.Classify(s.calls.Log, "Session", err, ec)
	se := &tollgatev1.SessionError{
		Code:    int32(refuse.GRPCCode(le.Code)),
		Message: le.Message,
		Reason:  string(le.Reason),
	}
	if le.RetryAfter > 0 {
		se.RetryAfter = durationpb.New(le.RetryAfter)
	}
	s.send(&tollgatev1.SessionResponse{RequestId: id, Kind: &tollgatev1.SessionResponse_Error{Error: se}})
}

// LeaseEnded pushes the end of a lease (the engine's OnLeaseEnded) to
// the session that owns it, if it is still live. It never blocks.
func LeaseEnded(ev limiter.LeaseEnded) {
	if sess, ok := ev.Owner.(*session); ok {
		sess.pushEvent(ev)
	}
}

// pushEvent queues a lease event for the writer without ever blocking: it
// is called from the engine's OnLeaseEnded. A client that lets
// Streams.MaxEvents events pile up has its stream ended.
func (s *session) pushEvent(ev limiter.LeaseEnded) {
	s.queueEvent(&tollgatev1.SessionResponse{Kind: &tollgatev1.SessionResponse_Event{Event: apiconv.LeaseEventToProto(s.calls.IDs, ev)}})
}

// queueEvent queues an event (a lease event, or a share event) as
// pushEvent says.
func (s *session) queueEvent(resp *tollgatev1.SessionResponse) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	if n := len(s.events); int64(n) >= s.streams.MaxEvents.Load() {
		s.closed = true
		s.events = nil
		s.mu.Unlock()
		s.calls.Log.Warn("ending a session stream whose client does not read its events", "queued", n)
		s.cancel(refuse.StatusOf(&apierr.Error{Code: apierr.CodeResourceExhausted, Reason: apierr.ReasonSessionOverflow,
			Message: fmt.Sprintf("the stream was ended because %d lease and share events were waiting to be read; read the stream faster, then reconnect and renew your leases and shares (they were not released)", n)}, refuse.About{}).Err())
		return
	}
	s.events = append(s.events, resp)
	s.mu.Unlock()
	s.signal()
}

// takeEvents returns and clears the queued events.
func (s *session) takeEvents() []*tollgatev1.SessionResponse {
	s.mu.Lock()
	evs := s.events
	s.events = nil
	s.mu.Unlock()
	return evs
}
