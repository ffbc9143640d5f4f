package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/tollgate/tollgate/client"
)

// submit sends -jobs jobs, -parallel at a time, each to the worker slot
// that the pool hands it. A job whose worker dies (its lease is revoked,
// or the request fails) is sent again, to another slot.
func submit(ctx context.Context, addr, pool string, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("submit", flag.ContinueOnError)
	jobs := fs.Int("jobs", 20, "jobs to send")
	parallel := fs.Int("parallel", 4, "jobs in flight at once")
	if err := fs.Parse(args); err != nil {
		return err
	}
	c, err := client.Dialer{ClientID: "submitter"}.Dial(addr)
	if err != nil {
		return err
	}
	defer c.Close()

	queue := make(chan int)
	go func() {
		defer close(queue)
		for j := 1; j <= *jobs; j++ {
			select {
			case queue <- j:
			case <-ctx.Done():
				return
			}
		}
	}()
	var (
		mu       sync.Mutex
		byWorker = map[string]int{}
		retries  int
		wg       sync.WaitGroup
		failed   error
	)
	for range *parallel {
		wg.Go(func() {
			for j := range queue {
				for attempt := 1; ; attempt++ {
					who, err := runJob(ctx, c, pool, j)
					if err == nil {
						mu.Lock()
						byWorker[who]++
						mu.Unlock()
						break
					}
					if ctx.Err() != nil || attempt == 5 {
						mu.Lock()
						failed = errors.Join(failed, fmt.Errorf("job %d: %w", j, err))
						mu.Unlock()
						break
					}
					mu.Lock()
					retries++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if failed != nil {
		return failed
	}
	fmt.Fprintf(out, "submitted %d jobs (%d sent again after a worker left): %v\n", *jobs, retries, byWorker)
	return nil
}

// runJob holds one slot of the pool for the job and sends the job to the
// slot's worker, within the lease: if the worker leaves, the lease ends
// and so does the request. It returns the worker's id.
func runJob(ctx context.Context, c *client.Client, pool string, job int) (string, error) {
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	l, err := c.Acquire(actx, pool)
	if err != nil {
		return "", err
	}
	defer func() {
		if err := l.Release(context.WithoutCancel(ctx)); err != nil {
			log.Printf("job %d: release: %v (the lease ends at its TTL)", job, err)
		}
	}()
	slot := l.Resources()[0]
	lctx, stop := l.Context(ctx) // ends if the lease is lost: the worker left
	defer stop()
	req, err := http.NewRequestWithContext(lctx, http.MethodGet, slot.Attributes["url"]+fmt.Sprintf("?job=%d", job), nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	return slot.Provider, nil
}
