package client_test

import (
	"context"
	"testing"

	"github.com/tollgate/tollgate/client"
	"github.com/tollgate/tollgate/limiter"
)

// A client given two addresses (both healthy: two standalone servers)
// uses one, and moves to the other when it goes away (here both servers
// declare the pool; a lease held on the first is not known to the second).
func TestFailoverWhenServerStops(t *testing.T) {
	for _, policy := range []client.UnavailablePolicy{client.WaitForServer(), client.FailWhenUnavailable()} {
		t.Run(policy.String(), func(t *testing.T) {
			a, b := newTestServer(t), newTestServer(t)
			a.pool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: 1})
			b.pool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: 1})
			c := dialTargetWith(t, client.Dialer{Unavailable: policy}, a.addr+","+b.addr)

			work := func(context.Context) error { return nil }
			if err := c.Do(ctx(t), "db", work); err != nil {
				t.Fatal(err)
			}
			used, other := a, b
			if b.status("db").Granted == 1 {
				used, other = b, a
			}
			if used.status("db").Granted != 1 || other.status("db").Granted != 0 {
				t.Fatal("not one grant on one server")
			}
			used.stop()
			if err := c.Do(ctx(t), "db", work); err != nil {
				t.Fatalf("Do after the server in use stopped: %v", err)
			}
			if other.status("db").Granted != 1 {
				t.Fatal("the other server granted nothing")
			}
		})
	}
}
