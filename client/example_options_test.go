package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"time"

	"github.com/tollgate/tollgate/client"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// FailWhenUnavailable: when the server cannot be reached, fail at once
// (and serve something degraded) instead of waiting for it.
func ExampleFailWhenUnavailable() {
	c, err := client.Dialer{Unavailable: client.FailWhenUnavailable()}.Dial(unreachableAddr())
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	err = c.Do(context.Background(), "recommendations", func(ctx context.Context) error {
		return nil // the expensive, protected call
	})
	if errors.Is(err, client.ErrUnavailable) {
		fmt.Println("Tollgate is unreachable: serving cached recommendations")
	}
	// Output: Tollgate is unreachable: serving cached recommendations
}

// LocalLimitOnly: when the server cannot be reached, run anyway under a
// limit of 4 in this process. Those runs are NOT globally limited, are
// logged at WARN (to the Dialer's Logger), and have no lease (no fencing
// token).
func ExampleLocalLimitOnly() {
	c, err := client.Dialer{Unavailable: client.LocalLimitOnly(4)}.Dial(unreachableAddr())
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	err = c.Do(context.Background(), "search-index", func(ctx context.Context) error {
		if client.LeaseFromContext(ctx) == nil {
			fmt.Println("running under the local limit only: no fencing token")
			return reindex(ctx, 0)
		}
		return reindex(ctx, client.LeaseFromContext(ctx).FencingToken())
	})
	if err != nil {
		fmt.Println(err)
	}
	// Output: running under the local limit only: no fencing token
}

func reindex(ctx context.Context, fencingToken uint64) error { return nil }

// metrics is an Observer that would feed histograms and counters; here it
// prints what it is told.
type metrics struct{}

func (metrics) AcquireDone(ev client.AcquireEvent) {
	// e.g. waitSeconds.WithLabelValues(ev.Pool).Observe(ev.Wait.Seconds())
	fmt.Printf("acquired from %s: err=%v\n", ev.Pool, ev.Err)
}

func (metrics) WorkDone(ev client.WorkEvent) {
	// e.g. holdSeconds.WithLabelValues(ev.Pool).Observe(ev.Hold.Seconds())
	//      outcomes.WithLabelValues(ev.Pool, ev.Outcome.String()).Inc()
	fmt.Printf("work under %s: %s\n", ev.Pool, ev.Outcome)
}

// apiError is the error type of some HTTP API client.
type apiError struct{ Status int }

func (e *apiError) Error() string { return "HTTP " + http.StatusText(e.Status) }

// A Dialer's Observer and Classifier measure waits, holds and outcomes, and
// say which errors are failures of the protected API: a 404 is an answer,
// a 429 is the API pushing back.
func ExampleObserver() {
	addr, stop := startServer(limiter.PoolConfig{Name: "api", ConcurrencyLimit: 2})
	defer stop()

	classify := func(err error) client.Outcome {
		var e *apiError
		if errors.As(err, &e) {
			switch {
			case e.Status == 404:
				return client.OutcomeSuccess
			case e.Status == 429 || e.Status >= 500:
				return client.OutcomeError
			}
		}
		return client.DefaultClassifier(err) // nil, timeouts, cancellations, others
	}
	c, err := client.Dialer{Observer: metrics{}, Classifier: classify}.Dial(addr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	for _, status := range []int{404, 429} {
		err := c.Do(context.Background(), "api", func(ctx context.Context) error {
			return &apiError{Status: status}
		})
		fmt.Println(err)
	}
	// Output:
	// acquired from api: err=<nil>
	// work under api: success
	// HTTP Not Found
	// acquired from api: err=<nil>
	// work under api: error
	// HTTP Too Many Requests
}

// invoices stands for a table whose rows carry the fencing token of their
// last writer.
type invoices struct{ fence map[int]uint64 }

// markSent is `UPDATE invoices SET status = 'sent', fence = $1 WHERE id =
// $2 AND fence <= $1`: it only applies if no holder with a newer token has
// written the row.
func (t *invoices) markSent(token uint64, id int) error {
	if t.fence[id] > token {
		return errors.New("a newer lease holder has written this invoice; stopping")
	}
	t.fence[id] = token
	return nil
}

// LeaseFromContext gives the work run by Do its lease, whose fencing token
// the protected system checks (see docs/client.md).
func ExampleLeaseFromContext() {
	addr, stop := startServer(limiter.PoolConfig{Name: "invoices", ConcurrencyLimit: 1})
	defer stop()
	c, err := client.Dial(addr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	db := &invoices{fence: map[int]uint64{}}

	write := func(ctx context.Context) error {
		return db.markSent(client.LeaseFromContext(ctx).FencingToken(), 42)
	}
	for range 2 {
		if err := c.Do(context.Background(), "invoices", write, client.WithTTL(30*time.Second)); err != nil {
			fmt.Println(err)
		}
	}
	db.fence[42] = 1 << 40 // as if a later holder had written the row
	fmt.Println(c.Do(context.Background(), "invoices", write))
	// Output: a newer lease holder has written this invoice; stopping
}

// TryAcquire takes a lease only if it is free now.
func ExampleClient_TryAcquire() {
	addr, stop := startServer(limiter.PoolConfig{Name: "nightly-report", ConcurrencyLimit: 1})
	defer stop()
	c, err := client.Dial(addr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	for instance := range 2 {
		l, err := c.TryAcquire(context.Background(), "nightly-report")
		switch {
		case errors.Is(err, apierr.ErrNoCapacity):
			fmt.Printf("instance %d: another instance is writing the report; nothing to do\n", instance)
			continue
		case err != nil:
			log.Fatal(err)
		}
		// ... write the report while l.Done() is open, and release it
		// when done; here the lease is kept, so the next try fails.
		fmt.Printf("instance %d: writing the report under a lease of %s\n", instance, l.Pool())
	}
	// Output:
	// instance 0: writing the report under a lease of nightly-report
	// instance 1: another instance is writing the report; nothing to do
}

// Wait (one token) and Take (n tokens) pace calls by the pool's rate.
func ExampleClient_Wait() {
	addr, stop := startServer(limiter.PoolConfig{Name: "api.github.com", Rate: 100, Burst: 13})
	defer stop()
	c, err := client.Dial(addr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	calls := 0
	for range 3 {
		if err := c.Wait(ctx, "api.github.com"); err != nil {
			log.Fatal(err) // ErrRateLimited if no token could come before ctx's deadline
		}
		calls++ // ... one call to the API ...
	}
	if err := c.Take(ctx, "api.github.com", 10); err != nil { // a batch of 10 calls
		log.Fatal(err)
	}
	calls += 10
	fmt.Println(calls, "calls paced")
	// Output: 13 calls paced
}
