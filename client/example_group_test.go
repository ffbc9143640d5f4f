package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"

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

	g, err := c.NewGroup(context.Background(), "thumbnails", client.WithMaxInFlight(8))
	if err != nil {
		log.Fatal(err)
	}
	for i := range 20 {
		g.Go(func(ctx context.Context) error {
			return resize(ctx, fmt.Sprintf("photo-%02d.jpg", i))
		}, client.WithDescription(fmt.Sprintf("photo %d", i)))
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
	addr, stop := startServer(limiter.PoolConfig{Name: "mailer", ConcurrencyLimit: 2})
	defer stop()
	c, err := client.Dial(addr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	g, err := c.NewGroup(context.Background(), "mailer", client.WithErrorPolicy(client.ContinueOnError(10)))
	if err != nil {
		log.Fatal(err)
	}
	for _, to := range []string{"a@example.com", "b@example.invalid", "c@example.com"} {
		g.Go(func(ctx context.Context) error { return send(ctx, to) }, client.WithDescription(to))
	}
	if err := g.Wait(); err != nil {
		fmt.Println(err) // one line per failed task
	}
	fmt.Printf("%+v\n", g.Progress())
	// Output:
	// task "b@example.invalid": no such domain
	// {Submitted:3 Queued:0 Waiting:0 Running:0 Done:2 Failed:1 Skipped:0}
}

var errNoSuchDomain = errors.New("no such domain")

func send(ctx context.Context, to string) error {
	if to == "b@example.invalid" {
		return errNoSuchDomain
	}
	return ctx.Err()
}

// Queue-style use: one Group for the life of a service. Jobs are added as
// they arrive (Go blocks while 16 are in flight, pushing back on the
// queue), errors are handled as they happen, and Wait is called at
// shutdown, once no more jobs come.
func ExampleHandleErrors() {
	addr, stop := startServer(limiter.PoolConfig{Name: "renderer", ConcurrencyLimit: 4})
	defer stop()
	c, err := client.Dial(addr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	jobs := make(chan string)
	go func() { // the queue
		defer close(jobs)
		for _, j := range []string{"job-1", "job-2", "bad-job", "job-4"} {
			jobs <- j
		}
	}()
	failed := make(chan error, 100)
	g, err := c.NewGroup(context.Background(), "renderer", client.WithMaxInFlight(16), client.WithErrorPolicy(client.HandleErrors(func(err error) {
		select {
		case failed <- err: // to a retry loop, say
		default:
			log.Print(err) // never block the task's goroutine
		}
	})))
	if err != nil {
		log.Fatal(err)
	}
	for job := range jobs {
		g.Go(func(ctx context.Context) error { return render(ctx, job) }, client.WithDescription(job))
	}
	if err := g.Wait(); err != nil {
		fmt.Println(err) // the context's cause, if jobs were skipped at shutdown
	}
	close(failed)
	for err := range failed {
		fmt.Println("to retry:", err)
	}
	// Output: to retry: task "bad-job": cannot render
}

func render(ctx context.Context, job string) error {
	if job == "bad-job" {
		return errors.New("cannot render")
	}
	return ctx.Err()
}

// WithProgress drives a progress line: counts arrive after changes,
// coalesced while the callback runs, and Wait returns after the last.
func ExampleWithProgress() {
	addr, stop := startServer(limiter.PoolConfig{Name: "api.example.com", ConcurrencyLimit: 10})
	defer stop()
	c, err := client.Dial(addr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	var last string
	bar := func(p client.Progress) {
		last = fmt.Sprintf("%d/%d done, %d failed, %d running, %d waiting for a permit, %d queued",
			p.Done, p.Submitted, p.Failed, p.Running, p.Waiting, p.Queued)
		// A terminal would show it: fmt.Fprint(os.Stderr, "\r"+last)
	}
	g, err := c.NewGroup(context.Background(), "api.example.com", client.WithProgress(bar))
	if err != nil {
		log.Fatal(err)
	}
	for i := range 100 {
		g.Go(func(ctx context.Context) error { return fetch(ctx, i) })
	}
	if err := g.Wait(); err != nil {
		log.Fatal(err)
	}
	fmt.Println(last)
	// Output: 100/100 done, 0 failed, 0 running, 0 waiting for a permit, 0 queued
}

func fetch(ctx context.Context, i int) error { return ctx.Err() }
