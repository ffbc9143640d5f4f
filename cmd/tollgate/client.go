package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// newClientCmd is "tollgate client": the client sessions connected to the
// server, through AdminService.ListClients.
func newClientCmd(g *globals) *cobra.Command {
	var format outputFlag
	cmd := &cobra.Command{
		Use:   "client",
		Short: "List the clients connected to the server and what they hold",
		Long: `List the clients connected to the server: one per open Session stream (the
Go client opens one per client.Client), with what each holds.

Output is readable text; -o json prints the API's messages as JSON.`,
	}
	cmd.PersistentFlags().VarP(&format, "output", "o", "output format: text or json")
	out := func(cmd *cobra.Command) *printer { return format.printer(cmd.OutOrStdout()) }
	cmd.AddCommand(newClientListCmd(g, out))
	return cmd
}

func newClientListCmd(g *globals, out func(*cobra.Command) *printer) *cobra.Command {
	var pool, clientID string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the connected client sessions",
		Long: `List the connected client sessions in the order they connected: session id,
client id (from the client's hello), peer address, authenticated identity,
leases held (count and weight, overall and per pool), rate shares, and when
the session connected and last sent a request.

--pool keeps the sessions holding a lease or a rate share in that pool and
counts their holdings in it only; --client keeps the sessions of that client
id. Leases acquired without a session (unary Acquire, grpcurl) or whose
session has ended are not listed; a last line counts them, and
"tollgate lease list POOL" shows them. With -o json, all pages are printed as
one ListClientsResponse.`,
		Example: `  tollgate client list
  tollgate client list --pool orders-db
  tollgate client list --client billing-7 -o json`,
		Args: exactArgs(),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.adminCall(cmd, func(ctx context.Context, adm tollgatev1.AdminServiceClient) error {
				all := &tollgatev1.ListClientsResponse{}
				req := &tollgatev1.ListClientsRequest{Pool: pool, ClientId: clientID, PageSize: 1000}
				for {
					resp, err := adm.ListClients(ctx, req)
					if err != nil {
						return err
					}
					all.Clients = append(all.Clients, resp.GetClients()...)
					all.UnattachedLeases, all.UnattachedWeight = resp.GetUnattachedLeases(), resp.GetUnattachedWeight()
					for _, u := range resp.GetUnreachable() {
						if !slices.Contains(all.Unreachable, u) {
							all.Unreachable = append(all.Unreachable, u)
						}
					}
					if resp.GetNextPageToken() == "" {
						break
					}
					req.PageToken = resp.GetNextPageToken()
				}
				return out(cmd).clients(all, pool)
			})
		},
	}
	cmd.Flags().StringVar(&pool, "pool", "", "only the sessions holding a lease or rate share in this pool")
	cmd.Flags().StringVar(&clientID, "client", "", "only the sessions of this client id")
	return cmd
}

// clients prints a table of client sessions and a line counting the leases
// held without one, or with -o json, resp. pool is the --pool filter, for
// the hint.
func (p *printer) clients(resp *tollgatev1.ListClientsResponse, pool string) error {
	if p.json {
		return p.message(resp)
	}
	if len(resp.GetClients()) == 0 {
		fmt.Fprintln(p.w, "no client sessions")
	} else {
		tw := tabwriter.NewWriter(p.w, 0, 0, 2, ' ', 0)
		// On a cluster whose sessions are on several servers: which one
		// each is on (session ids are each server's own).
		servers := map[string]bool{}
		for _, c := range resp.GetClients() {
			servers[c.GetServer()] = true
		}
		serverCol := len(servers) > 1
		if serverCol {
			fmt.Fprint(tw, "SESSION\tSERVER\t")
		} else {
			fmt.Fprint(tw, "SESSION\t")
		}
		fmt.Fprintln(tw, "CLIENT\tPEER\tIDENTITY\tLEASES\tWEIGHT\tSHARES\tCONNECTED\tLAST_ACTIVE\tPOOLS")
		for _, c := range resp.GetClients() {
			fmt.Fprint(tw, c.GetSessionId()+"\t")
			if serverCol {
				fmt.Fprint(tw, orDash(c.GetServer())+"\t")
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\n", orDash(c.GetClientId()), c.GetPeerAddress(), orDash(c.GetIdentity()),
				c.GetLeases(), c.GetWeight(), shareText(c.GetShares(), c.GetShareRate()),
				timestamp(c.GetConnectTime()), timestamp(c.GetLastActivityTime()), poolHoldingsText(c.GetPools()))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(resp.GetUnreachable()) > 0 {
		fmt.Fprintf(p.w, "missing: the sessions of %s (no answer within the timeout)\n", strings.Join(resp.GetUnreachable(), ", "))
	}
	if n := resp.GetUnattachedLeases(); n > 0 {
		where := "POOL"
		if pool != "" {
			where = pool
		}
		what := fmt.Sprintf("%d leases (weight %d) are", n, resp.GetUnattachedWeight())
		if n == 1 {
			what = fmt.Sprintf("1 lease (weight %d) is", resp.GetUnattachedWeight())
		}
		_, err := fmt.Fprintf(p.w, "%s held without a session (unary acquires, or sessions that ended); see tollgate lease list %s\n", what, where)
		return err
	}
	return nil
}

// shareText is "-" for no shares, else "N (R/s)".
func shareText(n int64, rate float64) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprintf("%d (%s/s)", n, strconv.FormatFloat(rate, 'g', 6, 64))
}

// poolHoldingsText renders per-pool holdings as "db 2/3, api share 40/s":
// leases/weight, then the rate of any shares.
func poolHoldingsText(ps []*tollgatev1.ClientPoolHoldings) string {
	if len(ps) == 0 {
		return "-"
	}
	parts := make([]string, 0, len(ps))
	for _, h := range ps {
		s := h.GetPool()
		if h.GetLeases() > 0 {
			s += fmt.Sprintf(" %d/%d", h.GetLeases(), h.GetWeight())
		}
		if h.GetShares() > 0 {
			s += " share " + strconv.FormatFloat(h.GetShareRate(), 'g', 6, 64) + "/s"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ", ")
}

// orDash is s, or "-" when it is empty.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
