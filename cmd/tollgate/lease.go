package main

import (
	"context"
	"fmt"
	"strconv"
	"text/tabwriter"

	"github.com/spf13/cobra"

	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// newLeaseCmd is "tollgate lease": listing, showing and revoking a pool's
// live leases through AdminService.
func newLeaseCmd(g *globals) *cobra.Command {
	var format outputFlag
	cmd := &cobra.Command{
		Use:   "lease",
		Short: "List, inspect and revoke the live leases of a pool",
		Long: `List, inspect and revoke the live leases of a pool. A lease is named by its
pool and its id: the signed id "<fencing token>.<tag>" that acquire prints,
or the bare fencing token (the number events and lease list show).

Output is readable text; -o json prints the API's messages as JSON.`,
	}
	cmd.PersistentFlags().VarP(&format, "output", "o", "output format: text or json")
	out := func(cmd *cobra.Command) *printer { return format.printer(cmd.OutOrStdout()) }
	cmd.AddCommand(newLeaseListCmd(g, out), newLeaseGetCmd(g, out), newLeaseRevokeCmd(g, out))
	return cmd
}

func newLeaseListCmd(g *globals, out func(*cobra.Command) *printer) *cobra.Command {
	var clientID string
	cmd := &cobra.Command{
		Use:   "list POOL",
		Short: "List a pool's live leases",
		Long: `List the live leases of POOL, oldest grant first, with their weight, holder
and expiry. --client keeps only the leases of that client id. With -o json,
all pages are printed as one ListLeasesResponse.`,
		Example: `  tollgate lease list orders-db
  tollgate lease list orders-db --client billing-7 -o json`,
		Args: exactArgs("POOL"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.adminCall(cmd, func(ctx context.Context, adm tollgatev1.AdminServiceClient) error {
				all := &tollgatev1.ListLeasesResponse{}
				req := &tollgatev1.ListLeasesRequest{Pool: args[0], ClientId: clientID, PageSize: 1000}
				for {
					resp, err := adm.ListLeases(ctx, req)
					if err != nil {
						return err
					}
					all.Leases = append(all.Leases, resp.GetLeases()...)
					if resp.GetNextPageToken() == "" {
						break
					}
					req.PageToken = resp.GetNextPageToken()
				}
				return out(cmd).leases(all)
			})
		},
	}
	cmd.Flags().StringVar(&clientID, "client", "", "only the leases of this client id")
	return cmd
}

func newLeaseGetCmd(g *globals, out func(*cobra.Command) *printer) *cobra.Command {
	return &cobra.Command{
		Use:   "get POOL ID",
		Short: "Show a live lease",
		Long:  `Show the live lease ID of POOL: its weight, fencing token, holder, TTL and expiry.`,
		Example: `  tollgate lease get orders-db 42
  tollgate lease get orders-db 42 -o json`,
		Args: exactArgs("POOL", "ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.adminCall(cmd, func(ctx context.Context, adm tollgatev1.AdminServiceClient) error {
				resp, err := adm.GetLease(ctx, &tollgatev1.GetLeaseRequest{Pool: args[0], LeaseId: args[1]})
				if err != nil {
					return err
				}
				return out(cmd).lease(resp, resp.GetLease())
			})
		},
	}
}

func newLeaseRevokeCmd(g *globals, out func(*cobra.Command) *printer) *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "revoke POOL ID",
		Short: "Revoke a live lease at once",
		Long: `Revoke the live lease ID of POOL at once: its permits go back to the pool,
its holder is told on its session stream (with --reason), and its next renew
or release fails with NOT_FOUND (LEASE_REVOKED). The holder should stop the
work the lease protected; a protected system that checks fencing tokens
refuses it anyway once a newer lease is used.`,
		Example: `  tollgate lease revoke orders-db 42
  tollgate lease revoke orders-db 42 --reason "stuck job, paged on-call"`,
		Args: exactArgs("POOL", "ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.adminCall(cmd, func(ctx context.Context, adm tollgatev1.AdminServiceClient) error {
				resp, err := adm.RevokeLease(ctx, &tollgatev1.RevokeLeaseRequest{Pool: args[0], LeaseId: args[1], Reason: reason})
				if err != nil {
					return err
				}
				p := out(cmd)
				if p.json {
					return p.message(resp)
				}
				_, err = fmt.Fprintf(p.w, "revoked lease %s of pool %s\n", args[1], args[0])
				return err
			})
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", `why, told to the holder (at most 512 bytes; default "revoked by an operator")`)
	return cmd
}

// lease prints a lease; with -o json it prints resp.
func (p *printer) lease(resp *tollgatev1.GetLeaseResponse, l *tollgatev1.Lease) error {
	if p.json {
		return p.message(resp)
	}
	tw := tabwriter.NewWriter(p.w, 0, 0, 2, ' ', 0)
	row := func(k string, v any) { fmt.Fprintf(tw, "%s:\t%v\n", k, v) }
	row("id", l.GetId())
	row("pool", l.GetPool())
	row("weight", l.GetWeight())
	row("fencing_token", l.GetFencingToken())
	row("priority", l.GetPriority())
	row("client_id", l.GetClientId())
	if l.GetDescription() != "" {
		row("description", l.GetDescription())
	}
	for _, r := range l.GetResources() {
		row("instance", r.GetId()+resourceSuffix(r.GetProviderId(), r.GetAttributes()))
	}
	row("ttl", duration(l.GetTtl()))
	row("acquire_time", timestamp(l.GetAcquireTime()))
	row("expire_time", timestamp(l.GetExpireTime()))
	return tw.Flush()
}

// leases prints a table of leases, or with -o json, resp.
func (p *printer) leases(resp *tollgatev1.ListLeasesResponse) error {
	if p.json {
		return p.message(resp)
	}
	if len(resp.GetLeases()) == 0 {
		_, err := fmt.Fprintln(p.w, "no leases")
		return err
	}
	tw := tabwriter.NewWriter(p.w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tWEIGHT\tPRIORITY\tCLIENT\tEXPIRES\tINSTANCES\tDESCRIPTION")
	for _, l := range resp.GetLeases() {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\n", l.GetId(), l.GetWeight(), strconv.FormatInt(int64(l.GetPriority()), 10), l.GetClientId(), timestamp(l.GetExpireTime()), instanceIDs(l.GetResources()), l.GetDescription())
	}
	return tw.Flush()
}
