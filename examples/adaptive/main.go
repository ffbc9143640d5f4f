// Command adaptive measures adaptive concurrency limits end to end: a
// Tollgate server and an HTTP backend on 127.0.0.1, and 3 client
// processes of 8 goroutines each calling the backend through client.Do.
// The backend answers 503 at once when more requests than its capacity
// are in flight; its capacity is 4, then 2, then it hangs, then it heals
// (issue 15's field report, and the simulator's DefaultFastFail). It
// prints the effective limit and the backend's counts every second, then
// the error rates, convergence times and pool events of the run.
//
//	go run ./examples/adaptive            # the full run: 3 minutes
//	go run ./examples/adaptive -short     # its first 16 seconds
//
// -probe-interval sets the pool's probe_interval (use 2s, the interval,
// to probe at one pace); -mark-event-interval the server's
// MarkEventInterval (negative: record every crossing).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/tollgate/tollgate/internal/events"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "adaptive:", err)
		os.Exit(1)
	}
}

// run runs the measurement, or with "clients" first one client process.
func run(ctx context.Context, args []string, out io.Writer) error {
	if len(args) > 0 && args[0] == "clients" {
		return runClients(ctx, args[1:], os.Stdin, out)
	}
	fs := flag.NewFlagSet("adaptive", flag.ContinueOnError)
	short := fs.Bool("short", false, "run only the first 16s (capacity 4)")
	probe := fs.Duration("probe-interval", 0, "the pool's probe_interval; 0 is the default (5 × interval)")
	events := fs.Bool("events", false, "list the pool's events")
	marks := fs.Duration("mark-event-interval", 0, "the server's MarkEventInterval; 0 is the default, negative records every crossing")
	if err := fs.Parse(args); err != nil {
		return err
	}
	sc := Issue15()
	if *short {
		sc = Short()
	}
	sc.Pool.Adaptive.ProbeInterval = *probe
	sc.MarkEventInterval = *marks
	self, err := os.Executable()
	if err != nil {
		return err
	}
	res, err := Run(ctx, sc, func(args []string) *exec.Cmd { return exec.CommandContext(ctx, self, args...) }, out)
	if err != nil {
		return err
	}
	if *events {
		for _, ev := range res.Log {
			fmt.Fprintf(out, "%6.1fs %s %s\n", ev.Time.Sub(res.Start).Seconds(), ev.Type, ev.Detail)
		}
	}
	res.Print(out)
	return nil
}

// Print writes the run's summary: error rates, convergence times, events.
func (r Result) Print(w io.Writer) {
	s := time.Second
	ph := r.Scenario.Phases
	end := ph[len(ph)-1].Until
	fmt.Fprintf(w, "\nerror rate (503s and hung requests / requests): first 2s %.1f%%, whole run %.2f%%\n",
		100*r.ErrorRate(0, 2*s), 100*r.ErrorRate(0, end))
	if cut, ok := r.FirstEvent(events.PoolThrottled); ok {
		reqs, _ := r.Requests(0, cut)
		fmt.Fprintf(w, "before the first cut (at %.2fs, %d requests): %.1f%%\n", cut.Seconds(), reqs, 100*r.ErrorRate(0, cut))
	}
	if len(ph) == 4 { // Issue15
		fmt.Fprintf(w, "at the capacity of 4, 30-90s: %.2f%% (mean effective limit %.2f)\n", 100*r.ErrorRate(30*s, 90*s), r.MeanEffective(30*s, 90*s))
		fmt.Fprintf(w, "after healing, 140-180s:      %.2f%% (mean effective limit %.2f)\n", 100*r.ErrorRate(140*s, 180*s), r.MeanEffective(140*s, 180*s))
	} else {
		from := max(0, end-5*s)
		fmt.Fprintf(w, "last 5s: %.2f%% (mean effective limit %.2f)\n", 100*r.ErrorRate(from, end), r.MeanEffective(from, end))
	}
	at := func(name string, from time.Duration, v int64, below bool) {
		if d, ok := r.FirstAt(from, v, below); ok {
			fmt.Fprintf(w, "%s: %.1fs\n", name, d.Seconds())
		} else {
			fmt.Fprintf(w, "%s: never\n", name)
		}
	}
	at("16 -> 4 (from the start)", 0, 4, true)
	for i := 1; i < len(ph); i++ {
		c, from := ph[i].Capacity, ph[i-1].Until
		switch {
		case c > ph[i-1].Capacity:
			at(fmt.Sprintf("back to %d after %q", c, ph[i].Name), from, c, false)
		case c > 0:
			at(fmt.Sprintf("down to %d after %q", c, ph[i].Name), from, c, true)
		default:
			at(fmt.Sprintf("to the floor of 1 after %q", ph[i].Name), from, 1, true)
		}
	}
	fmt.Fprintf(w, "events recorded: %v; mark events suppressed: %v\n", r.Events, r.Suppressed)
	fmt.Fprintf(w, "outcomes seen by the clients: %+v; reported to the pool: %+v\n", r.Clients, r.Reported)
}
