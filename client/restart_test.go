package client_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/tollgate/tollgate/client"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
	"github.com/tollgate/tollgate/server"
)

// durableServer serves a data directory on addr until stopped.
type durableServer struct {
	srv  *server.Server
	addr string
	stop func()
}

func startDurable(t *testing.T, dir, addr string) *durableServer {
	t.Helper()
	seed := []limiter.PoolConfig{{Name: "db", ConcurrencyLimit: 1, DefaultLeaseTTL: 3 * time.Second, MaxLeaseTTL: 3 * time.Second}}
	srv, err := server.Open(server.Config{ShutdownTimeout: time.Second}, dir, seed)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		srv.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ctx, lis)
	}()
	ds := &durableServer{srv: srv, addr: lis.Addr().String()}
	ds.stop = func() {
		cancel()
		<-done
	}
	t.Cleanup(ds.stop)
	return ds
}

// TestLeaseReattachesAfterServerRestart: a lease held across a restart of
// its server is renewed on the new server by itself, which re-adopts it
// (its renews carry its weight), so the holder never loses it.
func TestLeaseReattachesAfterServerRestart(t *testing.T) {
	dir := t.TempDir()
	first := startDurable(t, dir, "127.0.0.1:0")
	c, err := client.Dialer{ClientID: "holder"}.Dial(first.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	l, err := c.Acquire(ctx, "db", client.WithDescription("job"))
	if err != nil {
		t.Fatal(err)
	}

	first.stop() // leases are not released: they are soft state
	second := startDurable(t, dir, first.addr)
	deadline := time.Now().Add(waitLimit)
	for {
		info, err := second.srv.Engine().GetPool("db")
		if err != nil {
			t.Fatal(err)
		}
		if info.Status.Readopted == 1 {
			if info.Status.Held != 1 || info.Status.RecoveringUntil.IsZero() {
				t.Fatalf("after the re-adoption: %+v", info.Status)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the lease was not re-adopted within %v: %+v", waitLimit, info.Status)
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case <-l.Done():
		t.Fatalf("the lease was lost across the restart: %v", l.Err())
	default:
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("release on the restarted server: %v", err)
	}
	if info, _ := second.srv.Engine().GetPool("db"); info.Status.Held != 0 {
		t.Fatalf("after the release: %+v", info.Status)
	}
}

// TestTryAcquireDuringRecoveryFailsFast: while a restarted server's pool is
// in its recovery window, TryAcquire is answered RECOVERING at once (it is
// an answer about the pool, not an unreachable server to wait for).
func TestTryAcquireDuringRecoveryFailsFast(t *testing.T) {
	dir := t.TempDir()
	first := startDurable(t, dir, "127.0.0.1:0")
	c, err := client.Dialer{ClientID: "holder"}.Dial(first.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if _, err := c.Acquire(ctx, "db"); err != nil { // moves the lease horizon ahead
		t.Fatal(err)
	}
	first.stop()
	second := startDurable(t, dir, first.addr)
	if info, _ := second.srv.Engine().GetPool("db"); info.Status.RecoveringUntil.IsZero() {
		t.Fatalf("the restarted pool is not recovering: %+v", info.Status)
	}
	other, err := client.Dialer{ClientID: "other"}.Dial(second.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	_, err = other.TryAcquire(ctx, "db")
	if !errors.Is(err, apierr.ErrRecovering) {
		t.Fatalf("TryAcquire during recovery = %v; want ErrRecovering", err)
	}
	var e *client.Error
	if !errors.As(err, &e) || e.RetryAfter <= 0 {
		t.Fatalf("RECOVERING carries no retry delay: %#v", err)
	}
}

// TestActiveLeaseReattachesOnItsInstances: a lease of an active pool held
// across a restart is re-adopted on the instances it was granted (its
// renews name them), and the pool's instances, stored with it, are back.
func TestActiveLeaseReattachesOnItsInstances(t *testing.T) {
	dir := t.TempDir()
	first := startDurable(t, dir, "127.0.0.1:0")
	eng := first.srv.Engine()
	if _, err := eng.CreatePool(limiter.PoolConfig{Name: "conns", ResourceKind: limiter.ResourceActive, DefaultLeaseTTL: 3 * time.Second, MaxLeaseTTL: 3 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.AddResources("conns", []limiter.Resource{{ID: "c1"}, {ID: "c2"}, {ID: "c3"}}); err != nil {
		t.Fatal(err)
	}
	c, err := client.Dialer{ClientID: "holder"}.Dial(first.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	l, err := c.Acquire(ctx, "conns", client.WithWeight(2))
	if err != nil {
		t.Fatal(err)
	}
	held := map[string]bool{}
	for _, r := range l.Resources() {
		held[r.ID] = true
	}

	first.stop()
	second := startDurable(t, dir, first.addr)
	waitFor(t, "the re-adoption", func() bool {
		info, err := second.srv.Engine().GetPool("conns")
		return err == nil && info.Status.Readopted == 1
	})
	states, _, err := second.srv.Engine().ListResources("conns")
	if err != nil || len(states) != 3 {
		t.Fatalf("instances after the restart: %+v, %v", states, err)
	}
	for _, s := range states {
		if held[s.ID] != (s.Holder == l.FencingToken()) {
			t.Fatalf("after the restart %s is held by %d; the lease %d holds %v", s.ID, s.Holder, l.FencingToken(), held)
		}
	}
	select {
	case <-l.Done():
		t.Fatalf("the lease was lost across the restart: %v", l.Err())
	default:
	}
}

// TestPassiveLeaseSurvivesServerRestart: across a restart of the server,
// a provider registers again with its instances and a holder of one of
// them keeps its lease, whichever of the two reaches the new server
// first.
func TestPassiveLeaseSurvivesServerRestart(t *testing.T) {
	dir := t.TempDir()
	first := startDurable(t, dir, "127.0.0.1:0")
	if _, err := first.srv.Engine().CreatePool(limiter.PoolConfig{Name: "gpu", ResourceKind: limiter.ResourcePassive, DefaultLeaseTTL: 3 * time.Second, MaxLeaseTTL: 3 * time.Second}); err != nil {
		t.Fatal(err)
	}
	worker, err := client.Dialer{ClientID: "worker"}.Dial(first.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer worker.Close()
	holder, err := client.Dialer{ClientID: "holder"}.Dial(first.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	p, err := worker.NewProvider(ctx, "gpu", "w1", client.WithProviderTTL(5*time.Second), client.WithResources(client.Resource{ID: "slot-1"}, client.Resource{ID: "slot-2"}))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	l, err := holder.Acquire(ctx, "gpu")
	if err != nil {
		t.Fatal(err)
	}

	first.stop()
	second := startDurable(t, dir, first.addr)
	waitFor(t, "the re-adoption and the provider's return", func() bool {
		info, err := second.srv.Engine().GetPool("gpu")
		return err == nil && info.Status.Readopted == 1 && info.Status.Providers == 1 && info.Status.Resources == 2
	})
	states, _, err := second.srv.Engine().ListResources("gpu")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range states {
		if (s.ID == l.Resources()[0].ID) != (s.Holder == l.FencingToken()) || s.Provider != "w1" {
			t.Fatalf("after the restart: %+v; the lease holds %s", states, l.Resources()[0].ID)
		}
	}
	select {
	case <-l.Done():
		t.Fatalf("the lease was lost across the restart: %v", l.Err())
	default:
	}
}

// TestShareReattachesAfterServerRestart: a rate share held across a
// restart of its server is re-adopted (same id) when the client refreshes
// it, since the refresh says the rate it was granted.
func TestShareReattachesAfterServerRestart(t *testing.T) {
	dir := t.TempDir()
	first := startDurable(t, dir, "127.0.0.1:0")
	if _, err := first.srv.Engine().CreatePool(limiter.PoolConfig{Name: "api", Rate: 100, DefaultLeaseTTL: 3 * time.Second, MaxLeaseTTL: 3 * time.Second}); err != nil {
		t.Fatal(err)
	}
	c, err := client.Dialer{ClientID: "spender"}.Dial(first.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.NewLimiter("api", 60)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var before []limiter.Share
	waitFor(t, "the share's grant", func() bool {
		before, _ = first.srv.Engine().Shares("api")
		return len(before) == 1 && before[0].Rate == 60 && float64(l.Limit()) == 60
	})

	first.stop()
	second := startDurable(t, dir, first.addr)
	waitFor(t, "the share's re-adoption", func() bool {
		after, err := second.srv.Engine().Shares("api")
		return err == nil && len(after) == 1 && after[0].ID == before[0].ID && after[0].Rate > 0
	})
}
