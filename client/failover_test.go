package client_test

import (
	"context"
	"testing"

	"github.com/tollgate/tollgate/client"
	"github.com/tollgate/tollgate/limiter"
)

// A client given two addresses uses the first, and moves to the second
// when the first goes away (here both servers declare the pool; a lease
// held on the first is not known to the second).
func TestFailoverWhenServerStops(t *testing.T) {
	for _, policy := range []client.UnavailablePolicy{client.WaitForServer(), client.FailWhenUnavailable()} {
		t.Run(policy.String(), func(t *testing.T) {
			a, b := newTestServer(t), newTestServer(t)
			a.pool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: 1})
			b.pool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: 1})
			c := dialTarget(t, a.addr+","+b.addr, client.WithUnavailablePolicy(policy))

			work := func(context.Context) error { return nil }
			if err := c.Do(ctx(t), "db", work); err != nil {
				t.Fatal(err)
			}
			if a.status("db").Granted != 1 || b.status("db").Granted != 0 {
				t.Fatal("the first address was not used first")
			}
			a.stop()
			if err := c.Do(ctx(t), "db", work); err != nil {
				t.Fatalf("Do after the first server stopped: %v", err)
			}
			if b.status("db").Granted != 1 {
				t.Fatal("the second server granted nothing")
			}
		})
	}
}
