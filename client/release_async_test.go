package client_test

import (
	"testing"

	"github.com/tollgate/tollgate/client"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// ReleaseAsync ends the lease at once and frees its permit on the server
// without the caller waiting; Close waits for the answer, so a process that
// releases and exits leaves nothing held.
func TestReleaseAsyncFreesThePermit(t *testing.T) {
	ts := newTestServer(t)
	ts.pool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: 1})
	c := ts.dial()
	l, err := c.Acquire(ctx(t), "db")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.ReleaseAsync(); err != nil {
		t.Fatal(err)
	}
	if !isDone(l) || l.Err() != client.ErrReleased {
		t.Fatalf("after ReleaseAsync: done %v, Err %v; want done, ErrReleased", isDone(l), l.Err())
	}
	waitFor(t, "the release to reach the server", func() bool { return ts.status("db").Held == 0 })
	// The permit is free for the next acquire; a second ReleaseAsync and a
	// Release of the released lease do nothing.
	l2, err := c.Acquire(ctx(t), "db")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.ReleaseAsync(); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if err := l2.ReleaseAsync(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if st := ts.status("db"); st.Held != 0 || st.Leases != 0 {
		t.Fatalf("after Close: held %d, leases %d; want the posted release answered before Close returned", st.Held, st.Leases)
	}
}

// A release posted while the server is away is not lost: it is sent again
// on the next stream.
func TestReleaseAsyncResentAfterBreak(t *testing.T) {
	ts := newTestServer(t)
	ts.pool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: 1})
	c := ts.dial()
	l, err := c.Acquire(ctx(t), "db")
	if err != nil {
		t.Fatal(err)
	}
	ts.stop()
	if err := l.ReleaseAsync(); err != nil {
		t.Fatal(err)
	}
	if st := ts.status("db"); st.Leases != 1 {
		t.Fatalf("live leases %d while the server is away; want 1", st.Leases)
	}
	ts.start()
	waitFor(t, "the release to be sent again", func() bool { return ts.status("db").Leases == 0 })
}

// A lease the client knows was lost is not released: ReleaseAsync says so.
func TestReleaseAsyncOfALostLease(t *testing.T) {
	ts := newTestServer(t)
	ts.pool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: 1})
	c := ts.dial()
	l, err := c.Acquire(ctx(t), "db")
	if err != nil {
		t.Fatal(err)
	}
	if err := ts.srv.Engine().RevokeLease("db", l.FencingToken(), "test"); err != nil {
		t.Fatal(err)
	}
	mustIs(t, waitDone(t, l), apierr.ErrLeaseRevoked)
	mustIs(t, l.ReleaseAsync(), client.ErrLeaseLost)
}
