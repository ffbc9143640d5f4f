package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/tollgate/tollgate/client"
)

// serve runs a worker: an HTTP endpoint that runs jobs, whose slots it
// offers to the pool for as long as it runs. A job takes -work. If the
// worker is ever asked to run more jobs at once than it has slots, it
// refuses the extra one and says so: with Tollgate in front that never
// happens.
func serve(ctx context.Context, addr, pool string, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	id := fs.String("id", "", "this worker's id (required)")
	slots := fs.Int("slots", 2, "jobs this worker runs at once")
	work := fs.Duration("work", 20*time.Millisecond, "how long a job takes")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *id == "" || *slots < 1 {
		return fmt.Errorf("serve needs -id and -slots of at least 1")
	}

	var running, done atomic.Int64
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	web := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := running.Add(1)
		defer running.Add(-1)
		if n > int64(*slots) {
			fmt.Fprintf(out, "OVERLOAD: %d jobs at once on %d slots\n", n, *slots)
			http.Error(w, "overloaded", http.StatusServiceUnavailable)
			return
		}
		time.Sleep(*work) // the job
		done.Add(1)
		fmt.Fprintf(w, "%s ran job %s\n", *id, r.URL.Query().Get("job"))
	})}
	go func() { _ = web.Serve(lis) }()
	defer web.Close()

	c, err := client.Dialer{ClientID: "worker-" + *id}.Dial(addr)
	if err != nil {
		return err
	}
	defer c.Close()
	url := "http://" + lis.Addr().String() + "/job"
	offer := make([]client.Resource, *slots)
	for i := range offer {
		offer[i] = client.Resource{ID: fmt.Sprintf("%s/slot-%d", *id, i+1), Attributes: map[string]string{"url": url}}
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	p, err := c.NewProvider(rctx, pool, *id, client.WithProviderTTL(3*time.Second), client.WithResources(offer...))
	cancel()
	if err != nil {
		return err
	}
	defer p.Close() // the slots leave the pool at once
	fmt.Fprintf(out, "worker %s offers %d slots at %s\n", *id, *slots, url)
	select {
	case <-ctx.Done():
	case <-p.Done():
		return p.Err()
	}
	fmt.Fprintf(out, "worker %s ran %d jobs\n", *id, done.Load())
	return nil
}
