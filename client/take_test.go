package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/tollgate/tollgate/client"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

func TestTake(t *testing.T) {
	ts := newTestServer(t)
	ts.pool(limiter.PoolConfig{Name: "api", Rate: 10, Burst: 2})
	ts.pool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: 1})
	c := ts.dial()

	if err := c.Take(ctx(t), "api", 2); err != nil {
		t.Fatal(err)
	}
	// The next token is 100ms away (by the server's clock): a deadline
	// sooner than that is refused at once, reserving nothing.
	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := c.Take(short, "api", 1)
	mustIs(t, err, apierr.ErrRateLimited)
	if e, _ := client.FromError(err); e == nil || e.RetryAfter != 100*time.Millisecond {
		t.Fatalf("RATE_LIMITED over the stream: %#v; want RetryAfter 100ms", err)
	}
	mustIs(t, c.Take(ctx(t), "api", 3), apierr.ErrInvalidArgument)
	mustIs(t, c.Take(ctx(t), "api", 0), apierr.ErrInvalidArgument)
	mustIs(t, c.Take(ctx(t), "db", 1), apierr.ErrNoRateLimit)
	mustIs(t, c.Take(ctx(t), "nope", 1), apierr.ErrPoolNotFound)

	// Without a deadline, Wait waits (by the server's clock) for the token,
	// like rate.Limiter.Wait.
	errc := make(chan error, 1)
	go func() { errc <- c.Wait(context.Background(), "api") }()
	waitFor(t, "a reservation", func() bool { return ts.status("api").TokensAvailable < 0 })
	ts.clock.Advance(100 * time.Millisecond)
	if err := <-errc; err != nil {
		t.Fatalf("Wait: %v", err)
	}
	if st := ts.status("api"); st.TokensGranted != 3 {
		t.Fatalf("tokens granted %d; want 3", st.TokensGranted)
	}
}

func TestTakeCancel(t *testing.T) {
	ts := newTestServer(t)
	ts.pool(limiter.PoolConfig{Name: "api", Rate: 1, Burst: 1})
	c := ts.dial()

	if err := c.Take(ctx(t), "api", 1); err != nil {
		t.Fatal(err)
	}
	tctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	errc := make(chan error, 1)
	go func() { errc <- c.Take(tctx, "api", 1) }()
	waitFor(t, "a reservation", func() bool { return ts.status("api").TokensAvailable < 0 })
	cancel()
	if err := <-errc; err != context.Canceled {
		t.Fatalf("cancelled Take returned %v", err)
	}
	// The reservation is given back.
	waitFor(t, "the reservation to be cancelled", func() bool { return ts.status("api").TokensAvailable >= 0 })
}
