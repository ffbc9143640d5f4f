package main

import (
	"context"
	"fmt"
	"slices"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// adminCall dials --server and runs f with an AdminService client and a
// context bounded by --timeout.
func (g *globals) adminCall(cmd *cobra.Command, f func(ctx context.Context, adm tollgatev1.AdminServiceClient) error) error {
	c, err := g.dial()
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
	defer cancel()
	return f(ctx, tollgatev1.NewAdminServiceClient(c.Conn()))
}

func newPoolCmd(g *globals) *cobra.Command {
	var format outputFlag
	cmd := &cobra.Command{
		Use:   "pool",
		Short: "Create, inspect, change, suspend and delete pools",
		Long: `Create, inspect, change and delete pools: the named things Tollgate protects,
each with a concurrency limit, a rate limit, or both.

Output is readable text; -o json prints the API's messages as JSON.`,
	}
	cmd.PersistentFlags().VarP(&format, "output", "o", "output format: text or json")
	out := func(cmd *cobra.Command) *printer { return format.printer(cmd.OutOrStdout()) }

	cmd.AddCommand(
		newPoolCreateCmd(g, out),
		newPoolGetCmd(g, out),
		newPoolListCmd(g, out),
		newPoolUpdateCmd(g, out),
		newPoolDeleteCmd(g, out),
		newPoolSuspendCmd(g, out),
		newPoolResumeCmd(g, out),
		newPoolDrainCmd(g, out),
	)
	return cmd
}

func newPoolCreateCmd(g *globals, out func(*cobra.Command) *printer) *cobra.Command {
	var (
		pf poolFlags
		rf initialResourceFlags
	)
	cmd := &cobra.Command{
		Use:   "create NAME [flags]",
		Short: "Create a pool",
		Long: `Create a pool named NAME (1 to 128 characters of [A-Za-z0-9._:/-]) with a
concurrency limit (--concurrency), a rate limit (--rate, --burst), or both.
Settings not given take the server's defaults; the pool is printed as stored.

An active pool (--kind active) grants instances an operator declares: give
them with --resources (and --attr), or later with tollgate resource add. A
passive pool (--kind passive) grants instances that providers offer
(tollgate resource provide). Either may leave --concurrency unset: its
capacity is then its instances.

The event marks make the server record an event (tollgate events) when the
queue reaches --overload-mark, when held/limit reaches --near-full-mark, and
when it stays below --low-utilisation-mark for --low-utilisation-period;
"off" turns one off. See docs/operations.md.`,
		Example: `  tollgate pool create orders-db --concurrency 20 --description "primary database"
  tollgate pool create api.github.com --rate 80 --burst 100
  tollgate pool create gpu --concurrency 8 --ttl 1m --max-ttl 1h --max-waiters 100
  tollgate pool create payments-api --rate 200 --safe-rate 5 --adaptive --adaptive-target rate
  tollgate pool create orders-db --kind active --resources conn-1,conn-2,conn-3,conn-4 --attr addr=db-{id}.internal:5432
  tollgate pool create gpu-workers --kind passive --selection spread
  tollgate pool create gpu --concurrency 8 --overload-mark 20 --near-full-mark 0.75 --low-utilisation-mark off`,
		Args: exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			pool, _, err := pf.pool(cmd.Flags(), args[0])
			if err != nil {
				return err
			}
			initial, err := rf.resources()
			if err != nil {
				return err
			}
			return g.adminCall(cmd, func(ctx context.Context, adm tollgatev1.AdminServiceClient) error {
				resp, err := adm.CreatePool(ctx, &tollgatev1.CreatePoolRequest{Pool: pool})
				if err != nil {
					return err
				}
				if len(initial) == 0 {
					return out(cmd).pool(resp, resp.GetPool(), nil)
				}
				added, err := adm.AddResources(ctx, &tollgatev1.AddResourcesRequest{Pool: pool.GetName(), Resources: initial})
				if err != nil {
					return fmt.Errorf("pool %s was created, but its instances were not added (add them with tollgate resource add): %w", pool.GetName(), err)
				}
				return out(cmd).pool(added, added.GetPool(), added.GetStatus())
			})
		},
	}
	pf.register(cmd.Flags(), true)
	rf.register(cmd.Flags())
	return cmd
}

func newPoolGetCmd(g *globals, out func(*cobra.Command) *printer) *cobra.Command {
	return &cobra.Command{
		Use:   "get NAME",
		Short: "Show a pool's configuration and live status",
		Long: `Show the configuration of pool NAME (with defaults filled in) and its live
status: permits held, leases, waiters, counters since the server started,
tokens available and the last fencing token issued; with adaptive limits,
the effective limits beside the configured ones, the outcomes reported and
the window adaptive control judges; and the rate shares granted.`,
		Example: `  tollgate pool get orders-db
  tollgate pool get orders-db -o json`,
		Args: exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.adminCall(cmd, func(ctx context.Context, adm tollgatev1.AdminServiceClient) error {
				resp, err := adm.GetPool(ctx, &tollgatev1.GetPoolRequest{Name: args[0]})
				if err != nil {
					return err
				}
				return out(cmd).pool(resp, resp.GetPool(), resp.GetStatus())
			})
		},
	}
}

func newPoolListCmd(g *globals, out func(*cobra.Command) *printer) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List pools with their limits and use",
		Long: `List every pool in name order, with its limits and what is held and waiting
now. With -o json, all pages are printed as one ListPoolsResponse.

On a cluster whose pools are led by several servers (shards), any server lists
every pool, with an OWNER column naming the server that leads it, and a last
line naming the servers whose pools are missing (no answer in time).`,
		Example: `  tollgate pool list
  tollgate pool list -o json`,
		Args: exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.adminCall(cmd, func(ctx context.Context, adm tollgatev1.AdminServiceClient) error {
				all := &tollgatev1.ListPoolsResponse{}
				req := &tollgatev1.ListPoolsRequest{PageSize: 1000}
				for {
					resp, err := adm.ListPools(ctx, req)
					if err != nil {
						return err
					}
					all.TotalSize = resp.GetTotalSize()
					all.Pools = append(all.Pools, resp.GetPools()...)
					all.Statuses = append(all.Statuses, resp.GetStatuses()...)
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
				return out(cmd).pools(all)
			})
		},
	}
}

func newPoolUpdateCmd(g *globals, out func(*cobra.Command) *printer) *cobra.Command {
	var pf poolFlags
	cmd := &cobra.Command{
		Use:   "update NAME [flags]",
		Short: "Change a pool's settings, live",
		Long: `Change the settings of pool NAME that are given as flags; the others keep
their values. A flag given as 0 (or "") resets that setting to its default.

Raising --concurrency admits waiters at once; lowering it blocks new grants
until the held weight is under the new limit (held leases continue; with
--revocation-policy revoke, the lowest priority, newest leases are revoked
at once until the held weight is within it).

An --adaptive-* flag changes that one adaptive setting (and turns adaptive
limits on, unless --adaptive=false is given); --adaptive=false turns them
off, restoring the configured limits at once.`,
		Example: `  tollgate pool update orders-db --concurrency 30
  tollgate pool update api.github.com --rate 50 --burst 0
  tollgate pool update orders-db --adaptive-backoff 0.7 --adaptive-latency-tolerance 2
  tollgate pool update orders-db --adaptive=false
  tollgate pool update orders-db --near-full-mark 0.8 --low-utilisation-period 30m`,
		Args: exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			pool, paths, err := pf.pool(cmd.Flags(), args[0])
			if err != nil {
				return err
			}
			if len(paths) == 0 {
				return usageErrorf("nothing to update: give at least one of %s", poolFlagNames())
			}
			return g.adminCall(cmd, func(ctx context.Context, adm tollgatev1.AdminServiceClient) error {
				resp, err := adm.UpdatePool(ctx, &tollgatev1.UpdatePoolRequest{Pool: pool, UpdateMask: &fieldmaskpb.FieldMask{Paths: paths}})
				if err != nil {
					return err
				}
				return out(cmd).pool(resp, resp.GetPool(), nil)
			})
		},
	}
	pf.register(cmd.Flags(), false)
	return cmd
}

func newPoolDeleteCmd(g *globals, out func(*cobra.Command) *printer) *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a pool",
		Long: `Delete pool NAME. A pool whose leases are held is only deleted with --force;
then its leases end (their holders are told at once, or at their next renew)
and its waiters fail.`,
		Example: `  tollgate pool delete orders-db
  tollgate pool delete orders-db --force`,
		Args: exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.adminCall(cmd, func(ctx context.Context, adm tollgatev1.AdminServiceClient) error {
				resp, err := adm.DeletePool(ctx, &tollgatev1.DeletePoolRequest{Name: args[0], Force: force})
				if err != nil {
					return err
				}
				p := out(cmd)
				if p.json {
					return p.message(resp)
				}
				_, err = fmt.Fprintf(p.w, "deleted pool %s\n", args[0])
				return err
			})
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "delete even while leases are held, ending them")
	return cmd
}
