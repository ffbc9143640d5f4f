package client_test

import (
	"context"
	"fmt"
	"log"
	"strings"

	"github.com/tollgate/tollgate/client"
	"github.com/tollgate/tollgate/limiter"
)

// Map calls a function on every item under the pool's limit and returns the
// results in input order.
func ExampleMap() {
	addr, stop := startServer(limiter.PoolConfig{Name: "translate-api", ConcurrencyLimit: 3})
	defer stop()

	c, err := client.Dial(addr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	words := []string{"tollgate", "pool", "lease", "fencing token"}
	shouted, err := client.Map(context.Background(), c, "translate-api", words,
		func(ctx context.Context, w string) (string, error) {
			return strings.ToUpper(w), nil // a call to the rate-limited API
		})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(strings.Join(shouted, ", "))
	// Output: TOLLGATE, POOL, LEASE, FENCING TOKEN
}
