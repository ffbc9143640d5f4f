package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/tollgate/tollgate/client"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

func migrate(ctx context.Context, fencingToken uint64) error { return nil }

// Dial takes the address of a server, or the addresses of a cluster's
// servers as separate arguments (Dial("tollgate-1:7070", "tollgate-2:7070",
// "tollgate-3:7070")): the client then sends its calls to the leader, and
// follows it when it changes. A Dialer sets the client's settings.
func ExampleDialer_Dial() {
	addr, stop := startServer(limiter.PoolConfig{Name: "billing", ConcurrencyLimit: 1})
	defer stop()

	c, err := client.Dialer{ClientID: "billing-7"}.Dial(addr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	fmt.Println(c.ClientID())
	// Output: billing-7
}

// Do is the usual way to run work under a lease: the lease is always
// released, and fn's context ends if the lease is lost.
func ExampleClient_Do() {
	addr, stop := startServer(limiter.PoolConfig{Name: "orders-db", ConcurrencyLimit: 2})
	defer stop()
	c, err := client.Dial(addr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = c.Do(ctx, "orders-db", func(ctx context.Context) error {
		fmt.Println("migrating under a lease of weight", client.LeaseFromContext(ctx).Weight())
		return migrate(ctx, 0)
	}, client.WithWeight(2), client.WithWaitTimeout(10*time.Second))
	switch {
	case errors.Is(err, apierr.ErrWaitTimeout):
		fmt.Println("orders-db is busy; try later")
	case errors.Is(err, client.ErrLeaseLost):
		fmt.Println("the lease was lost while migrating; the work may have overlapped another holder")
	case err != nil:
		fmt.Println(err)
	}
	// Output: migrating under a lease of weight 2
}

// A lease held by hand: watch Done, pass the fencing token to the protected
// system, and release it.
func ExampleClient_Acquire() {
	addr, stop := startServer(limiter.PoolConfig{Name: "gpu", ConcurrencyLimit: 1})
	defer stop()
	c, err := client.Dial(addr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	ctx := context.Background()
	l, err := c.Acquire(ctx, "gpu", client.WithTTL(30*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("held", l.Pool(), "for", l.TTL())

	work, done := l.Context(ctx) // ends when the lease is lost
	defer done()
	if err := migrate(work, l.FencingToken()); err != nil {
		fmt.Println(err)
	}
	rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := l.Release(rctx); err != nil {
		fmt.Println(err) // matches client.ErrLeaseLost if it was lost first
	}
	fmt.Println(l.Err())
	// Output:
	// held gpu for 30s
	// tollgate: lease released
}
