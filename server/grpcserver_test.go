package server

import (
	"context"
	"errors"
	"net"
	"sort"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/tollgate/tollgate/internal/testwait"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/limiter/fakeclock"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

func TestHealthAndReflection(t *testing.T) {
	e := newEnv(t)
	hc := healthpb.NewHealthClient(e.conn)
	for _, svc := range []string{"", "tollgate.v1.LimiterService", "tollgate.v1.AdminService"} {
		resp, err := hc.Check(e.ctx(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health of %q = %v, %v", svc, resp, err)
		}
	}

	rc, err := reflectionpb.NewServerReflectionClient(e.conn).ServerReflectionInfo(e.ctx())
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	resp, err := rc.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	sort.Strings(names)
	got := strings.Join(names, ",")
	for _, want := range []string{"tollgate.v1.AdminService", "tollgate.v1.LimiterService", "grpc.health.v1.Health"} {
		if !strings.Contains(got, want) {
			t.Errorf("reflection lists %s; %s is missing", got, want)
		}
	}
}

// Shutdown ends sessions with UNAVAILABLE, cuts off calls still waiting
// after the shutdown timeout, and Serve returns nil.
func TestServeShutdown(t *testing.T) {
	e, stop, done := startStoppable(t, 200*time.Millisecond)
	srv, lim := e.srv, e.lim
	e.createPool(&tollgatev1.Pool{Name: "db", ConcurrencyLimit: 1})
	s := e.session()
	s.call(acquireReq(1, &tollgatev1.AcquireRequest{Pool: "db"}))
	waitErr := make(chan error, 1)
	go func() {
		_, err := lim.Acquire(context.Background(), &tollgatev1.AcquireRequest{Pool: "db"})
		waitErr <- err
	}()
	testwait.For(t, "the acquire to wait", func() bool { return e.status("db").GetWaiting() == 1 })

	start := time.Now()
	stop()
	wantStatus(t, s.wantEnd(), codes.Unavailable, apierr.ReasonShuttingDown)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve = %v", err)
		}
	case <-time.After(waitLimit):
		t.Fatal("Serve did not return")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("shutdown took %v with a 200ms bound", d)
	}
	if err := <-waitErr; err == nil {
		t.Fatal("the waiting acquire was granted during shutdown")
	}
	if _, err := srv.Engine().GetPool("db"); !errors.Is(err, apierr.ErrShuttingDown) {
		t.Fatalf("engine after Serve: %v, want it closed", err)
	}
}

// failingStream is a Session server stream whose Send always fails, as
// when the client is gone but the server has not noticed yet.
type failingStream struct {
	grpc.ServerStream
	ctx  context.Context
	reqs chan *tollgatev1.SessionRequest
}

func (f *failingStream) Context() context.Context { return f.ctx }
func (f *failingStream) Send(*tollgatev1.SessionResponse) error {
	return status.Error(codes.Unavailable, "transport is closing")
}
func (f *failingStream) Recv() (*tollgatev1.SessionRequest, error) {
	select {
	case r := <-f.reqs:
		return r, nil
	case <-f.ctx.Done():
		return nil, f.ctx.Err()
	}
}
func (f *failingStream) SetHeader(metadata.MD) error  { return nil }
func (f *failingStream) SendHeader(metadata.MD) error { return nil }
func (f *failingStream) SetTrailer(metadata.MD)       {}

// A grant whose answer cannot be sent is released at once.
func TestSessionUndeliveredGrantIsReleased(t *testing.T) {
	srv := New(Config{Clock: fakeclock.New(testStart)})
	defer srv.Close()
	if _, err := srv.Engine().CreatePool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: 1}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fs := &failingStream{ctx: ctx, reqs: make(chan *tollgatev1.SessionRequest, 1)}
	fs.reqs <- acquireReq(1, &tollgatev1.AcquireRequest{Pool: "db"})
	if err := srv.limiterSvc.Session(fs); status.Code(err) != codes.Unavailable {
		t.Fatalf("Session = %v", err)
	}
	info, err := srv.Engine().GetPool("db")
	if err != nil {
		t.Fatal(err)
	}
	if info.Status.Granted != 1 || info.Status.Held != 0 || info.Status.Leases != 0 {
		t.Fatalf("status = %+v; the undelivered lease should have been released", info.Status)
	}
}

// startStoppable serves a server with a fake clock and the given shutdown
// timeout, for tests that stop it themselves with stop and read Serve's
// result from done.
func startStoppable(t *testing.T, shutdown time.Duration) (e *env, stop context.CancelFunc, done chan error) {
	t.Helper()
	fc := fakeclock.New(testStart)
	srv := New(Config{Clock: fc, ShutdownTimeout: shutdown})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	done = make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis) }()
	conn := dial(t, lis.Addr().String())
	t.Cleanup(func() { conn.Close() })
	e = &env{t: t, srv: srv, clock: fc, conn: conn, lim: tollgatev1.NewLimiterServiceClient(conn), adm: tollgatev1.NewAdminServiceClient(conn)}
	return e, stop, done
}
