package client_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/tollgate/tollgate/client"
	"github.com/tollgate/tollgate/limiter"
)

// A Group runs tasks under the pool's global limit: here at most 2 at once
// across every process that uses "thumbnails", and at most 8 in flight in
// this one. The first error cancels the rest and is returned by Wait.
func ExampleClient_NewGroup() {
	addr, stop := startServer(limiter.PoolConfig{Name: "thumbnails", ConcurrencyLimit: 2})
	defer stop()

	c, err := client.Dial(addr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	g := c.NewGroup(context.Background(), "thumbnails", client.MaxInFlight(8))
	for i := range 20 {
		g.Go(func(ctx context.Context) error {
			return resize(ctx, fmt.Sprintf("photo-%02d.jpg", i))
		}, client.Description(fmt.Sprintf("photo %d", i)))
	}
	if err := g.Wait(); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%+v\n", g.Progress())
	// Output: {Submitted:20 Queued:0 Waiting:0 Running:0 Done:20 Failed:0 Skipped:0}
}

func resize(ctx context.Context, name string) error { return ctx.Err() }

// ContinueOnError runs past failures and stops starting tasks after the
// given number; Wait returns every error, joined.
func ExampleContinueOnError() {
	c, err := client.Dial("127.0.0.1:7070")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	g := c.NewGroup(context.Background(), "mailer", client.ContinueOnError(10))
	for _, to := range []string{"a@example.com", "b@example.com"} {
		g.Go(func(ctx context.Context) error { return send(ctx, to) }, client.Description(to))
	}
	if err := g.Wait(); err != nil {
		log.Print(err) // one line per failed task: task "b@example.com": ...
	}
}

func send(ctx context.Context, to string) error { return nil }

// Queue-style use: one Group for the life of a service. Jobs are added as
// they arrive (Go blocks while 16 are in flight, pushing back on the
// queue), errors are handled as they happen, and Wait is called at
// shutdown, when the context ends.
func ExampleHandleErrors() {
	c, err := client.Dial("127.0.0.1:7070")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	ctx, stop := context.WithTimeout(context.Background(), time.Hour) // the service's life
	defer stop()
	jobs := make(chan string)
	failed := make(chan error, 100)
	g := c.NewGroup(ctx, "renderer", client.MaxInFlight(16), client.HandleErrors(func(err error) {
		select {
		case failed <- err: // to a retry loop, say
		default:
			log.Print(err) // never block the task's goroutine
		}
	}))
	for job := range jobs {
		g.Go(func(ctx context.Context) error { return render(ctx, job) }, client.Description(job))
	}
	if err := g.Wait(); err != nil {
		log.Print(err) // the context's cause, if jobs were skipped at shutdown
	}
}

func render(ctx context.Context, job string) error { return nil }

// WithProgress drives a progress line: counts arrive after changes,
// coalesced while the callback runs, and Wait returns after the last.
func ExampleWithProgress() {
	c, err := client.Dial("127.0.0.1:7070")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	bar := func(p client.Progress) {
		fmt.Fprintf(os.Stderr, "\r%d/%d done, %d failed, %d running, %d waiting for a permit, %d queued ",
			p.Done, p.Submitted, p.Failed, p.Running, p.Waiting, p.Queued)
	}
	g := c.NewGroup(context.Background(), "api.example.com", client.WithProgress(bar))
	for i := range 1000 {
		g.Go(func(ctx context.Context) error { return fetch(ctx, i) })
	}
	err = g.Wait()
	fmt.Fprintln(os.Stderr)
	if err != nil {
		log.Fatal(err)
	}
}

func fetch(ctx context.Context, i int) error { return nil }
