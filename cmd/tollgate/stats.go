package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"
	"google.golang.org/protobuf/types/known/durationpb"

	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// clearScreen moves the cursor home and clears the terminal.
const clearScreen = "\x1b[H\x1b[2J"

// isTerminal reports whether w is a terminal; tests replace it.
var isTerminal = func(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// newStatsCmd is "tollgate stats": a table of pools' counters, refreshed
// in place on a terminal.
func newStatsCmd(g *globals) *cobra.Command {
	var (
		interval time.Duration
		format   outputFlag
		once     bool
	)
	cmd := &cobra.Command{
		Use:   "stats [POOL...]",
		Short: "Show a live table of pools' usage and counters",
		Long: `Show a table of the named pools (all pools when none is named), from
AdminService.GetStats: held of the limit (with the effective limit when
adaptive control lowered it), waiters, the lease counters (granted,
released, expired, revoked, rejected, wait timeouts), the wait-time
percentiles of the leases granted over the last minute (p50, p90, p99 and
the longest wait; "-" when nothing was granted in it) and utilisation (held
/ effective concurrency limit; for a pool with only a rate, the fraction of
its rate granted over the last minute).

On a terminal the table is redrawn every --interval until Ctrl-C. When the
output is not a terminal, or with --once, it is printed once; -o json prints
it once as a GetStatsResponse.`,
		Example: `  tollgate stats
  tollgate stats orders-db payments --interval 5s
  tollgate stats -o json --once`,
		PreRunE: func(cmd *cobra.Command, args []string) error {
			if interval <= 0 {
				return usageErrorf("--interval must be positive, not %v", interval)
			}
			for _, a := range args {
				if a == "" {
					return usageErrorf("a POOL is empty")
				}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.dial()
			if err != nil {
				return err
			}
			defer c.Close()
			adm := tollgatev1.NewAdminServiceClient(c.Conn())
			out := cmd.OutOrStdout()
			p := format.printer(out)
			snapshot := func() (*tollgatev1.GetStatsResponse, error) {
				ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
				defer cancel()
				return fetchStats(ctx, adm, args)
			}
			if once || p.json || !isTerminal(out) {
				resp, err := snapshot()
				if err != nil {
					return err
				}
				return p.stats(resp)
			}
			tick := time.NewTicker(interval)
			defer tick.Stop()
			for {
				resp, err := snapshot()
				if err != nil {
					if cmd.Context().Err() != nil {
						return nil // Ctrl-C
					}
					return err
				}
				fmt.Fprint(out, clearScreen)
				fmt.Fprintf(out, "%s  every %v  (Ctrl-C to stop)\n\n", time.Now().Format(time.TimeOnly), interval)
				if err := p.stats(resp); err != nil {
					return err
				}
				select {
				case <-cmd.Context().Done():
					return nil
				case <-tick.C:
				}
			}
		},
	}
	f := cmd.Flags()
	f.DurationVar(&interval, "interval", time.Second, "how often to refresh the table on a terminal")
	f.VarP(&format, "output", "o", "output format: text or json (json prints once)")
	f.BoolVar(&once, "once", false, "print the table once, even on a terminal")
	return cmd
}

// fetchStats gets the named pools' statistics, or every pool's, with
// GetStats, as one GetStatsResponse.
func fetchStats(ctx context.Context, adm tollgatev1.AdminServiceClient, names []string) (*tollgatev1.GetStatsResponse, error) {
	all := &tollgatev1.GetStatsResponse{}
	if len(names) > 0 {
		for _, n := range names {
			resp, err := adm.GetStats(ctx, &tollgatev1.GetStatsRequest{Pool: n})
			if err != nil {
				return nil, err
			}
			all.Stats = append(all.Stats, resp.GetStats()...)
		}
		return all, nil
	}
	req := &tollgatev1.GetStatsRequest{PageSize: 1000}
	for {
		resp, err := adm.GetStats(ctx, req)
		if err != nil {
			return nil, err
		}
		all.Stats = append(all.Stats, resp.GetStats()...)
		for _, u := range resp.GetUnreachable() {
			if !slices.Contains(all.Unreachable, u) {
				all.Unreachable = append(all.Unreachable, u)
			}
		}
		if resp.GetNextPageToken() == "" {
			return all, nil
		}
		req.PageToken = resp.GetNextPageToken()
	}
}

// stats prints the stats table, or with -o json, resp.
func (p *printer) stats(resp *tollgatev1.GetStatsResponse) error {
	if p.json {
		return p.message(resp)
	}
	if len(resp.GetStats()) == 0 {
		if _, err := fmt.Fprintln(p.w, "no pools"); err != nil {
			return err
		}
		return p.unreachable(resp.GetUnreachable())
	}
	tw := tabwriter.NewWriter(p.w, 0, 0, 2, ' ', 0)
	// On a cluster whose pools are on several servers: which one leads
	// each pool.
	owners := map[string]bool{}
	for _, ps := range resp.GetStats() {
		owners[ps.GetStatus().GetOwner()] = true
	}
	ownerCol := len(owners) > 1
	if ownerCol {
		fmt.Fprint(tw, "POOL\tOWNER\t")
	} else {
		fmt.Fprint(tw, "POOL\t")
	}
	fmt.Fprintln(tw, "HELD\tWAITING\tGRANTED\tRELEASED\tEXPIRED\tREVOKED\tREJECTED\tWAIT_TIMEOUTS\tWAIT_P50\tWAIT_P90\tWAIT_P99\tWAIT_MAX\tUTIL")
	for _, ps := range resp.GetStats() {
		st := ps.GetStatus()
		held := strconv.FormatInt(st.GetHeld(), 10)
		util := strconv.FormatFloat(100*ps.GetUtilisation(), 'f', 0, 64) + "%"
		if limit := ps.GetConcurrencyLimit(); limit != 0 {
			eff := st.GetEffectiveConcurrencyLimit()
			if eff <= 0 || eff > limit {
				eff = limit
			}
			held += "/" + strconv.FormatInt(limit, 10)
			if eff != limit {
				held += " (eff " + strconv.FormatInt(eff, 10) + ")"
			}
		}
		if st.GetResources() > 0 || st.GetProviders() > 0 { // an active or passive pool: its instances
			held += " [" + strconv.FormatInt(st.GetResourcesFree(), 10) + " of " + strconv.FormatInt(st.GetResources(), 10) + " free]"
		}
		if st.GetSuspended() {
			held += " suspended"
		}
		wt := ps.GetWaitTimes()
		p50, p90, p99, maxWait := "-", "-", "-", "-"
		if wt.GetCount() > 0 {
			p50, p90, p99, maxWait = waitText(wt.GetP50()), waitText(wt.GetP90()), waitText(wt.GetP99()), waitText(wt.GetMax())
		}
		fmt.Fprint(tw, ps.GetPool()+"\t")
		if ownerCol {
			fmt.Fprint(tw, orDash(st.GetOwner())+"\t")
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\n", held, st.GetWaiting(),
			st.GetGranted(), st.GetReleased(), st.GetExpired(), st.GetRevoked(), st.GetRejected(), st.GetWaitTimeouts(),
			p50, p90, p99, maxWait, util)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return p.unreachable(resp.GetUnreachable())
}

// waitText formats a wait time with about three significant digits: "0",
// "850µs", "12.3ms", "4.21s".
func waitText(d *durationpb.Duration) string {
	v := d.AsDuration()
	switch {
	case v <= 0:
		return "0"
	case v < time.Millisecond:
		return v.Round(time.Microsecond).String()
	case v < time.Second:
		return v.Round(100 * time.Microsecond).String()
	case v < time.Minute:
		return v.Round(10 * time.Millisecond).String()
	}
	return v.Round(time.Second).String()
}

// unreachable says which servers of the cluster did not answer, so that
// their pools are missing from what was printed.
func (p *printer) unreachable(servers []string) error {
	if len(servers) == 0 {
		return nil
	}
	_, err := fmt.Fprintf(p.w, "missing: the pools of %s (no answer within the timeout)\n", strings.Join(servers, ", "))
	return err
}
