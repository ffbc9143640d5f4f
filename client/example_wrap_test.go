package client_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/tollgate/tollgate/client"
	"github.com/tollgate/tollgate/limiter"
)

// An existing function, and the code that calls it.
func chargeCard(ctx context.Context, customerID string, cents int64) error {
	fmt.Printf("charged %s %d cents\n", customerID, cents)
	return nil
}

func checkout(ctx context.Context, charge func(context.Context, string, int64) error) error {
	return charge(ctx, "cus_42", 1999)
}

// Wrap2 throttles an existing two-argument function without changing its
// callers: checkout still receives a func(ctx, string, int64) error.
func ExampleWrap2() {
	addr, stop := startServer(limiter.PoolConfig{Name: "payments-api", ConcurrencyLimit: 2})
	defer stop()
	c, err := client.Dial(addr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	charge := client.Wrap2(c, "payments-api", chargeCard, client.WithWaitTimeout(5*time.Second))
	if err := checkout(context.Background(), charge); err != nil {
		fmt.Println(err)
	}
	// Output: charged cus_42 1999 cents
}

// Wrap throttles a func(ctx) error; Wrap1 one of one argument.
func ExampleWrap() {
	addr, stop := startServer(limiter.PoolConfig{Name: "orders-db", ConcurrencyLimit: 1})
	defer stop()
	c, err := client.Dial(addr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	vacuum := client.Wrap(c, "orders-db", func(ctx context.Context) error {
		fmt.Println("vacuumed")
		return nil
	})
	reindex := client.Wrap1(c, "orders-db", func(ctx context.Context, table string) error {
		fmt.Println("reindexed", table)
		return nil
	})
	if err := vacuum(context.Background()); err != nil {
		fmt.Println(err)
	}
	if err := reindex(context.Background(), "orders"); err != nil {
		fmt.Println(err)
	}
	// Output:
	// vacuumed
	// reindexed orders
}

// WrapR throttles a function that returns a result.
func ExampleWrapR() {
	addr, stop := startServer(limiter.PoolConfig{Name: "geocoder", ConcurrencyLimit: 1})
	defer stop()
	c, err := client.Dial(addr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	geocode := func(ctx context.Context, city string) (string, error) {
		return city + ": 48.85N 2.35E", nil // the throttled call
	}
	throttled := client.WrapR(c, "geocoder", geocode)
	where, err := throttled(context.Background(), "Paris")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(where)
	// Output: Paris: 48.85N 2.35E
}
