package server

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/tollgate/tollgate/internal/limits"
	"github.com/tollgate/tollgate/internal/testwait"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// watchHealth opens a health Watch stream on e's connection and waits for
// its first answer.
func watchHealth(t *testing.T, e *env, ctx context.Context) (healthpb.Health_WatchClient, error) {
	t.Helper()
	w, err := healthpb.NewHealthClient(e.conn).Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return nil, err
	}
	if _, err := w.Recv(); err != nil {
		return nil, err
	}
	return w, nil
}

// One process cannot lock its host out: connections that made no call
// (raw TCP that never finished its handshake) and connections kept open
// only by health Watch streams give their place to a newcomer of the same
// address, so another client of the host is served although the address
// has --max-conns-per-ip connections open. (A newcomer was closed at
// once: every other process of the host got UNAVAILABLE.)
func TestConnsPerIPNoLockOut(t *testing.T) {
	const perIP = 6
	o := startOps(t, Config{Limits: limits.Limits{MaxConnsPerIP: perIP}}, nil)
	admin := o.env()
	admin.createPool(&tollgatev1.Pool{Name: "db", ConcurrencyLimit: 100})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// The flooding process: half its connections raw TCP, half busy
	// with a health Watch each; with the admin's, the address is full.
	var raw []net.Conn
	for range perIP / 2 {
		c, err := net.Dial("tcp", o.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		raw = append(raw, c)
	}
	for range perIP/2 - 1 {
		if _, err := watchHealth(t, o.env(), ctx); err != nil {
			t.Fatal(err)
		}
	}
	testwait.For(t, "the address to be full", func() bool { return o.srv.grpcConns.Open() == perIP })

	honest := o.env()
	for i := range 3 {
		l, err := honest.lim.Acquire(honest.ctx(), &tollgatev1.AcquireRequest{Pool: "db", NoWait: true})
		if err != nil {
			t.Fatalf("honest acquire %d with the address full of raw and watching connections: %v", i, err)
		}
		if _, err := honest.lim.Release(honest.ctx(), &tollgatev1.ReleaseRequest{Pool: "db", LeaseId: l.GetLease().GetId()}); err != nil {
			t.Fatal(err)
		}
	}
	if o.srv.grpcConns.Evicted() < 1 {
		t.Errorf("no connection gave its place")
	}
	// The raw connection that gave its place was the oldest.
	if err := raw[0].SetReadDeadline(time.Now().Add(waitLimit)); err != nil {
		t.Fatal(err)
	}
	if err := readToEnd(raw[0]); isTimeout(err) {
		t.Errorf("the oldest raw connection was not closed: %v", err)
	}
}

// readToEnd reads c (the server's preface first) until it fails, and
// returns the error.
func readToEnd(c net.Conn) error {
	buf := make([]byte, 4096)
	for {
		if _, err := c.Read(buf); err != nil {
			return err
		}
	}
}

// Every connection of an address making a call keeps its place: a
// newcomer past --max-conns-per-ip is closed at once.
func TestConnsPerIPBusyKeepPlace(t *testing.T) {
	o := startOps(t, Config{Limits: limits.Limits{MaxConnsPerIP: 2}}, nil)
	admin := o.env()
	admin.createPool(&tollgatev1.Pool{Name: "db", ConcurrencyLimit: 1})
	admin.acquire(&tollgatev1.AcquireRequest{Pool: "db"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for _, e := range []*env{admin, o.env()} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = e.lim.Acquire(ctx, &tollgatev1.AcquireRequest{Pool: "db"}) // waits until cancel
		}()
	}
	testwait.For(t, "both acquires to wait", func() bool { return admin.status("db").GetWaiting() == 2 })
	excess, err := net.Dial("tcp", o.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer excess.Close()
	if err := excess.SetReadDeadline(time.Now().Add(waitLimit)); err != nil {
		t.Fatal(err)
	}
	if err := readToEnd(excess); isTimeout(err) {
		t.Fatalf("the connection past the limit is open (%v); want it closed", err)
	}
	if n := o.srv.quotas.Refused(limits.KindConnsPerIP); n < 1 {
		t.Errorf("refused connections counted %d, want at least 1", n)
	}
}

// A connection with only health Watch streams in progress is closed once
// idle for the idle time, as one with nothing in progress is (the watches
// kept it open for ever).
func TestWatchOnlyConnClosedWhenIdle(t *testing.T) {
	o := startOps(t, Config{}, nil)
	now := time.Now()
	var mu sync.Mutex
	o.srv.grpcConns.SetClock(func() time.Time { mu.Lock(); defer mu.Unlock(); return now })
	e := o.env()
	w, err := watchHealth(t, e, context.Background())
	if err != nil {
		t.Fatal(err)
	}
	o.srv.grpcConns.Sweep()
	mu.Lock()
	now = now.Add(idleConnTimeout)
	mu.Unlock()
	o.srv.grpcConns.Sweep()
	if _, err := w.Recv(); status.Code(err) != codes.Unavailable {
		t.Fatalf("the watch of an idle connection got %v; want UNAVAILABLE (closed)", err)
	}
}

// Health Watch streams count like any other stream: against the streams
// of one client (one connection, without authentication), of one
// address, and in all; and one connection has at most --max-conn-streams
// in progress. (50,000 Watch streams over 2 connections took 643 MB.)
func TestHealthWatchesCounted(t *testing.T) {
	o := startOps(t, Config{Limits: limits.Limits{MaxClientSessions: 3, MaxStreamsPerIP: 5, MaxStreams: 100}}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e := o.env()
	for range 3 {
		if _, err := watchHealth(t, e, ctx); err != nil {
			t.Fatal(err)
		}
	}
	_, err := watchHealth(t, e, ctx)
	wantStatus(t, err, codes.ResourceExhausted, "CLIENT_SESSION_LIMIT")
	e2 := o.env()
	for range 2 {
		if _, err := watchHealth(t, e2, ctx); err != nil {
			t.Fatal(err)
		}
	}
	_, err = watchHealth(t, e2, ctx)
	st := wantStatus(t, err, codes.ResourceExhausted, "CLIENT_SESSION_LIMIT")
	if !strings.Contains(st.Message(), "--max-streams-per-ip") {
		t.Errorf("message %q does not name --max-streams-per-ip", st.Message())
	}

	o2 := startOps(t, Config{Limits: limits.Limits{MaxConnStreams: 2, MaxClientSessions: 100}}, nil)
	e3 := o2.env()
	for range 2 {
		if _, err := watchHealth(t, e3, ctx); err != nil {
			t.Fatal(err)
		}
	}
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancelShort()
	if _, err := watchHealth(t, e3, short); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("a third stream on a connection allowing 2: %v; want it to wait (DEADLINE_EXCEEDED)", err)
	}
}

// The HTTP listener has its own connection limits: past
// --http-max-conns-per-ip, a newcomer takes the place of its address's
// oldest connection that is not in a request (an idle keep-alive, or one
// that has not sent a whole request), and the address never holds more.
// (It had no limit: 19,990 keep-alive connections took every file
// descriptor, and every new gRPC client failed.)
func TestHTTPConnLimits(t *testing.T) {
	srv := New(Config{Logger: discardLogger(), Limits: limits.Limits{MaxHTTPConnsPerIP: 3}})
	defer srv.closeEngine()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: srv.HTTPHandler(), ReadHeaderTimeout: time.Minute}
	go func() { _ = hs.Serve(srv.LimitHTTP(hs, lis)) }()
	defer hs.Close()
	addr := lis.Addr().String()

	get := func(c net.Conn) error {
		if _, err := c.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
			return err
		}
		_ = c.SetReadDeadline(time.Now().Add(waitLimit))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	var conns []net.Conn
	for i := range 5 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := get(c); err != nil {
			t.Fatalf("keep-alive connection %d: %v", i, err)
		}
		// The server marks a connection idle just after it has sent the
		// answer the client read: wait for that, so that the newcomers
		// find every connection before them idle.
		testwait.For(t, "the connections to be idle", func() bool { return srv.httpConns.Idle() == srv.httpConns.Open() })
		conns = append(conns, c)
		if n := srv.httpConns.Open(); n > 3 {
			t.Fatalf("%d connections open from one address; want at most 3", n)
		}
	}
	for i, c := range conns[:2] {
		if err := get(c); err == nil {
			t.Errorf("connection %d, among the oldest idle ones, was served after newcomers took its place", i)
		}
	}
	if n := srv.httpConns.Evicted(); n != 2 {
		t.Errorf("%d connections gave their place; want 2", n)
	}
}
