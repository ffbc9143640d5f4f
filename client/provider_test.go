package client_test

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tollgate/tollgate/client"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// A provider's instances reach another client's lease with their
// attributes; closing the provider revokes that lease at once; a broken
// stream registers again by itself with what it offers.
func TestProviderLifecycle(t *testing.T) {
	ts := newTestServer(t)
	ts.pool(limiter.PoolConfig{Name: "gpu", ResourceKind: limiter.ResourcePassive})
	worker, holder := ts.dial(), ts.dial()

	p, err := worker.NewProvider(ctx(t), "gpu", "worker-1", client.WithProviderTTL(5*time.Second),
		client.WithResources(client.Resource{ID: "slot-1", Attributes: map[string]string{"addr": "10.0.0.7:9000"}}))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Offer(ctx(t), client.Resource{ID: "slot-2"}); err != nil {
		t.Fatal(err)
	}
	err = p.Offer(ctx(t), client.Resource{ID: "slot-2"})
	mustIs(t, err, &client.Error{Reason: "RESOURCE_EXISTS"})
	if _, err := worker.NewProvider(ctx(t), "gpu", "worker-1"); err == nil || !strings.Contains(err.Error(), "worker-1") {
		t.Fatalf("a second provider of the same id: %v", err)
	}

	l, err := holder.Acquire(ctx(t), "gpu", client.WithWeight(2))
	if err != nil {
		t.Fatal(err)
	}
	rs := l.Resources()
	if len(rs) != 2 || rs[0].Provider != "worker-1" {
		t.Fatalf("lease bound to %+v", rs)
	}
	for _, r := range rs {
		if r.ID == "slot-1" && r.Attributes["addr"] != "10.0.0.7:9000" {
			t.Fatalf("slot-1 came without its address: %+v", r)
		}
	}
	if err := l.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}

	// The server restarts its listener: the provider registers again.
	ts.stop()
	waitFor(t, "the provider to leave with its stream", func() bool { return ts.status("gpu").Providers == 0 })
	ts.start()
	waitFor(t, "the provider to register again", func() bool { return ts.status("gpu").Resources == 2 })

	l, err = holder.Acquire(ctx(t), "gpu")
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	err = waitDone(t, l)
	mustIs(t, err, apierr.ErrLeaseRevoked)
	if !strings.Contains(err.Error(), `provider "worker-1"`) {
		t.Fatalf("the holder was told %q", err)
	}
	if s := ts.status("gpu"); s.Resources != 0 || s.Providers != 0 {
		t.Fatalf("after Close: %+v", s)
	}
	mustIs(t, p.Err(), client.ErrClosed)
	mustIs(t, p.Offer(ctx(t), client.Resource{ID: "x"}), client.ErrClosed)

	// A provider of a pool that is not passive is refused at once.
	ts.pool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: 1})
	_, err = worker.NewProvider(ctx(t), "db", "w")
	mustIs(t, err, &client.Error{Reason: "NOT_PASSIVE"})
}

// A NewProvider without an id is refused before any call, with an *Error like
// the server's: INVALID_ARGUMENT for status.Code and FromError alike.
func TestProvideWithoutID(t *testing.T) {
	c := newTestServer(t).dial()
	_, err := c.NewProvider(ctx(t), "gpu", "")
	mustIs(t, err, apierr.ErrInvalidArgument)
	if e, ok := client.FromError(err); !ok || e.Code != codes.InvalidArgument || status.Code(err) != codes.InvalidArgument {
		t.Fatalf("NewProvider without an id: %v (FromError %v %v, status code %v)", err, e, ok, status.Code(err))
	}
}
