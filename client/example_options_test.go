package client_test

import (
	"context"
	"database/sql"
	"errors"
	"log"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/tollgate/tollgate/client"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// FailWhenUnavailable: when the server cannot be reached, fail at once
// (and serve something degraded) instead of waiting for it.
func ExampleFailWhenUnavailable() {
	c, err := client.Dial("tollgate-1:7070,tollgate-2:7070",
		client.WithUnavailablePolicy(client.FailWhenUnavailable()))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	err = c.Do(context.Background(), "recommendations", func(ctx context.Context) error {
		return nil // the expensive, protected call
	})
	if errors.Is(err, client.ErrUnavailable) {
		log.Print("Tollgate is unreachable: serving cached recommendations")
	}
}

// LocalLimitOnly: when the server cannot be reached, run anyway under a
// limit of 4 in this process. Those runs are NOT globally limited, are
// logged at WARN, and have no lease (no fencing token).
func ExampleLocalLimitOnly() {
	c, err := client.Dial("127.0.0.1:7070",
		client.WithUnavailablePolicy(client.LocalLimitOnly(4)),
		client.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, nil))))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	err = c.Do(context.Background(), "search-index", func(ctx context.Context) error {
		if client.LeaseFromContext(ctx) == nil {
			// Running under the local limit only: no fencing token.
			return reindex(ctx, 0)
		}
		return reindex(ctx, client.LeaseFromContext(ctx).FencingToken())
	})
	if err != nil {
		log.Print(err)
	}
}

func reindex(ctx context.Context, fencingToken uint64) error { return nil }

// metrics is an Observer that would feed histograms and counters.
type metrics struct{}

func (metrics) AcquireDone(ev client.AcquireEvent) {
	// e.g. waitSeconds.WithLabelValues(ev.Pool).Observe(ev.Wait.Seconds())
}

func (metrics) WorkDone(ev client.WorkEvent) {
	// e.g. holdSeconds.WithLabelValues(ev.Pool).Observe(ev.Hold.Seconds())
	//      outcomes.WithLabelValues(ev.Pool, ev.Outcome.String()).Inc()
}

// apiError is the error type of some HTTP API client.
type apiError struct{ Status int }

func (e *apiError) Error() string { return "HTTP " + http.StatusText(e.Status) }

// WithObserver and WithClassifier: measure waits, holds and outcomes, and
// say which errors are failures of the protected API: a 404 is an answer,
// a 429 is the API pushing back.
func ExampleWithObserver() {
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
	c, err := client.Dial("127.0.0.1:7070", client.WithObserver(metrics{}), client.WithClassifier(classify))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
}

// LeaseFromContext gives the work run by Do its lease, whose fencing token
// the protected system checks: this UPDATE only applies if no holder with a
// newer token has written the row (see docs/client.md).
func ExampleLeaseFromContext() {
	c, err := client.Dial("127.0.0.1:7070")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	var db *sql.DB // sql.Open("pgx", ...)

	err = c.Do(context.Background(), "invoices", func(ctx context.Context) error {
		token := client.LeaseFromContext(ctx).FencingToken()
		res, err := db.ExecContext(ctx,
			`UPDATE invoices SET status = 'sent', fence = $1 WHERE id = $2 AND fence <= $1`,
			int64(token), 42)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return errors.New("a newer lease holder has written this invoice; stopping")
		}
		return nil
	}, client.TTL(30*time.Second))
	if err != nil {
		log.Print(err)
	}
}

// TryAcquire takes a lease only if it is free now.
func ExampleClient_TryAcquire() {
	c, err := client.Dial("127.0.0.1:7070")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	l, err := c.TryAcquire(context.Background(), "nightly-report")
	switch {
	case errors.Is(err, apierr.ErrNoCapacity):
		log.Print("another instance is writing the report; nothing to do")
		return
	case err != nil:
		log.Fatal(err)
	}
	defer func() {
		if err := l.Release(context.Background()); err != nil {
			log.Printf("release: %v", err) // the lease ends at its TTL anyway
		}
	}()
	// ... write the report while l.Done() is open ...
}

// Wait (one token) and Take (n tokens) pace calls by the pool's rate.
func ExampleClient_Wait() {
	c, err := client.Dial("127.0.0.1:7070")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range 3 {
		if err := c.Wait(ctx, "api.github.com"); err != nil {
			log.Fatal(err) // ErrRateLimited if no token could come before ctx's deadline
		}
		// ... one call to the API ...
	}
	if err := c.Take(ctx, "api.github.com", 10); err != nil { // a batch of 10 calls
		log.Fatal(err)
	}
}
