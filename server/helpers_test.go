package server

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tollgate/tollgate/limiter/fakeclock"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// testStart is the fake clock's start.
var testStart = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// waitLimit bounds every wait of the tests.
const waitLimit = 10 * time.Second

// env is a server on a loopback port, with a fake clock and clients.
type env struct {
	t     *testing.T
	srv   *Server
	clock *fakeclock.Clock
	addr  string
	conn  *grpc.ClientConn
	lim   tollgatev1.LimiterServiceClient
	adm   tollgatev1.AdminServiceClient
	stop  context.CancelFunc
	done  chan error
}

// newEnv starts a server with a fake clock; it stops at the end of the test.
func newEnv(t *testing.T, dialOpts ...grpc.DialOption) *env {
	t.Helper()
	fc := fakeclock.New(testStart)
	srv := New(Config{Clock: fc, ShutdownTimeout: 2 * time.Second})
	return startEnv(t, srv, fc, dialOpts...)
}

func startEnv(t *testing.T, srv *Server, fc *fakeclock.Clock, dialOpts ...grpc.DialOption) *env {
	t.Helper()
	return serveEnv(t, srv, fc, listen(t), dialOpts...)
}

// listen listens on a loopback port.
func listen(t *testing.T) net.Listener {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return lis
}

// serveEnv serves srv on lis until the end of the test.
func serveEnv(t *testing.T, srv *Server, fc *fakeclock.Clock, lis net.Listener, dialOpts ...grpc.DialOption) *env {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	e := &env{t: t, srv: srv, clock: fc, addr: lis.Addr().String(), stop: cancel, done: make(chan error, 1)}
	go func() { e.done <- srv.Serve(ctx, lis) }()
	e.conn = dial(t, e.addr, dialOpts...)
	e.lim = tollgatev1.NewLimiterServiceClient(e.conn)
	e.adm = tollgatev1.NewAdminServiceClient(e.conn)
	t.Cleanup(func() {
		e.conn.Close()
		cancel()
		select {
		case err := <-e.done:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(waitLimit):
			t.Errorf("Serve did not return after its context ended")
		}
	})
	return e
}

func dial(t *testing.T, addr string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	opts = append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return conn
}

// ctx returns a context bounded by waitLimit.
func (e *env) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	e.t.Cleanup(cancel)
	return ctx
}

// createPool creates a pool or fails the test.
func (e *env) createPool(p *tollgatev1.Pool) *tollgatev1.Pool {
	e.t.Helper()
	resp, err := e.adm.CreatePool(e.ctx(), &tollgatev1.CreatePoolRequest{Pool: p})
	if err != nil {
		e.t.Fatalf("CreatePool(%v): %v", p, err)
	}
	return resp.GetPool()
}

// status returns a pool's live status or fails the test.
func (e *env) status(name string) *tollgatev1.PoolStatus {
	e.t.Helper()
	resp, err := e.adm.GetPool(e.ctx(), &tollgatev1.GetPoolRequest{Name: name})
	if err != nil {
		e.t.Fatalf("GetPool(%q): %v", name, err)
	}
	return resp.GetStatus()
}

// acquire acquires a lease or fails the test.
func (e *env) acquire(req *tollgatev1.AcquireRequest) *tollgatev1.Lease {
	e.t.Helper()
	resp, err := e.lim.Acquire(e.ctx(), req)
	if err != nil {
		e.t.Fatalf("Acquire(%v): %v", req, err)
	}
	return resp.GetLease()
}

// wantStatus checks that err is a status with code and an ErrorInfo of
// domain tollgate.dev and reason; it returns the status.
func wantStatus(t *testing.T, err error, code codes.Code, reason apierr.Reason) *status.Status {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %v %s", code, reason)
	}
	st, ok := status.FromError(err)
	if !ok {
		t.Fatalf("error %v is not a status", err)
	}
	if st.Code() != code {
		t.Fatalf("code = %v (%q), want %v", st.Code(), st.Message(), code)
	}
	if st.Message() == "" {
		t.Fatalf("status %v has no message", st)
	}
	info := errorInfo(st)
	if info == nil {
		t.Fatalf("status %v has no ErrorInfo", st)
	}
	if info.GetDomain() != ErrorDomain || info.GetReason() != string(reason) {
		t.Fatalf("ErrorInfo = %v, want domain %s reason %s (message %q)", info, ErrorDomain, reason, st.Message())
	}
	return st
}

func errorInfo(st *status.Status) *errdetails.ErrorInfo {
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info
		}
	}
	return nil
}

// retryDelay returns the RetryInfo delay of err, if it has one.
func retryDelay(err error) (time.Duration, bool) {
	st, _ := status.FromError(err)
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.GetRetryDelay().AsDuration(), true
		}
	}
	return 0, false
}

func dur(d time.Duration) *durationpb.Duration { return durationpb.New(d) }

func i64(v int64) *int64 { return &v }

// sessionClient drives a Session stream; a goroutine receives into resps.
type sessionClient struct {
	t      *testing.T
	stream tollgatev1.LimiterService_SessionClient
	cancel context.CancelFunc
	resps  chan *tollgatev1.SessionResponse
	end    chan error // the stream's final error (io.EOF for OK)
}

func (e *env) session() *sessionClient {
	return e.sessionOn(e.lim)
}

func (e *env) sessionOn(lim tollgatev1.LimiterServiceClient) *sessionClient {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := lim.Session(ctx)
	if err != nil {
		cancel()
		e.t.Fatal(err)
	}
	c := &sessionClient{t: e.t, stream: stream, cancel: cancel, resps: make(chan *tollgatev1.SessionResponse, 100000), end: make(chan error, 1)}
	go func() {
		for {
			r, err := stream.Recv()
			if err != nil {
				c.end <- err
				return
			}
			c.resps <- r
		}
	}()
	e.t.Cleanup(cancel)
	return c
}

func (c *sessionClient) send(r *tollgatev1.SessionRequest) {
	c.t.Helper()
	if err := c.stream.Send(r); err != nil {
		c.t.Fatalf("Send(%v): %v", r, err)
	}
}

// next returns the next message, failing the test if none comes.
func (c *sessionClient) next() *tollgatev1.SessionResponse {
	c.t.Helper()
	select {
	case r := <-c.resps:
		return r
	case err := <-c.end:
		c.end <- err // for wantEnd
		// The receiver queues every message before the end.
		select {
		case r := <-c.resps:
			return r
		default:
		}
		c.t.Fatalf("stream ended while a message was expected: %v", err)
	case <-time.After(waitLimit):
		c.t.Fatalf("no message within %v", waitLimit)
	}
	return nil
}

// expectNone checks that no message is queued now. Messages the server has
// sent may still be in flight: callers make sure a later answer they have
// already received would have come after.
func (c *sessionClient) expectNone() {
	c.t.Helper()
	select {
	case r := <-c.resps:
		c.t.Fatalf("unexpected message %v", r)
	default:
	}
}

// wantEnd waits for the stream to end and returns its final error.
func (c *sessionClient) wantEnd() error {
	c.t.Helper()
	select {
	case err := <-c.end:
		return err
	case <-time.After(waitLimit):
		c.t.Fatalf("stream did not end within %v", waitLimit)
	}
	return nil
}

// call sends a request and waits for its answer; other messages that
// arrive first fail the test.
func (c *sessionClient) call(r *tollgatev1.SessionRequest) *tollgatev1.SessionResponse {
	c.t.Helper()
	c.send(r)
	resp := c.next()
	if resp.GetRequestId() != r.GetRequestId() {
		c.t.Fatalf("got %v, want the answer to request %d", resp, r.GetRequestId())
	}
	return resp
}

func wantSessionError(t *testing.T, r *tollgatev1.SessionResponse, code codes.Code, reason apierr.Reason) {
	t.Helper()
	se := r.GetError()
	if se == nil {
		t.Fatalf("got %v, want a SessionError %v %s", r, code, reason)
	}
	if codes.Code(se.GetCode()) != code || se.GetReason() != string(reason) || se.GetMessage() == "" {
		t.Fatalf("SessionError = %v, want code %v reason %s and a message", se, code, reason)
	}
}

func acquireReq(id uint64, a *tollgatev1.AcquireRequest) *tollgatev1.SessionRequest {
	return &tollgatev1.SessionRequest{RequestId: id, Kind: &tollgatev1.SessionRequest_Acquire{Acquire: a}}
}

func releaseReq(id uint64, pool, leaseID string) *tollgatev1.SessionRequest {
	return &tollgatev1.SessionRequest{RequestId: id, Kind: &tollgatev1.SessionRequest_Release{Release: &tollgatev1.ReleaseRequest{Pool: pool, LeaseId: leaseID}}}
}

func renewReq(id uint64, pool, leaseID string, ttl time.Duration) *tollgatev1.SessionRequest {
	r := &tollgatev1.RenewRequest{Pool: pool, LeaseId: leaseID}
	if ttl != 0 {
		r.Ttl = dur(ttl)
	}
	return &tollgatev1.SessionRequest{RequestId: id, Kind: &tollgatev1.SessionRequest_Renew{Renew: r}}
}

func takeReq(id uint64, t *tollgatev1.TakeRequest) *tollgatev1.SessionRequest {
	return &tollgatev1.SessionRequest{RequestId: id, Kind: &tollgatev1.SessionRequest_Take{Take: t}}
}

func cancelReq(id, target uint64) *tollgatev1.SessionRequest {
	return &tollgatev1.SessionRequest{RequestId: id, Kind: &tollgatev1.SessionRequest_Cancel{Cancel: &tollgatev1.CancelRequest{RequestId: target}}}
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// tokenOf returns the fencing token part of a holder's lease id, as
// events and logs name the lease.
func tokenOf(id string) string {
	tok, _, _ := strings.Cut(id, ".")
	return tok
}
