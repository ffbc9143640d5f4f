package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// poolFlags are the pool settings of pool create and pool update.
type poolFlags struct {
	concurrency int64
	rate        float64
	burst       int64
	ttl         time.Duration
	maxTTL      time.Duration
	maxWaiters  int64
	description string
	safeRate    float64
	revocation  string
	kind        string // resource.go
	selection   string
	adaptive    adaptiveFlags // pool_adaptive.go
	marks       markFlags     // pool_marks.go
}

// poolFlagFields maps each pool flag to the Pool field it sets (the
// update_mask path).
var poolFlagFields = append([]struct{ flag, field string }{
	{"description", "description"},
	{"concurrency", "concurrency_limit"},
	{"rate", "rate"},
	{"burst", "burst"},
	{"ttl", "default_lease_ttl"},
	{"max-ttl", "max_lease_ttl"},
	{"max-waiters", "max_waiters"},
	{"safe-rate", "safe_rate"},
	{"revocation-policy", "revocation_policy"},
	{"kind", "resource_kind"},
	{"selection", "selection_policy"},
}, append(adaptiveFlagFields, markFlagFields...)...) // pool_adaptive.go, pool_marks.go

// register adds the flags; --kind only with create, since a pool's kind is
// set at creation.
func (p *poolFlags) register(f *pflag.FlagSet, create bool) {
	f.Int64Var(&p.concurrency, "concurrency", 0, "concurrency limit: most permit weight held at once (0: none)")
	f.Float64Var(&p.rate, "rate", 0, "rate limit in tokens per second (0: none)")
	f.Int64Var(&p.burst, "burst", 0, "token bucket size (0: one second of tokens, at least 1)")
	f.DurationVar(&p.ttl, "ttl", 0, "default lease TTL, such as 15s (0: 15s)")
	f.DurationVar(&p.maxTTL, "max-ttl", 0, "longest TTL an acquire or renew may ask for (0: 5m)")
	f.Int64Var(&p.maxWaiters, "max-waiters", 0, "most acquires waiting in the queue (0: 1024)")
	f.StringVar(&p.description, "description", "", "note for operators")
	f.Float64Var(&p.safeRate, "safe-rate", 0, "rate a holder of a rate share may use once its share expired unreachable (0: stop)")
	f.StringVar(&p.revocation, "revocation-policy", "wait", "when the concurrency limit is lowered under the held weight: wait (held leases finish) or revoke (revoke the lowest priority, newest leases at once)")
	if create {
		f.StringVar(&p.kind, "kind", "free", "what the permits are: free (a counter), active (instances an operator declares: tollgate resource add) or passive (instances providers offer: tollgate resource provide); set at creation")
	}
	f.StringVar(&p.selection, "selection", "reuse", "which free instance an active or passive pool grants first: reuse (the most recently released) or spread (the least recently used)")
	p.adaptive.register(f) // pool_adaptive.go
	p.marks.register(f)    // pool_marks.go
}

// pool returns the Pool named name with the values of the flags given on
// the command line, and the update_mask paths of those flags.
func (p *poolFlags) pool(f *pflag.FlagSet, name string) (*tollgatev1.Pool, []string, error) {
	pool := &tollgatev1.Pool{Name: name}
	var paths []string
	for _, ff := range poolFlagFields {
		if !f.Changed(ff.flag) {
			continue
		}
		paths = append(paths, ff.field)
		switch ff.flag {
		case "description":
			pool.Description = p.description
		case "concurrency":
			pool.ConcurrencyLimit = p.concurrency
		case "rate":
			pool.Rate = p.rate
		case "burst":
			pool.Burst = p.burst
		case "ttl":
			pool.DefaultLeaseTtl = durationpb.New(p.ttl)
		case "max-ttl":
			pool.MaxLeaseTtl = durationpb.New(p.maxTTL)
		case "max-waiters":
			pool.MaxWaiters = p.maxWaiters
		case "safe-rate":
			pool.SafeRate = p.safeRate
		case "revocation-policy":
			switch p.revocation {
			case "wait":
				pool.RevocationPolicy = tollgatev1.RevocationPolicy_REVOCATION_POLICY_WAIT
			case "revoke":
				pool.RevocationPolicy = tollgatev1.RevocationPolicy_REVOCATION_POLICY_REVOKE
			default:
				return nil, nil, usageErrorf("--revocation-policy %q is not a policy; use wait or revoke", p.revocation)
			}
		case "kind", "selection":
			if err := p.setResourceFlag(pool, ff.flag); err != nil { // resource.go
				return nil, nil, err
			}
		default: // a mark (pool_marks.go) or --adaptive* (pool_adaptive.go)
			if isMark, err := p.marks.set(pool, ff.flag); isMark {
				if err != nil {
					return nil, nil, err
				}
				continue
			}
			if err := p.adaptive.set(pool, ff.flag); err != nil {
				return nil, nil, err
			}
		}
	}
	return pool, p.adaptive.implicitEnable(f, pool, paths), nil
}

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
		newPoolSuspendCmd(g, out), // pool_suspend.go
		newPoolResumeCmd(g, out),
		newPoolDrainCmd(g, out),
	)
	return cmd
}

func newPoolCreateCmd(g *globals, out func(*cobra.Command) *printer) *cobra.Command {
	var (
		pf poolFlags
		rf initialResourceFlags // resource.go
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
now. With -o json, all pages are printed as one ListPoolsResponse.`,
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
					all.Pools = append(all.Pools, resp.GetPools()...)
					all.Statuses = append(all.Statuses, resp.GetStatuses()...)
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
				return usageErrorf("nothing to update: give at least one of --concurrency, --rate, --burst, --ttl, --max-ttl, --max-waiters, --description, --safe-rate, --revocation-policy, --overload-mark, --near-full-mark, --low-utilisation-mark, --low-utilisation-period, %s", adaptiveFlagNames())
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
