// Command quickstart starts five jobs at once against the pool "orders-db".
// However many copies of it run, on however many machines, no more jobs run
// at once than the pool's concurrency limit.
package main

import (
	"context"
	"log"
	"sync"
	"time"

	"github.com/tollgate/tollgate/client"
)

func main() {
	c, err := client.Dial("127.0.0.1:7070")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	var wg sync.WaitGroup
	for i := 1; i <= 5; i++ {
		wg.Go(func() {
			err := c.Do(context.Background(), "orders-db", func(ctx context.Context) error {
				log.Printf("job %d running", i)
				time.Sleep(2 * time.Second) // the protected work; it should stop if ctx ends
				return ctx.Err()
			})
			if err != nil {
				log.Printf("job %d: %v", i, err)
			}
		})
	}
	wg.Wait()
}
