package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate/tollgate/client"
)

// Outcomes counts how the clients' requests ended, as they classified
// them (Canceled: cut off at the end of the run; not reported).
type Outcomes struct {
	Success, Error, Timeout, Canceled int64
}

// errRefused is the backend's 503: an error for the pool's adaptive
// limits (client.DefaultClassifier).
var errRefused = errors.New("backend: 503 Service Unavailable")

// readyLine is what a client process prints once started, before it
// waits for its stdin to close.
const readyLine = "ready\n"

// runClients is one client process: once started, it prints
// readyLine and waits for in to close; then goroutines loop, for duration,
// on client.Do around one GET of the backend, each bounded by timeout.
// It prints its Outcomes as one JSON line at the end.
func runClients(ctx context.Context, args []string, in io.Reader, out io.Writer) error {
	fs := flag.NewFlagSet("clients", flag.ContinueOnError)
	addr := fs.String("tollgate", client.ServerFromEnv(), "Tollgate server address")
	url := fs.String("backend", "", "the backend's URL")
	pool := fs.String("pool", "backend", "the pool that guards the backend")
	goroutines := fs.Int("goroutines", 8, "client goroutines")
	duration := fs.Duration("duration", time.Minute, "how long to send requests")
	timeout := fs.Duration("timeout", time.Second, "a request's timeout")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *url == "" {
		return fmt.Errorf("give -backend")
	}
	c, err := client.Dial(*addr)
	if err != nil {
		return err
	}
	defer c.Close()
	c.Conn().Connect()
	if _, err := io.WriteString(out, readyLine); err != nil {
		return err
	}
	if _, err := io.Copy(io.Discard, in); err != nil {
		return err
	}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: *goroutines}}
	ctx, cancel := context.WithCancel(ctx) // not a deadline: the end is a cancellation, not a timeout
	defer cancel()
	stop := time.AfterFunc(*duration, cancel)
	defer stop.Stop()
	var n [4]atomic.Int64 // by client.Outcome - 1
	var wg sync.WaitGroup
	for range *goroutines {
		wg.Go(func() {
			for ctx.Err() == nil {
				err := c.Do(ctx, *pool, func(ctx context.Context) error { return get(ctx, hc, *url, *timeout) })
				n[client.DefaultClassifier(err)-1].Add(1)
			}
		})
	}
	wg.Wait()
	return json.NewEncoder(out).Encode(Outcomes{Success: n[0].Load(), Error: n[1].Load(), Timeout: n[2].Load(), Canceled: n[3].Load()})
}

// get sends one request: a 503 is errRefused, a request not answered
// within timeout context.DeadlineExceeded.
func get(ctx context.Context, hc *http.Client, url string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		return nil
	case http.StatusServiceUnavailable:
		return errRefused
	default:
		return fmt.Errorf("backend: %s", resp.Status)
	}
}
