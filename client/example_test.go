package client_test

import (
	"context"
	"errors"
	"log"
	"time"

	"github.com/tollgate/tollgate/client"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

func migrate(ctx context.Context, fencingToken uint64) error { return nil }

// Dial with the addresses of a cluster's servers: the client sends its
// calls to the leader, and follows it when it changes.
func ExampleDial() {
	c, err := client.Dial("tollgate-1:7070", "tollgate-2:7070", "tollgate-3:7070",
		client.WithClientID("billing-7"))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
}

// Do is the usual way to run work under a lease: the lease is always
// released, and fn's context ends if the lease is lost.
func ExampleClient_Do() {
	c, err := client.Dial("tollgate-1:7070,tollgate-2:7070")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = c.Do(ctx, "orders-db", func(ctx context.Context) error {
		return migrate(ctx, 0)
	}, client.Weight(2), client.WaitTimeout(10*time.Second))
	switch {
	case errors.Is(err, apierr.ErrWaitTimeout):
		log.Print("orders-db is busy; try later")
	case errors.Is(err, client.ErrLeaseLost):
		log.Print("the lease was lost while migrating; the work may have overlapped another holder")
	case err != nil:
		log.Print(err)
	}
}

// A lease held by hand: watch Done, pass the fencing token to the protected
// system, and release it.
func ExampleClient_Acquire() {
	c, err := client.Dial("127.0.0.1:7070")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	ctx := context.Background()
	l, err := c.Acquire(ctx, "gpu", client.TTL(30*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := l.Release(rctx); err != nil {
			log.Print(err) // matches client.ErrLeaseLost if it was lost first
		}
	}()

	work, stop := l.Context(ctx) // ends when the lease is lost
	defer stop()
	if err := migrate(work, l.FencingToken()); err != nil {
		log.Print(err)
	}
	if err := l.Err(); err != nil {
		log.Printf("lease lost: %v", err)
	}
}
