package client_test

import (
	"context"
	"fmt"
	"log"

	"github.com/tollgate/tollgate/client"
	"github.com/tollgate/tollgate/limiter"
)

// A Semaphore hands this process's goroutines permits of a pool from one
// share lease, with no round trip per permit. Here a Group runs 100 tasks,
// at most 20 at once, under one lease.
func ExampleClient_NewSemaphore() {
	addr, stop := startServer(limiter.PoolConfig{Name: "orders-db", ConcurrencyLimit: 50})
	defer stop()

	c, err := client.Dial(addr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	sem, err := c.NewSemaphore("orders-db", client.WithLocalShare(20))
	if err != nil {
		log.Fatal(err)
	}
	defer sem.Close()

	ctx := context.Background()
	if err := sem.Acquire(ctx, 1); err != nil { // like x/sync/semaphore
		log.Fatal(err)
	}
	err = query(ctx)
	sem.Release(1)
	if err != nil {
		log.Print(err)
	}

	g, err := c.NewGroup(ctx, "orders-db", client.WithSemaphore(sem))
	if err != nil {
		log.Fatal(err)
	}
	for range 100 {
		g.Go(func(ctx context.Context) error { return query(ctx) })
	}
	if err := g.Wait(); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%+v\n", g.Progress())
	// Output: {Submitted:100 Queued:0 Waiting:0 Running:0 Done:100 Failed:0 Skipped:0}
}

func query(ctx context.Context) error { return ctx.Err() }
