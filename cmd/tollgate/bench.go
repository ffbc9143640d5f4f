package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
)

// newBenchCmd is `tollgate bench`: Acquire + Release pairs of one permit
// against a Tollgate server (and, with --peer redis, a Redis semaphore),
// measured side by side in one interleaved run, printed as a Markdown
// table.
func newBenchCmd() *cobra.Command {
	o := benchOptions{}
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure Acquire + Release pairs per second against a server (and a Redis semaphore)",
		Long: `Measure Acquire + Release pairs of one permit, side by side in one run:

  Tollgate stream   the Go client library on its one Session stream:
                    client.Acquire, then Lease.Release (which waits for the
                    server's answer) or Lease.ReleaseAsync (which does not)
  Tollgate unary    the unary LimiterService.Acquire and Release calls
  2 no-op calls     two grpc.health.v1.Health/Check calls of the same server:
                    the floor of two gRPC round trips
  Redis semaphore   with --peer redis: a sorted set, acquired by a Lua script
                    (drop expired members, ZCARD, ZADD) and released by ZREM,
                    through go-redis, against a redis-server started here

Each case runs with each number of --callers (goroutines doing pairs back to
back) for --duration, and the cases take turns for --rounds rounds, so that
they share the machine's noise. The servers run as separate processes on
loopback: a 'tollgate serve' started from this executable with a temporary
data directory (or the server at --server), and redis-server on a free port
(Debian: apt-get install redis-server). CPU per pair is the CPU time of the
server process and of this process together, divided by the pairs (Linux
only; not measured for a server given with --server).

With --pools N1,N2,... it starts a server per number of pools instead, each
with that many pools, makes one pair in each pool, then runs the stream and
unary cases of every server in turn with the pairs spread over its pools,
and adds each server's resident memory, idle and after the rounds.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.check(); err != nil {
				return err
			}
			return runBench(cmd.Context(), o, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.server, "server", "", "bench the Tollgate server at host:port instead of starting one (its pool tollgate-bench-PID is created and deleted)")
	f.StringVar(&o.peer, "peer", "", `also bench a peer: "redis" (a Redis semaphore; needs redis-server on PATH)`)
	f.IntSliceVar(&o.callers, "callers", []int{1, 16, 64}, "numbers of concurrent callers, comma-separated")
	f.DurationVar(&o.duration, "duration", 4*time.Second, "time each case runs per round")
	f.IntVar(&o.rounds, "rounds", 3, "rounds: every case runs once per round, in turn")
	f.IntSliceVar(&o.pools, "pools", nil, "numbers of pools, comma-separated: a server per number, with that many pools, the pairs spread over them (stream and unary cases only)")
	f.DurationVar(&o.warmUp, "warm-up", 0, "time each case runs before the rounds (default: a quarter of --duration, at most 200ms); with --pools, long enough for every pool's first grant")
	f.StringVar(&o.bin, "tollgate-bin", "", "the tollgate executable to start the server from (default: this one)")
	_ = f.MarkHidden("tollgate-bin")
	f.StringVar(&o.binB, "tollgate-bin-b", "", "with --pools: also bench servers started from this executable (before/after, in one interleaved run)")
	_ = f.MarkHidden("tollgate-bin-b")
	return cmd
}

// benchOptions are tollgate bench's flags.
type benchOptions struct {
	server   string
	peer     string
	callers  []int
	duration time.Duration
	rounds   int
	pools    []int
	warmUp   time.Duration
	bin      string
	binB     string
}

func (o benchOptions) check() error {
	if o.peer != "" && o.peer != "redis" {
		return usageErrorf(`--peer %q is not known; the peer is "redis"`, o.peer)
	}
	if len(o.callers) == 0 {
		return usageErrorf("--callers is empty; give numbers of callers such as 1,16,64")
	}
	for _, n := range o.callers {
		if n < 1 || n > 4096 {
			return usageErrorf("--callers %d is out of range: give 1 to 4096", n)
		}
	}
	if o.duration <= 0 {
		return usageErrorf("--duration must be positive, not %v", o.duration)
	}
	for _, n := range o.pools {
		if n < 1 || n > 1_000_000 {
			return usageErrorf("--pools %d is out of range: give 1 to 1000000", n)
		}
	}
	if len(o.pools) > 0 && (o.server != "" || o.peer != "") {
		return usageErrorf("--pools starts a server per number of pools: give it without --server and --peer")
	}
	if o.rounds < 1 {
		return usageErrorf("--rounds must be at least 1, not %d", o.rounds)
	}
	return nil
}

// benchCase is one thing measured: a pair of calls, and the processes
// whose CPU it uses besides this one.
type benchCase struct {
	name string
	pids []int
	pair func(ctx context.Context, caller int) error
}

// benchResult is one case at one number of callers, summed over rounds.
type benchResult struct {
	pairs     int64
	elapsed   time.Duration
	cpu       time.Duration
	cpuKnown  bool
	latencies []time.Duration
}

// runBench starts what it benches, runs the rounds and prints the table.
func runBench(ctx context.Context, o benchOptions, stdout, stderr io.Writer) error {
	var cleanups []func()
	defer func() {
		for _, f := range slices.Backward(cleanups) {
			f()
		}
	}()
	if len(o.pools) > 0 {
		return runPoolsBench(ctx, o, stdout, stderr)
	}
	tg, err := startBenchTollgate(ctx, o, 1)
	if err != nil {
		return err
	}
	cleanups = append(cleanups, tg.close)
	cases := tg.cases()
	if o.peer == "redis" {
		rd, err := startBenchRedis(ctx, slices.Max(o.callers))
		if err != nil {
			return err
		}
		cleanups = append(cleanups, rd.close)
		cases = append(cases, rd.benchCase())
	}
	results, err := runBenchRounds(ctx, o, cases, stderr)
	if err != nil {
		return err
	}
	printBench(stdout, o, cases, results)
	return nil
}

// runBenchRounds warms the cases up, then runs every case with every
// number of callers once per round, taking turns.
func runBenchRounds(ctx context.Context, o benchOptions, cases []benchCase, stderr io.Writer) (map[string]map[int]*benchResult, error) {
	for _, c := range cases { // warm up: connections, code paths, pools
		if _, err := runBenchCell(ctx, c, slices.Max(o.callers), max(o.warmUp, min(o.duration/4, 200*time.Millisecond))); err != nil {
			return nil, fmt.Errorf("%s: %w", c.name, err)
		}
	}
	results := make(map[string]map[int]*benchResult)
	for _, c := range cases {
		results[c.name] = make(map[int]*benchResult)
		for _, n := range o.callers {
			results[c.name][n] = &benchResult{}
		}
	}
	for round := range o.rounds {
		fmt.Fprintf(stderr, "round %d of %d\n", round+1, o.rounds)
		for _, n := range o.callers {
			for i := range cases {
				c := cases[(i+round)%len(cases)] // a different case first each round
				r, err := runBenchCell(ctx, c, n, o.duration)
				if err != nil {
					return nil, fmt.Errorf("%s, %d callers: %w", c.name, n, err)
				}
				results[c.name][n].add(r)
			}
		}
	}
	return results, nil
}

// runBenchCell runs c with n callers for d.
func runBenchCell(ctx context.Context, c benchCase, n int, d time.Duration) (*benchResult, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	cpu0, known0 := benchCPU(c.pids)
	lats := make([][]time.Duration, n)
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	for i := range n {
		wg.Go(func() {
			l := make([]time.Duration, 0, 1024)
			for t := time.Now(); t.Before(deadline) && ctx.Err() == nil; {
				if err := c.pair(ctx, i); err != nil {
					cancel(err)
					return
				}
				now := time.Now()
				l = append(l, now.Sub(t))
				t = now
			}
			lats[i] = l
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}
	cpu1, known1 := benchCPU(c.pids)
	r := &benchResult{elapsed: elapsed, cpu: cpu1 - cpu0, cpuKnown: known0 && known1}
	for _, l := range lats {
		r.pairs += int64(len(l))
		r.latencies = append(r.latencies, l...)
	}
	return r, nil
}

func (r *benchResult) add(o *benchResult) {
	r.pairs += o.pairs
	r.elapsed += o.elapsed
	r.cpu += o.cpu
	r.cpuKnown = o.cpuKnown && (r.cpuKnown || len(r.latencies) == 0)
	r.latencies = append(r.latencies, o.latencies...)
}

func (r *benchResult) rate() float64 { return float64(r.pairs) / r.elapsed.Seconds() }

// percentile returns the p-th percentile (0 < p < 1) of the latencies.
func (r *benchResult) percentile(p float64) time.Duration {
	if len(r.latencies) == 0 {
		return 0
	}
	slices.Sort(r.latencies)
	return r.latencies[min(len(r.latencies)-1, int(p*float64(len(r.latencies))))]
}

// printBench prints the results as a Markdown table, then the ratios the
// targets are stated in.
func printBench(w io.Writer, o benchOptions, cases []benchCase, results map[string]map[int]*benchResult) {
	fmt.Fprintf(w, "Acquire + Release of one permit; %d round(s) of %v per case, interleaved; servers on loopback as separate processes.\n\n", o.rounds, o.duration)
	fmt.Fprintln(w, "| callers | case | pairs/s | p50 | p99 | CPU per pair |")
	fmt.Fprintln(w, "|---:|---|---:|---:|---:|---:|")
	for _, n := range o.callers {
		for _, c := range cases {
			r := results[c.name][n]
			cpu := "—"
			if r.cpuKnown && r.pairs > 0 {
				cpu = fmtMicros(r.cpu / time.Duration(r.pairs))
			}
			fmt.Fprintf(w, "| %d | %s | %s | %s | %s | %s |\n", n, c.name, fmtThousands(int64(r.rate())),
				fmtMicros(r.percentile(0.50)), fmtMicros(r.percentile(0.99)), cpu)
		}
	}
	fmt.Fprintln(w)
	for _, n := range o.callers {
		var parts []string
		unary, noop := results[caseUnary][n], results[caseNoop][n]
		if rd := results[caseRedis]; rd != nil {
			parts = append(parts, fmt.Sprintf("Tollgate stream ÷ Redis pairs/s %.2f× (Release), %.2f× (ReleaseAsync)",
				results[caseStream][n].rate()/rd[n].rate(), results[caseStreamAsync][n].rate()/rd[n].rate()))
		}
		parts = append(parts, fmt.Sprintf("Tollgate unary ÷ 2 no-op calls, time per pair, %.2f×", noop.rate()/unary.rate()))
		fmt.Fprintf(w, "- %d caller(s): %s\n", n, strings.Join(parts, "; "))
	}
}

// The cases' names.
const (
	caseStream      = "Tollgate stream (Go client, Release)"
	caseStreamAsync = "Tollgate stream (Go client, ReleaseAsync)"
	caseUnary       = "Tollgate unary"
	caseNoop        = "2 no-op gRPC calls"
	caseRedis       = "Redis ZSET+Lua semaphore (go-redis)"
)

func fmtMicros(d time.Duration) string {
	us := float64(d) / float64(time.Microsecond)
	if us >= 100 {
		return fmtThousands(int64(us+0.5)) + " µs"
	}
	return strconv.FormatFloat(us, 'f', 1, 64) + " µs"
}

func fmtThousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
