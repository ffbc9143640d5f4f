package server

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/events"
	"github.com/tollgate/tollgate/internal/testwait"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// watch opens a WatchEvents stream and waits until the server has
// subscribed it, so that events recorded afterwards reach it.
func (e *env) watch(ctx context.Context, req *tollgatev1.WatchEventsRequest) grpc.ServerStreamingClient[tollgatev1.WatchEventsResponse] {
	e.t.Helper()
	before := e.srv.events.NumWatchers()
	st, err := e.adm.WatchEvents(ctx, req)
	if err != nil {
		e.t.Fatalf("WatchEvents: %v", err)
	}
	testwait.For(e.t, "the watch to be subscribed", func() bool { return e.srv.events.NumWatchers() > before })
	return st
}

// recvEvent receives one event or fails the test.
func recvEvent(t *testing.T, st grpc.ServerStreamingClient[tollgatev1.WatchEventsResponse]) *tollgatev1.PoolEvent {
	t.Helper()
	resp, err := st.Recv()
	if err != nil {
		t.Fatalf("Recv: %v", err)
	}
	return resp.GetEvent()
}

// With include_recent the kept events come first, oldest first; then the
// events recorded after the watch started arrive as they happen.
func TestWatchEventsRecentThenLive(t *testing.T) {
	e := newEnv(t)
	e.createPool(&tollgatev1.Pool{Name: "a", ConcurrencyLimit: 1})
	e.createPool(&tollgatev1.Pool{Name: "b", ConcurrencyLimit: 1})
	st := e.watch(e.ctx(), &tollgatev1.WatchEventsRequest{IncludeRecent: true})
	for _, want := range []string{"a", "b"} {
		if ev := recvEvent(t, st); ev.GetType() != events.PoolCreated || ev.GetPool() != want {
			t.Fatalf("recent event = %v, want pool_created %s", ev, want)
		}
	}
	e.createPool(&tollgatev1.Pool{Name: "c", ConcurrencyLimit: 2})
	ev := recvEvent(t, st)
	if ev.GetType() != events.PoolCreated || ev.GetPool() != "c" || ev.GetSeq() != 3 || !ev.GetTime().AsTime().Equal(testStart) ||
		!strings.Contains(ev.GetDetail(), "concurrency_limit") {
		t.Fatalf("live event = %v", ev)
	}
	lease := e.acquire(&tollgatev1.AcquireRequest{Pool: "c", ClientId: "w1", Description: "job"})
	if _, err := e.adm.RevokeLease(e.ctx(), &tollgatev1.RevokeLeaseRequest{Pool: "c", LeaseId: lease.GetId(), Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	ev = recvEvent(t, st)
	if ev.GetType() != events.LeaseRevoked || ev.GetLeaseId() != tokenOf(lease.GetId()) || ev.GetClientId() != "w1" || ev.GetDescription() != "job" {
		t.Fatalf("lease event = %v", ev)
	}
}

// A pool filter passes only that pool's events, recent and live; without
// include_recent, nothing from before the watch is sent.
func TestWatchEventsPoolFilter(t *testing.T) {
	e := newEnv(t)
	e.createPool(&tollgatev1.Pool{Name: "a", ConcurrencyLimit: 1})
	e.createPool(&tollgatev1.Pool{Name: "b", ConcurrencyLimit: 1})
	recent := e.watch(e.ctx(), &tollgatev1.WatchEventsRequest{Pool: "b", IncludeRecent: true})
	live := e.watch(e.ctx(), &tollgatev1.WatchEventsRequest{Pool: "b"})
	if _, err := e.adm.DeletePool(e.ctx(), &tollgatev1.DeletePoolRequest{Name: "a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.adm.DeletePool(e.ctx(), &tollgatev1.DeletePoolRequest{Name: "b"}); err != nil {
		t.Fatal(err)
	}
	if ev := recvEvent(t, recent); ev.GetType() != events.PoolCreated || ev.GetPool() != "b" {
		t.Fatalf("first event of the recent watch = %v", ev)
	}
	for _, st := range []grpc.ServerStreamingClient[tollgatev1.WatchEventsResponse]{recent, live} {
		if ev := recvEvent(t, st); ev.GetType() != events.PoolDeleted || ev.GetPool() != "b" {
			t.Fatalf("live event = %v, want pool_deleted b", ev)
		}
	}

	st, err := e.adm.WatchEvents(e.ctx(), &tollgatev1.WatchEventsRequest{Pool: "bad name"})
	if err == nil {
		_, err = st.Recv()
	}
	wantStatus(t, err, codes.InvalidArgument, apierr.ReasonInvalidArgument)
}

// A watcher that does not read is ended with RESOURCE_EXHAUSTED once its
// buffer is full; recording never waits for it.
func TestWatchEventsSlowWatcherIsCutOff(t *testing.T) {
	e := newEnv(t)
	e.srv.events.SetWatchBuffer(2)
	st := e.watch(e.ctx(), &tollgatev1.WatchEventsRequest{})
	// The handler drains its buffer into the transport until flow control
	// stops it; big events fill that quickly.
	detail := strings.Repeat("x", 4096)
	for i := 0; e.srv.events.NumWatchers() > 0; i++ {
		if i > 1_000_000 {
			t.Fatal("the watcher that does not read was never cut off")
		}
		e.srv.recordEvent(events.Event{Type: events.PoolUpdated, Pool: "p", Detail: detail})
	}
	var err error
	for err == nil {
		_, err = st.Recv()
	}
	s := wantStatus(t, err, codes.ResourceExhausted, ReasonWatchOverflow)
	if !strings.Contains(s.Message(), "reconnect") {
		t.Fatalf("message %q does not say to reconnect", s.Message())
	}
}

// Cancelling the call ends the watch and unsubscribes it.
func TestWatchEventsCancel(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(e.ctx())
	st := e.watch(ctx, &tollgatev1.WatchEventsRequest{})
	cancel()
	if _, err := st.Recv(); status.Code(err) != codes.Canceled {
		t.Fatalf("Recv after cancel: %v, want Canceled", err)
	}
	testwait.For(t, "the watcher to be unsubscribed", func() bool { return e.srv.events.NumWatchers() == 0 })
}

// Shutdown ends watches with UNAVAILABLE (SHUTTING_DOWN).
func TestWatchEventsShutdown(t *testing.T) {
	e := newEnv(t)
	st := e.watch(e.ctx(), &tollgatev1.WatchEventsRequest{})
	e.stop()
	_, err := st.Recv()
	wantStatus(t, err, codes.Unavailable, apierr.ReasonShuttingDown)
}

// WatchEvents is an admin call: without the admin token it is refused.
func TestWatchEventsNeedsAdmin(t *testing.T) {
	const tok = "0123456789abcdef-admin-token"
	o := startOps(t, Config{Auth: &auth.Config{AdminToken: tok}}, nil)
	anon := o.env()
	st, err := anon.adm.WatchEvents(anon.ctx(), &tollgatev1.WatchEventsRequest{})
	if err == nil {
		_, err = st.Recv()
	}
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("WatchEvents without a token: %v, want Unauthenticated", err)
	}
	admin := o.env(withToken(tok))
	w := admin.watch(admin.ctx(), &tollgatev1.WatchEventsRequest{})
	admin.createPool(&tollgatev1.Pool{Name: "db", ConcurrencyLimit: 1})
	if ev := recvEvent(t, w); ev.GetPool() != "db" || ev.GetActor() == "" {
		t.Fatalf("event = %v", ev)
	}
}
