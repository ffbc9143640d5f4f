package client_test

import (
	"context"
	"errors"
	"testing"

	"github.com/tollgate/tollgate/client"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

func TestWrap(t *testing.T) {
	ts := newTestServer(t)
	ts.pool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: 1})
	c := ts.dial()

	// underLease fails unless the call runs under a lease of db.
	underLease := func(ctx context.Context) error {
		if client.LeaseFromContext(ctx) == nil {
			return errors.New("no lease in the context")
		}
		if st := ts.status("db"); st.Held != 1 {
			return errors.New("the server holds no lease")
		}
		return nil
	}
	boom := errors.New("boom")

	save := client.Wrap(c, "db", func(ctx context.Context) error { return underLease(ctx) })
	if err := save(ctx(t)); err != nil {
		t.Fatal(err)
	}

	var got []string
	store := client.Wrap1(c, "db", func(ctx context.Context, s string) error {
		got = append(got, s)
		return underLease(ctx)
	})
	if err := store(ctx(t), "x"); err != nil {
		t.Fatal(err)
	}

	put := client.Wrap2(c, "db", func(ctx context.Context, k string, v int) error {
		if k == "bad" {
			return boom
		}
		return underLease(ctx)
	}, client.WithDescription("put"))
	if err := put(ctx(t), "k", 1); err != nil {
		t.Fatal(err)
	}
	if err := put(ctx(t), "bad", 1); err != boom {
		t.Fatalf("wrapped call returned %v; want fn's error as is", err)
	}

	square := client.WrapR(c, "db", func(ctx context.Context, n int) (int, error) {
		return n * n, underLease(ctx)
	})
	if r, err := square(ctx(t), 7); r != 49 || err != nil {
		t.Fatalf("square(7) = %d, %v", r, err)
	}

	if len(got) != 1 || got[0] != "x" {
		t.Fatalf("Wrap1 passed %q", got)
	}
	if st := ts.status("db"); st.Granted != 5 || st.Released != 5 {
		t.Fatalf("server: granted=%d released=%d; want 5 calls under leases", st.Granted, st.Released)
	}

	// No lease: the function does not run, and the acquire's error is
	// returned.
	missing := client.WrapR(c, "nope", func(context.Context, int) (int, error) {
		t.Error("ran without a lease")
		return 1, nil
	})
	r, err := missing(ctx(t), 1)
	mustIs(t, err, apierr.ErrPoolNotFound)
	if r != 0 {
		t.Fatalf("result %d without a run", r)
	}
}
