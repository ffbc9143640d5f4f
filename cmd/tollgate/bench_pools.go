package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// A pools bench (--pools) starts one server per number of pools, each with
// that many pools, and spreads each case's pairs over them: caller i's
// k-th pair uses pool (k × callers + i) mod N, so that every pool gets
// pairs in turn. The servers share the rounds, like the cases of the
// one-pool bench, and each one's memory is read before the first pair
// (idle) and after the last.

// benchPoolServer is one server of a pools bench.
type benchPoolServer struct {
	tg      *benchTollgate
	n       int
	label   string          // ", b" for --tollgate-bin-b's
	seq     []atomic.Uint64 // per caller: its pairs so far
	rssIdle int64
}

// pool returns the pool of caller's next pair.
func (s *benchPoolServer) pool(caller int) string {
	k := s.seq[caller].Add(1) - 1
	return s.tg.pools[(k*uint64(len(s.seq))+uint64(caller))%uint64(len(s.tg.pools))]
}

func (s *benchPoolServer) cases() []benchCase {
	pids := []int{s.tg.proc.cmd.Process.Pid}
	return []benchCase{
		{name: fmt.Sprintf("%s, %d pools%s", caseStream, s.n, s.label), pids: pids, pair: func(ctx context.Context, caller int) error {
			l, err := s.tg.c.Acquire(ctx, s.pool(caller))
			if err != nil {
				return err
			}
			return l.Release(ctx)
		}},
		{name: fmt.Sprintf("%s, %d pools%s", caseUnary, s.n, s.label), pids: pids, pair: func(ctx context.Context, caller int) error {
			pool := s.pool(caller)
			resp, err := s.tg.lim.Acquire(ctx, &tollgatev1.AcquireRequest{Pool: pool})
			if err != nil {
				return err
			}
			_, err = s.tg.lim.Release(ctx, &tollgatev1.ReleaseRequest{Pool: pool, LeaseId: resp.GetLease().GetId()})
			return err
		}},
	}
}

// touchEach makes one pair in each pool, several at a time: a pool's
// first grant writes its first reservations, which the rounds, which
// measure pools in use, should not count.
func (s *benchPoolServer) touchEach(ctx context.Context) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, benchCreators)
	for range min(benchCreators, len(s.tg.pools)) {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(len(s.tg.pools)); i = next.Add(1) - 1 {
				pool := s.tg.pools[i]
				resp, err := s.tg.lim.Acquire(ctx, &tollgatev1.AcquireRequest{Pool: pool})
				if err == nil {
					_, err = s.tg.lim.Release(ctx, &tollgatev1.ReleaseRequest{Pool: pool, LeaseId: resp.GetLease().GetId()})
				}
				if err != nil {
					errs <- fmt.Errorf("a first pair in pool %s: %w", pool, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// runPoolsBench is tollgate bench --pools.
func runPoolsBench(ctx context.Context, o benchOptions, stdout, stderr io.Writer) error {
	var servers []*benchPoolServer
	defer func() {
		for _, s := range servers {
			s.tg.close()
		}
	}()
	var cases []benchCase
	bins := []string{o.bin}
	if o.binB != "" {
		bins = append(bins, o.binB)
	}
	for _, n := range o.pools {
		for bi, bin := range bins {
			start := time.Now()
			ob := o
			ob.bin = bin
			tg, err := startBenchTollgate(ctx, ob, n)
			if err != nil {
				return err
			}
			s := &benchPoolServer{tg: tg, n: n, seq: make([]atomic.Uint64, slices.Max(o.callers))}
			if bi > 0 {
				s.label = ", b"
			}
			servers = append(servers, s)
			s.rssIdle, _ = procRSS(tg.proc.cmd.Process.Pid)
			fmt.Fprintf(stderr, "server of %d pools%s: pid %d, pools created in %v\n", n, s.label,
				tg.proc.cmd.Process.Pid, time.Since(start).Round(time.Millisecond))
			cases = append(cases, s.cases()...)
		}
	}
	// Once every server is up, so that no server's pools sit idle while
	// the next one is set up.
	for _, s := range servers {
		start := time.Now()
		if err := s.touchEach(ctx); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "server of %d pools%s: a first pair in each in %v\n", s.n, s.label, time.Since(start).Round(time.Millisecond))
	}
	results, err := runBenchRounds(ctx, o, cases, stderr)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "Acquire + Release of one permit, spread over N pools (a server per N); %d round(s) of %v per case, interleaved; servers on loopback as separate processes, data directories on disk.\n\n", o.rounds, o.duration)
	fmt.Fprintln(stdout, "| callers | case | pairs/s | × 1st | p50 | p99 | CPU per pair | RSS idle → after | per pool idle → after |")
	fmt.Fprintln(stdout, "|---:|---|---:|---:|---:|---:|---:|---|---|")
	afterRSS := make([]int64, len(servers))
	for i, s := range servers {
		afterRSS[i], _ = procRSS(s.tg.proc.cmd.Process.Pid)
	}
	nb := len(bins)
	for _, n := range o.callers {
		for ci := range 2 {
			for si, s := range servers {
				base := si % nb // the first number of pools, same executable
				first := results[cases[2*base+ci].name][n]
				c := cases[2*si+ci]
				r := results[c.name][n]
				cpu := "—"
				if r.cpuKnown && r.pairs > 0 {
					cpu = fmtMicros(r.cpu / time.Duration(r.pairs))
				}
				perPool := "—"
				if extra := int64(s.n - servers[base].n); extra > 0 {
					perPool = fmt.Sprintf("%s → %s", fmtBytes((s.rssIdle-servers[base].rssIdle)/extra), fmtBytes((afterRSS[si]-afterRSS[base])/extra))
				}
				fmt.Fprintf(stdout, "| %d | %s | %s | %.2f | %s | %s | %s | %s → %s | %s |\n", n, c.name, fmtThousands(int64(r.rate())),
					r.rate()/first.rate(), fmtMicros(r.percentile(0.50)), fmtMicros(r.percentile(0.99)), cpu,
					fmtBytes(s.rssIdle), fmtBytes(afterRSS[si]), perPool)
			}
		}
	}
	fmt.Fprintf(stdout, "\n× 1st: pairs/s over those of the first number of pools (%d) of the same executable; per pool: RSS less that server's, over the extra pools.\n", o.pools[0])
	return nil
}

// fmtBytes formats a size in B, KB or MB (powers of 1024).
func fmtBytes(n int64) string {
	switch {
	case n >= 10<<20 || n <= -10<<20:
		return fmt.Sprintf("%d MB", n>>20)
	case n >= 10<<10 || n <= -10<<10:
		return fmt.Sprintf("%d KB", n>>10)
	}
	return strings.TrimSpace(fmt.Sprintf("%d B", n))
}
