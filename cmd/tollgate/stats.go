package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

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
		Long: `Show a table of the named pools (all pools when none is named): held of the
limit (with the effective limit when adaptive control lowered it), waiters,
the lease counters (granted, released, expired, revoked, rejected, wait
timeouts) and utilisation (held / effective limit).

On a terminal the table is redrawn every --interval until Ctrl-C. When the
output is not a terminal, or with --once, it is printed once; -o json prints
it once as a ListPoolsResponse.`,
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
			snapshot := func() (*tollgatev1.ListPoolsResponse, error) {
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

// fetchStats gets the named pools with GetPool, or every pool with
// ListPools, as one ListPoolsResponse.
func fetchStats(ctx context.Context, adm tollgatev1.AdminServiceClient, names []string) (*tollgatev1.ListPoolsResponse, error) {
	all := &tollgatev1.ListPoolsResponse{}
	if len(names) > 0 {
		for _, n := range names {
			resp, err := adm.GetPool(ctx, &tollgatev1.GetPoolRequest{Name: n})
			if err != nil {
				return nil, err
			}
			all.Pools = append(all.Pools, resp.GetPool())
			all.Statuses = append(all.Statuses, resp.GetStatus())
		}
		return all, nil
	}
	req := &tollgatev1.ListPoolsRequest{PageSize: 1000}
	for {
		resp, err := adm.ListPools(ctx, req)
		if err != nil {
			return nil, err
		}
		all.Pools = append(all.Pools, resp.GetPools()...)
		all.Statuses = append(all.Statuses, resp.GetStatuses()...)
		if resp.GetNextPageToken() == "" {
			return all, nil
		}
		req.PageToken = resp.GetNextPageToken()
	}
}

// stats prints the stats table, or with -o json, resp.
func (p *printer) stats(resp *tollgatev1.ListPoolsResponse) error {
	if p.json {
		return p.message(resp)
	}
	if len(resp.GetPools()) == 0 {
		_, err := fmt.Fprintln(p.w, "no pools")
		return err
	}
	tw := tabwriter.NewWriter(p.w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "POOL\tHELD\tWAITING\tGRANTED\tRELEASED\tEXPIRED\tREVOKED\tREJECTED\tWAIT_TIMEOUTS\tUTIL")
	for i, pool := range resp.GetPools() {
		var st *tollgatev1.PoolStatus
		if i < len(resp.GetStatuses()) {
			st = resp.GetStatuses()[i]
		}
		held, util := strconv.FormatInt(st.GetHeld(), 10), "-"
		if limit := pool.GetConcurrencyLimit(); limit != 0 {
			eff := st.GetEffectiveConcurrencyLimit()
			if eff <= 0 || eff > limit {
				eff = limit
			}
			held += "/" + strconv.FormatInt(limit, 10)
			if eff != limit {
				held += " (eff " + strconv.FormatInt(eff, 10) + ")"
			}
			util = strconv.FormatFloat(100*float64(st.GetHeld())/float64(eff), 'f', 0, 64) + "%"
		}
		if st.GetSuspended() {
			held += " suspended"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n", pool.GetName(), held, st.GetWaiting(),
			st.GetGranted(), st.GetReleased(), st.GetExpired(), st.GetRevoked(), st.GetRejected(), st.GetWaitTimeouts(), util)
	}
	return tw.Flush()
}
