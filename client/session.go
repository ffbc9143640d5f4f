package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// This file keeps the Session stream of each link (the dialed target, or
// one server of a sharded cluster): a loop (run) opens it, says Hello,
// reads answers and events until it breaks, fails the requests still
// waiting on it, and reconnects with backoff. Callers send requests with
// roundTrip, which picks the link of the request's pool (linkFor), waits
// for its live stream, matches the answer by request_id and retries on the
// next stream when one breaks, or at the pool's shard's owner when the
// server answers NOT_LEADER.

const (
	// handshakeTimeout bounds the wait for Welcome on a new stream.
	handshakeTimeout = 10 * time.Second
	// stableStream is how long a stream must live for the reconnect backoff
	// to start over.
	stableStream = 5 * time.Second
)

// link is one connection over which the Client sends Session requests,
// and its one Session stream: the dialed target (Client.main), or in a
// cluster of several shards one server that leads some (Client.links).
type link struct {
	c    *Client
	addr string // the server's address; "" for the dialed target
	conn *grpc.ClientConn
	stub tollgatev1.LimiterServiceClient
	// ctx ends the link's session loop: the Client's Close cancels it, and
	// so does the link's retirement.
	ctx    context.Context
	cancel context.CancelFunc

	// Guarded by c.mu:
	started   bool          // the session loop is running
	cur       *stream       // the live Session stream, or nil
	ready     chan struct{} // closed when cur is set; replaced when it breaks
	lastBreak error         // why the last Session stream broke or could not open
	retired   bool          // no new requests: its loop ends once it is idle (retireLocked)
	shards    int           // how many shards route to it (a server's link)
	// draining is retired, read by the stream's reader: it ends the link
	// once no request waits for an answer.
	draining atomic.Bool
}

// newLink returns a link over conn; addr is "" for the dialed target.
func (c *Client) newLink(addr string, conn *grpc.ClientConn) *link {
	ctx, cancel := context.WithCancel(c.ctx)
	return &link{c: c, addr: addr, conn: conn, stub: tollgatev1.NewLimiterServiceClient(conn), ctx: ctx, cancel: cancel, ready: make(chan struct{})}
}

// errRetired is what a request waiting for the stream of a link that was
// retired meanwhile gets: roundTrip sends it by the new route.
var errRetired = errors.New("tollgate: the server's connection was retired")

// stream is one Session stream and the requests waiting for its answers.
type stream struct {
	c      *Client
	ln     *link
	ss     tollgatev1.LimiterService_SessionClient
	cancel context.CancelCauseFunc
	server string    // the address of the list it is connected to; "" if not known
	stuck  sync.Once // the stream was taken for stuck (abandon)

	// batch: the server reads batched requests (its Welcome said so).
	batch bool
	// sendMu guards the requests queued to send and sending, which is
	// true while a caller sends them (send).
	sendMu  sync.Mutex
	queue   []*tollgatev1.SessionRequest
	sending bool

	mu      sync.Mutex
	pending map[uint64]*call // nil once the stream is broken
	err     error            // why it broke; set with pending = nil
}

// call is one request waiting for its answer.
type call struct {
	ch        chan answer // buffered: receives exactly one answer unless abandoned
	posted    bool        // instead of ch, a posted release: its answer goes to releaseAnswered
	release   leaseKey    // the lease a posted release releases
	sentAt    time.Time   // just before the request was sent
	acquire   bool        // an acquire: the reader turns a grant into a *Lease
	abandoned bool        // the caller went away; drop the answer (guarded by stream.mu)
}

// answer is what a call gets: the server's response (possibly a
// SessionError), or err when the stream broke first.
type answer struct {
	resp   *tollgatev1.SessionResponse
	lease  *Lease    // a granted acquire
	sentAt time.Time // when the answered request was sent
	err    error
}

// brokenError says that a stream broke before a request was answered; the
// request may or may not have reached the server. roundTrip retries it.
type brokenError struct{ cause error }

func (e *brokenError) Error() string { return "session stream broke: " + e.cause.Error() }
func (e *brokenError) Unwrap() error { return e.cause }

// isBroken reports whether err is (or wraps) a *brokenError.
func isBroken(err error) bool {
	var be *brokenError
	return err != nil && errors.As(err, &be)
}

// op describes a request for roundTrip.
type op struct {
	// build returns the request for attempt number n (0 first), once a
	// stream is there to send it on; it may recompute durations, or fail
	// to stop retrying.
	build func(n int) (*tollgatev1.SessionRequest, error)
	// cancellable: send a CancelRequest when the caller goes away while the
	// server may still be waiting (acquire, take).
	cancellable bool
	// acquire: the answer may carry a lease to hand to the caller, or to
	// release if the caller went away.
	acquire bool
	// resetOnDeadline: a request unanswered at its context's deadline
	// means the stream is dead (renew answers are immediate); reset it.
	resetOnDeadline bool
	// failIfUnreachable: give up with ErrUnavailable when the server
	// cannot be reached, instead of waiting (FailWhenUnavailable).
	failIfUnreachable bool
	// pool is the pool the request is about: it goes to the server that
	// leads the pool's shard.
	pool string
}

// roundTrip sends the request that o builds on the stream of the link of
// o.pool and returns its answer. A SessionError answer is returned as an
// *Error. When the stream breaks first, or the server answers UNAVAILABLE,
// it retries on the next stream for as long as ctx allows; a NOT_LEADER
// answer in a sharded cluster moves it to the owner the answer names
// (reroute). It returns ctx.Err() when ctx ends first and ErrClosed when
// the Client is closed.
func (c *Client) roundTrip(ctx context.Context, o op) (answer, error) {
	for n := 0; ; n++ {
		ln := c.linkFor(o.pool)
		if ln == nil {
			// A sharded cluster whose map names no server for the shard.
			if err := c.rerouteWait(ctx, n, nil, hopAgain); err != nil {
				return answer{}, err
			}
			continue
		}
		st, err := ln.currentFor(ctx, o)
		switch {
		case err == errRetired, err == errLinkWait:
			// Retired: the route changed meanwhile (at once the first
			// time). Link wait: its server does not answer (back off).
			h := hopAgain
			if err == errRetired {
				h = hopMoved
			}
			if err := c.rerouteWait(ctx, n, nil, h); err != nil {
				return answer{}, err
			}
			continue
		case err != nil:
			return answer{}, err
		}
		req, err := o.build(n)
		if err != nil {
			return answer{}, err
		}
		a, err := st.do(ctx, req, o)
		switch {
		case err == errRerouted:
			if err := c.rerouteWait(ctx, n, nil, hopMoved); err != nil {
				return answer{}, err
			}
			continue
		case isBroken(err):
			if ctx.Err() != nil {
				return answer{}, ctx.Err()
			}
			c.log.Debug("tollgate: retrying a request on a new session stream", "err", err)
			continue // current waits for the next stream
		case err != nil:
			return a, err
		}
		se := a.resp.GetError()
		if se == nil {
			return a, nil
		}
		e := fromSessionError(se)
		if e.Is(apierr.ErrNotLeader) {
			if reroute, h := c.noteNotLeader(o.pool, e, ln); reroute {
				// Sharded: nothing was applied; send it to the owner now known.
				c.log.Debug("tollgate: sending a request again by its shard's route", "err", e)
				if err := c.rerouteWait(ctx, n, e, h); err != nil {
					return answer{}, err
				}
				continue
			}
		}
		if e.Code != codes.Unavailable || e.Is(apierr.ErrRecovering) || e.Is(apierr.ErrStorageFailed) || e.Is(apierr.ErrOutcomeUnknown) {
			return a, e // an answer about the request, not about reaching the server; never sent again when it may have been applied
		}
		if o.failIfUnreachable {
			return a, unavailableAnswer(e)
		}
		c.log.Debug("tollgate: server unavailable; retrying", "err", e)
		deadline, _ := ctx.Deadline()
		if err := pause(ctx, c.ctx, retryBackoff.hinted(n, deadline, e.RetryAfter)); err != nil {
			return answer{}, err
		}
	}
}

// pause sleeps for d unless ctx or closed ends first, returning its error
// (or ErrClosed).
func pause(ctx, closed context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-closed.Done():
		return ErrClosed
	}
}

// current returns the link's live stream, starting its session loop on
// first use and waiting for a stream while ctx allows, and at most bound
// when not nil (then errLinkWait). It returns errRetired when the link is
// retired first, or, on a server's link (bound not nil), when pool's shard
// is routed to another server.
func (ln *link) current(ctx context.Context, pool string, bound *time.Duration) (*stream, error) {
	c := ln.c
	var timeout *time.Timer
	var reread *time.Ticker
	for {
		var moved <-chan struct{}
		if bound != nil {
			moved = c.movedSignal()
			if c.linkFor(pool) != ln {
				return nil, errRetired // its shard was routed elsewhere meanwhile
			}
		}
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return nil, ErrClosed
		}
		if ln.retired {
			c.mu.Unlock()
			return nil, errRetired
		}
		if !ln.started {
			ln.started = true
			c.wg.Add(1)
			go ln.run()
		}
		st, ready := ln.cur, ln.ready
		c.mu.Unlock()
		if st != nil {
			return st, nil
		}
		if bound != nil && timeout == nil {
			timeout = time.NewTimer(*bound)
			defer timeout.Stop()
			reread = time.NewTicker(relearnEvery)
			defer reread.Stop()
		}
		var expired <-chan time.Time
		var tick <-chan time.Time
		if timeout != nil {
			expired, tick = timeout.C, reread.C
		}
		select {
		case <-ready:
		case <-ctx.Done():
			return nil, ln.waitEnded(ctx)
		case <-c.ctx.Done():
			return nil, ErrClosed
		case <-ln.ctx.Done(): // retired: the loop above says so
		case <-moved: // the loop above checks the pool's route
		case <-tick:
			// While a server's link has no stream, its shards may be
			// moving: read the map again (as often as learn allows), so
			// that a new owner is found while this request waits.
			c.learn()
		case <-expired:
			c.learn() // the owner named does not answer: read the map again
			return nil, errLinkWait
		}
	}
}

// currentBounded is current, waiting at most linkWait on a server's link
// (errLinkWait), or until pool's shard is routed to another server
// (errRetired).
func (ln *link) currentBounded(ctx context.Context, pool string) (*stream, error) {
	if ln == ln.c.main {
		return ln.current(ctx, pool, nil)
	}
	d := linkWait
	return ln.current(ctx, pool, &d)
}

// run keeps the link's Session stream open until the Client is closed or
// the link retired; a retired server's link then closes its connection.
func (ln *link) run() {
	c := ln.c
	defer c.wg.Done()
	defer func() {
		c.mu.Lock()
		retired := ln.retired
		c.mu.Unlock()
		if retired && ln != c.main {
			_ = ln.conn.Close() // Close closes the others
		}
	}()
	var attempt int
	for ln.ctx.Err() == nil {
		st, err := ln.open()
		if err != nil {
			if ln.ctx.Err() != nil {
				return
			}
			c.log.Warn("tollgate: cannot open session stream", "server", ln.name(), "err", err)
		} else {
			started := time.Now()
			ln.publish(st)
			err = st.readLoop()
			ln.unpublish(st, err)
			if ln.ctx.Err() != nil {
				return
			}
			c.log.Warn("tollgate: session stream broke; reconnecting", "server", ln.name(), "err", err)
			if time.Since(started) >= stableStream {
				attempt = 0
			}
		}
		if ln != c.main {
			c.learn() // its server may have handed its shards off, or died
		}
		if pause(ln.ctx, ln.ctx, reconnectBackoff.hinted(attempt, c.nearestDeadline(), ln.noteBreak(err))) != nil {
			return
		}
		attempt++
	}
}

// name is the link's server for logs: its address, or the dialed target.
func (ln *link) name() string {
	if ln.addr != "" {
		return ln.addr
	}
	return ln.c.target
}

// nearestDeadline returns the earliest local deadline of the Client's
// leases, or the zero time when it holds none.
func (c *Client) nearestDeadline() time.Time {
	c.mu.Lock()
	leases := make([]*Lease, 0, len(c.leases))
	for _, l := range c.leases {
		leases = append(leases, l)
	}
	c.mu.Unlock()
	var nearest time.Time
	for _, l := range leases {
		if d := l.deadline(); nearest.IsZero() || d.Before(nearest) {
			nearest = d
		}
	}
	return nearest
}

// redial makes the connection try to connect again, until stop is called,
// as often as the Client's leases need: gRPC's own connection backoff may
// wait up to its maximum (2s) between attempts, longer than a short lease
// has left. It resets that backoff on reconnectBackoff's schedule, which
// tries more often as the nearest lease deadline comes closer (at least
// every minRetry·1.2 in the end). Without leases it leaves gRPC's backoff
// alone.
func (ln *link) redial() (stop func()) {
	c := ln.c
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		for n := 0; ; n++ {
			deadline := c.nearestDeadline()
			if deadline.IsZero() {
				return // no lease is granted while there is no stream
			}
			t := time.NewTimer(reconnectBackoff.delay(n, deadline))
			select {
			case <-done:
				t.Stop()
				return
			case <-t.C:
			}
			ln.conn.ResetConnectBackoff()
		}
	}()
	return func() {
		close(done)
		<-exited
	}
}

// open opens a Session stream on the link (waiting for a connection as
// long as the link lives, see redial) and exchanges Hello and Welcome.
func (ln *link) open() (*stream, error) {
	c := ln.c
	ctx, cancel := context.WithCancelCause(ln.ctx)
	stopRedial := ln.redial()
	// A server's link fails at once when its server cannot be reached (the
	// loop then reads the map again: the shards may have moved); the
	// dialed target's waits for a connection.
	ss, err := ln.stub.Session(ctx, grpc.WaitForReady(ln == c.main))
	stopRedial()
	if err != nil {
		cancel(err)
		return nil, err
	}
	server := ln.addr
	if ln == c.main && c.servers != nil {
		server = c.servers.addressOf(ss)
	}
	id := c.nextID.Add(1)
	hello := &tollgatev1.SessionRequest{RequestId: id, Kind: &tollgatev1.SessionRequest_Hello{Hello: &tollgatev1.Hello{ClientId: c.clientID, BatchAnswers: true}}}
	if err := ss.Send(hello); err != nil {
		_, err = ss.Recv() // the real error
		cancel(err)
		return nil, err
	}
	t := time.AfterFunc(handshakeTimeout, func() {
		cancel(fmt.Errorf("no Welcome within %v", handshakeTimeout))
	})
	resp, err := ss.Recv()
	stuck := !t.Stop()
	if err != nil {
		if cause := context.Cause(ctx); cause != nil && c.ctx.Err() == nil {
			err = cause
		}
		cancel(err)
		if stuck {
			ln.stuck(server) // the next stream goes elsewhere
		}
		return nil, err
	}
	if se := resp.GetError(); se != nil {
		err := fromSessionError(se)
		cancel(err)
		return nil, fmt.Errorf("hello refused: %w", err)
	}
	if resp.GetWelcome() == nil || resp.GetRequestId() != id {
		err := fmt.Errorf("protocol error: expected Welcome to request %d, got %T for request %d", id, resp.GetKind(), resp.GetRequestId())
		cancel(err)
		return nil, err
	}
	return &stream{
		c:       c,
		ln:      ln,
		ss:      ss,
		cancel:  cancel,
		server:  server,
		pending: make(map[uint64]*call),
		batch:   resp.GetWelcome().GetBatchRequests(),
	}, nil
}

// publish makes st the link's live stream and asks every lease whose pool
// it serves to renew on it at once, so the server reports their events
// here.
func (ln *link) publish(st *stream) {
	c := ln.c
	c.mu.Lock()
	ln.cur = st
	close(ln.ready)
	leases := make([]*Lease, 0, len(c.leases))
	for _, l := range c.leases {
		leases = append(leases, l)
	}
	c.mu.Unlock()
	for _, l := range leases {
		if c.linkFor(l.pool) == ln {
			l.kickRenew()
		}
	}
	c.kickShares()
}

// unpublish retires a broken stream and fails the requests waiting on it.
func (ln *link) unpublish(st *stream, cause error) {
	c := ln.c
	c.mu.Lock()
	if ln.cur == st {
		ln.cur = nil
		ln.ready = make(chan struct{})
	}
	c.mu.Unlock()
	var err error = &brokenError{cause: cause}
	if c.ctx.Err() != nil {
		err = ErrClosed
	}
	st.fail(err)
}

// readLoop dispatches answers and events until the stream breaks, and
// returns why.
func (st *stream) readLoop() error {
	for {
		resp, err := st.ss.Recv()
		if err != nil {
			return err
		}
		st.dispatch(resp)
	}
}

// dispatch hands an answer to its call, or an event to its lease.
func (st *stream) dispatch(resp *tollgatev1.SessionResponse) {
	if b := resp.GetBatch(); b != nil {
		for _, r := range b.GetResponses() {
			st.dispatch(r)
		}
		return
	}
	id := resp.GetRequestId()
	if id == 0 {
		if ev := resp.GetEvent(); ev != nil {
			st.c.leaseEvent(ev)
		}
		if ev := resp.GetShareEvent(); ev != nil {
			st.c.shareEvent(ev)
		}
		return
	}
	st.mu.Lock()
	cl := st.pending[id]
	delete(st.pending, id)
	abandoned := cl != nil && cl.abandoned
	drained := len(st.pending) == 0 && st.ln.draining.Load()
	st.mu.Unlock()
	if drained {
		defer st.ln.cancel() // after the last answer is handed over
	}
	if cl == nil {
		st.c.log.Debug("tollgate: answer to an unknown request", "request_id", id)
		return
	}
	a := answer{resp: resp, sentAt: cl.sentAt}
	if cl.posted {
		st.c.releaseAnswered(cl.release, a)
		return
	}
	if g := resp.GetAcquire().GetLease(); g != nil && cl.acquire {
		if abandoned {
			st.c.releaseOrphan(g.GetPool(), g.GetId())
			return
		}
		a.lease = st.c.newLease(g, cl.sentAt, time.Now())
	}
	if !abandoned {
		cl.ch <- a
	}
}

// live reports whether the link has a Session stream; c.mu is held.
func (ln *link) live() bool { return ln.cur != nil }

// idle reports whether no request waits for an answer on the stream.
func (st *stream) idle() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return len(st.pending) == 0
}

// fail marks the stream broken with err, answers every waiting call with
// it, and ends the gRPC stream.
func (st *stream) fail(err error) {
	st.mu.Lock()
	pending := st.pending
	st.pending, st.err = nil, err
	st.mu.Unlock()
	for _, cl := range pending {
		switch {
		case cl.posted:
			st.c.releaseAnswered(cl.release, answer{err: err})
		case !cl.abandoned:
			cl.ch <- answer{err: err}
		}
	}
	st.cancel(err)
}

// reset ends the stream (the session loop then reconnects).
func (st *stream) reset(cause error) { st.cancel(cause) }

// abandon ends a stream whose server does not answer, and makes the
// connection to that server start over, so that the next stream goes to a
// server that answers (servers.reconnect).
func (st *stream) abandon(cause error) {
	st.stuck.Do(func() {
		if st.server != "" {
			cause = fmt.Errorf("%w (server %s)", cause, st.server)
		}
		st.c.log.Warn("tollgate: server does not answer; moving to another", "err", cause)
		st.reset(cause)
		st.ln.stuck(st.server)
	})
}

// send sends one request. When a server that reads batches is sent to by
// many callers at once, their requests are coalesced: the caller that
// finds no send under way sends what is queued, in one message, until
// nothing is; the others only queue theirs. An error is returned only to
// the caller that met it; the stream is broken then, and its reader fails
// every request waiting on it.
func (st *stream) send(req *tollgatev1.SessionRequest) error {
	st.sendMu.Lock()
	if !st.batch {
		defer st.sendMu.Unlock()
		return st.ss.Send(req)
	}
	st.queue = append(st.queue, req)
	if st.sending {
		st.sendMu.Unlock()
		return nil
	}
	st.sending = true
	var err error
	for len(st.queue) > 0 && err == nil {
		reqs := st.queue // not reused: a stats handler may read a sent message later
		st.queue = nil
		st.sendMu.Unlock()
		err = st.sendBatch(reqs)
		st.sendMu.Lock()
	}
	if err != nil {
		st.queue = nil
	}
	st.sending = false
	st.sendMu.Unlock()
	return err
}

// maxBatch is the most requests sent in one message (the server's bound).
const maxBatch = 1024

// sendBatch sends reqs in as few messages as maxBatch allows.
func (st *stream) sendBatch(reqs []*tollgatev1.SessionRequest) error {
	for len(reqs) > 0 {
		n := min(len(reqs), maxBatch)
		msg := reqs[0]
		if n > 1 {
			msg = &tollgatev1.SessionRequest{Kind: &tollgatev1.SessionRequest_Batch{Batch: &tollgatev1.SessionRequestBatch{Requests: reqs[:n]}}}
		}
		if err := st.ss.Send(msg); err != nil {
			return err
		}
		reqs = reqs[n:]
	}
	return nil
}

// do sends req and waits for its answer, the stream's end, or ctx's end.
// When ctx ends first the request is abandoned (and cancelled on the
// server if o.cancellable) and ctx.Err() is returned; a lease granted to an
// abandoned acquire is released in the background.
func (st *stream) do(ctx context.Context, req *tollgatev1.SessionRequest, o op) (answer, error) {
	id := st.c.nextID.Add(1)
	req.RequestId = id
	cl := calls.Get().(*call)
	cl.acquire, cl.sentAt = o.acquire, time.Now()
	st.mu.Lock()
	if st.pending == nil {
		err := st.err
		st.mu.Unlock()
		putCall(cl)
		return answer{}, err
	}
	st.pending[id] = cl
	st.mu.Unlock()
	if err := st.send(req); err != nil {
		// The stream is broken; the reader notices and answers cl.
		st.reset(err)
	}
	rerouted, err := st.wait(ctx, cl, o.pool)
	if err == nil {
		return rerouted, rerouted.err
	}
	st.mu.Lock()
	_, waiting := st.pending[id]
	if waiting {
		cl.abandoned = true
	}
	st.mu.Unlock()
	if !waiting {
		// Answered (or failed) meanwhile: the answer is on its way; use it.
		a := <-cl.ch
		putCall(cl)
		return a, a.err
	}
	if o.cancellable {
		cancel := &tollgatev1.SessionRequest{RequestId: st.c.nextID.Add(1), Kind: &tollgatev1.SessionRequest_Cancel{Cancel: &tollgatev1.CancelRequest{RequestId: id}}}
		if err := st.send(cancel); err != nil {
			st.reset(err)
		}
	}
	if err == errRerouted {
		return answer{}, err
	}
	if o.resetOnDeadline && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		st.abandon(errors.New("a renew was not answered in time"))
	}
	return answer{}, ctx.Err()
}

// errRerouted is what a request sent on a server's link gets when its
// pool's shard was routed to another server before the answer came: it
// is abandoned there, and roundTrip sends it to the new owner.
var errRerouted = errors.New("tollgate: the pool's shard was routed to another server")

// wait waits for cl's answer (err nil) until ctx ends (its error) or, on
// a server's link, until pool's shard is routed to another server in a
// newer term (errRerouted): the server the request was sent to lost the
// shard, and may never answer (it died or is frozen). A planned move's
// target does not count: the owner answers until it hands off.
func (st *stream) wait(ctx context.Context, cl *call, pool string) (answer, error) {
	c := st.c
	_, sentEpoch := c.routeOf(pool)
	for {
		var moved <-chan struct{}
		if st.ln != c.main {
			moved = c.movedSignal()
			if ln, epoch := c.routeOf(pool); ln != nil && ln != st.ln && epoch > sentEpoch {
				return answer{}, errRerouted
			}
		}
		select {
		case a := <-cl.ch:
			putCall(cl)
			return a, nil
		case <-ctx.Done():
			return answer{}, ctx.Err()
		case <-moved:
		}
	}
}

// calls keeps the calls of do, each with its channel, for reuse: a call
// is put back once its answer was received, when nothing else refers to
// it (an abandoned call stays with its stream and is not reused).
var calls = sync.Pool{New: func() any { return &call{ch: make(chan answer, 1)} }}

// putCall returns an answered call of do to calls.
func putCall(cl *call) {
	*cl = call{ch: cl.ch}
	calls.Put(cl)
}

// post sends a release of lease k without waiting for its answer:
// releaseAnswered gets it, on the stream's reader (or when the stream
// breaks first, or at once when it is broken already). The request and
// its call are one allocation.
func (st *stream) post(k leaseKey) {
	p := &postedRelease{call: call{posted: true, release: k}}
	req := p.msg.build(k.pool, k.id)
	id := st.c.nextID.Add(1)
	req.RequestId = id
	st.mu.Lock()
	if st.pending == nil {
		err := st.err
		st.mu.Unlock()
		st.c.releaseAnswered(k, answer{err: err})
		return
	}
	st.pending[id] = &p.call // no sentAt: releaseAnswered needs none
	st.mu.Unlock()
	if err := st.send(req); err != nil {
		// The stream is broken; the reader notices and answers the call.
		st.reset(err)
	}
}

// postedRelease is a posted release and its call.
type postedRelease struct {
	msg  releaseMsg
	call call
}

// releaseOrphan releases, in the background, a lease granted to an acquire
// whose caller had gone away.
func (c *Client) releaseOrphan(pool, id string) {
	c.goBackground(func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, releaseTimeout)
		defer cancel()
		_, err := c.roundTrip(ctx, releaseOp(pool, id))
		c.log.Debug("tollgate: released a lease granted after its caller went away", "pool", pool, "lease_id", id, "err", err)
	})
}

// releaseOp is a release of lease id of pool.
func releaseOp(pool, id string) op {
	return op{pool: pool, build: func(int) (*tollgatev1.SessionRequest, error) {
		return new(releaseMsg).build(pool, id), nil
	}}
}

// releaseMsg is a release request, its oneof wrapper and its body side by
// side: one allocation.
type releaseMsg struct {
	req  tollgatev1.SessionRequest
	kind tollgatev1.SessionRequest_Release
	body tollgatev1.ReleaseRequest
}

// build fills m as a release of lease id of pool and returns the request.
func (m *releaseMsg) build(pool, id string) *tollgatev1.SessionRequest {
	m.body.Pool, m.body.LeaseId = pool, id
	m.kind.Release = &m.body
	m.req.Kind = &m.kind
	return &m.req
}
