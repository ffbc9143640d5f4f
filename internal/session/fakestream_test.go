package session

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/holder"
	"github.com/tollgate/tollgate/internal/leaseid"
	"github.com/tollgate/tollgate/internal/limits"
	"github.com/tollgate/tollgate/internal/metrics"
	"github.com/tollgate/tollgate/internal/term"
	"github.com/tollgate/tollgate/limiter"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// fakeStream is a Session stream with no network: the test sends requests
// into in (closing it is the client's half-close) and reads answers from
// out.
type fakeStream struct {
	grpc.ServerStream // nil: only the methods below are called
	ctx               context.Context
	in                chan *tollgatev1.SessionRequest
	out               chan *tollgatev1.SessionResponse
}

func (f *fakeStream) Context() context.Context { return f.ctx }

func (f *fakeStream) Recv() (*tollgatev1.SessionRequest, error) {
	select {
	case r, ok := <-f.in:
		if !ok {
			return nil, io.EOF
		}
		return r, nil
	case <-f.ctx.Done():
		return nil, f.ctx.Err()
	}
}

func (f *fakeStream) Send(r *tollgatev1.SessionResponse) error {
	select {
	case f.out <- r:
		return nil
	case <-f.ctx.Done():
		return f.ctx.Err()
	}
}

// fakeHost is a standalone server of one term that leads and never
// drains.
type fakeHost struct {
	draining chan struct{}
	term     *term.Term
	clock    limiter.Clock
}

func (h fakeHost) Draining() <-chan struct{}       { return h.draining }
func (h fakeHost) Term(string) (*term.Term, error) { return h.term, nil }
func (fakeHost) Idle() <-chan struct{}             { return nil }
func (fakeHost) NotLeader(string) error            { return errors.New("not the leader") }
func (h fakeHost) Now() time.Time                  { return h.clock.Now() }

// streamEnv is one Session stream served by Streams.Serve over a
// fakeStream, on an engine of its own.
type streamEnv struct {
	e      *limiter.Engine
	calls  *holder.Calls
	stream *fakeStream
	served chan struct{} // closed when Serve returns
	err    error         // what Serve returned
	cancel context.CancelFunc
}

// newStreamEnv serves one stream on a new engine with clock c (nil: the
// system clock) and the given pools. Cleanup ends the stream and closes
// the engine.
func newStreamEnv(tb testing.TB, c limiter.Clock, pools ...limiter.PoolConfig) *streamEnv {
	tb.Helper()
	var streams Streams
	e := limiter.New(limiter.Options{Clock: c, OnLeaseEnded: LeaseEnded})
	for _, pc := range pools {
		if _, err := e.CreatePool(pc); err != nil {
			tb.Fatal(err)
		}
	}
	lim := limits.Limits{}.WithDefaults()
	a := auth.New(nil)
	tm, err := term.New(0, nil, func(func() bool) (*limiter.Engine, error) { return e, nil })
	if err != nil {
		tb.Fatal(err)
	}
	tm.Begin()
	calls := &holder.Calls{
		Auth:    func() *auth.Authorizer { return a },
		Quotas:  limits.New(lim),
		Limits:  lim,
		Metrics: metrics.New(nil, KindNames[:], -1),
		IDs:     leaseid.New([]byte("0123456789abcdef0123456789abcdef")),
		Log:     slog.New(slog.DiscardHandler),
	}
	streams.Host, streams.Calls, streams.MaxUnread = fakeHost{draining: make(chan struct{}), term: tm, clock: e.Clock()}, calls, DefaultMaxUnread
	streams.MaxEvents.Store(DefaultMaxEvents)
	ctx, cancel := context.WithCancel(context.Background())
	env := &streamEnv{
		e: e, calls: calls, cancel: cancel, served: make(chan struct{}),
		stream: &fakeStream{ctx: ctx, in: make(chan *tollgatev1.SessionRequest, 64), out: make(chan *tollgatev1.SessionResponse, 4096)},
	}
	var unread atomic.Int64
	go func() {
		env.err = streams.Serve(env.stream, &unread)
		close(env.served)
	}()
	tb.Cleanup(func() {
		cancel()
		<-env.served
		e.Close()
	})
	return env
}

// send sends one request.
func (env *streamEnv) send(r *tollgatev1.SessionRequest) { env.stream.in <- r }

// next returns the next answer or event, failing after a minute (a hang).
func (env *streamEnv) next(tb testing.TB) *tollgatev1.SessionResponse {
	tb.Helper()
	select {
	case r := <-env.stream.out:
		return r
	case <-time.After(time.Minute):
		tb.Fatal("no answer within a minute")
		return nil
	}
}

func acquireReq(id uint64, pool string) *tollgatev1.SessionRequest {
	return &tollgatev1.SessionRequest{RequestId: id, Kind: &tollgatev1.SessionRequest_Acquire{Acquire: &tollgatev1.AcquireRequest{Pool: pool}}}
}

func releaseReq(id uint64, pool, leaseID string) *tollgatev1.SessionRequest {
	return &tollgatev1.SessionRequest{RequestId: id, Kind: &tollgatev1.SessionRequest_Release{Release: &tollgatev1.ReleaseRequest{Pool: pool, LeaseId: leaseID}}}
}
