// Command quickstart starts five jobs at once against the pool "orders-db".
// However many copies of it run, on however many machines, no more jobs run
// at once than the pool's concurrency limit. It talks to the server at
// -tollgate (default: $TOLLGATE_SERVER, or 127.0.0.1:7070).
package main

import (
	"context"
	"flag"
	"log"
	"sync"
	"time"

	"github.com/tollgate/tollgate/client"
)

func main() {
	addr := flag.String("tollgate", client.ServerFromEnv(), "Tollgate server address; default $TOLLGATE_SERVER or "+client.DefaultServer)
	flag.Parse()
	c, err := client.Dial(*addr)
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
