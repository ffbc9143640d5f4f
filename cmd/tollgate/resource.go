package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tollgate/tollgate/client"
	"github.com/tollgate/tollgate/internal/poolconv"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// newResourceCmd is "tollgate resource": the instances of active and
// passive pools.
func newResourceCmd(g *globals) *cobra.Command {
	var format outputFlag
	cmd := &cobra.Command{
		Use:   "resource",
		Short: "Declare, remove, list and provide the instances of active and passive pools",
		Long: `The instances of active and passive pools: database connections, worker
slots, devices. A lease of weight n in such a pool is bound to n instances,
and no instance is held by two live leases.

An operator declares an active pool's instances (add, remove); they are
stored with the pool. A provider offers a passive pool's instances for as
long as it runs (provide); when it stops or dies, they leave the pool and
the leases on them are revoked.

Output is readable text; -o json prints the API's messages as JSON.`,
	}
	cmd.PersistentFlags().VarP(&format, "output", "o", "output format: text or json")
	out := func(cmd *cobra.Command) *printer { return format.printer(cmd.OutOrStdout()) }
	cmd.AddCommand(newResourceAddCmd(g, out), newResourceRemoveCmd(g, out), newResourceListCmd(g, out), newResourceProvideCmd(g))
	return cmd
}

// attrFlags is --attr key=value, repeated; "{id}" in a value is replaced
// by each instance's id.
type attrFlags struct{ attrs []string }

func (a *attrFlags) register(f *pflag.FlagSet) {
	f.StringArrayVar(&a.attrs, "attr", nil, `attribute key=value of every instance given, repeatable; "{id}" in the value becomes the instance's id (e.g. --attr addr=db-{id}.internal:5432)`)
}

// resources returns instances ids with the attributes.
func (a *attrFlags) resources(ids []string) ([]*tollgatev1.Resource, error) {
	kv := map[string]string{}
	for _, s := range a.attrs {
		k, v, ok := strings.Cut(s, "=")
		if !ok || k == "" {
			return nil, usageErrorf("--attr %q is not key=value", s)
		}
		kv[k] = v
	}
	out := make([]*tollgatev1.Resource, len(ids))
	for i, id := range ids {
		r := &tollgatev1.Resource{Id: id}
		if len(kv) > 0 {
			r.Attributes = make(map[string]string, len(kv))
			for k, v := range kv {
				r.Attributes[k] = strings.ReplaceAll(v, "{id}", id)
			}
		}
		out[i] = r
	}
	return out, nil
}

// clientResources converts instances for the client package.
func clientResources(rs []*tollgatev1.Resource) []client.Resource {
	out := make([]client.Resource, len(rs))
	for i, r := range rs {
		out[i] = client.Resource{ID: r.GetId(), Attributes: r.GetAttributes()}
	}
	return out
}

// initialResourceFlags are pool create's --resources and --attr.
type initialResourceFlags struct {
	ids  []string
	attr attrFlags
}

func (f *initialResourceFlags) register(fs *pflag.FlagSet) {
	fs.StringSliceVar(&f.ids, "resources", nil, "instances of an active pool to declare at once, comma-separated ids (see tollgate resource add)")
	f.attr.register(fs)
}

func (f *initialResourceFlags) resources() ([]*tollgatev1.Resource, error) {
	if len(f.ids) == 0 {
		if len(f.attr.attrs) > 0 {
			return nil, usageErrorf("--attr needs --resources")
		}
		return nil, nil
	}
	return f.attr.resources(f.ids)
}

func newResourceAddCmd(g *globals, out func(*cobra.Command) *printer) *cobra.Command {
	var attr attrFlags
	cmd := &cobra.Command{
		Use:   "add POOL ID...",
		Short: "Declare instances of an active pool",
		Long: `Declare instances of the active pool POOL, stored with the pool; waiting
acquires they fit are granted at once. Ids are 1 to 128 characters of
[A-Za-z0-9._:/-], new to the pool. --attr sets attributes (an address, ...)
that holders see on their leases.`,
		Example: `  tollgate resource add orders-db conn-5 conn-6 --attr addr=db-{id}.internal:5432
  tollgate resource add gpu card-0 --attr pci=0000:3b:00.0`,
		Args: minArgs("POOL", "ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			rs, err := attr.resources(args[1:])
			if err != nil {
				return err
			}
			return g.adminCall(cmd, func(ctx context.Context, adm tollgatev1.AdminServiceClient) error {
				resp, err := adm.AddResources(ctx, &tollgatev1.AddResourcesRequest{Pool: args[0], Resources: rs})
				if err != nil {
					return err
				}
				p := out(cmd)
				if p.json {
					return p.message(resp)
				}
				_, err = fmt.Fprintf(p.w, "added %d instances to pool %s: it has %d, %d free\n", len(rs), args[0], resp.GetStatus().GetResources(), resp.GetStatus().GetResourcesFree())
				return err
			})
		},
	}
	attr.register(cmd.Flags())
	return cmd
}

func newResourceRemoveCmd(g *globals, out func(*cobra.Command) *printer) *cobra.Command {
	var (
		wait   bool
		reason string
	)
	cmd := &cobra.Command{
		Use:   "remove POOL ID...",
		Short: "Remove instances from an active pool",
		Long: `Remove instances from the active pool POOL. A free instance leaves at once.
A held one is granted no more and its lease is revoked at once, the holder
told why (--reason), unless --wait: then the lease runs until it ends and
the instance leaves then. Nothing is removed if an id is not in the pool.`,
		Example: `  tollgate resource remove orders-db conn-6 --reason "replica rebuilt"
  tollgate resource remove orders-db conn-5 --wait`,
		Args: minArgs("POOL", "ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.adminCall(cmd, func(ctx context.Context, adm tollgatev1.AdminServiceClient) error {
				resp, err := adm.RemoveResources(ctx, &tollgatev1.RemoveResourcesRequest{Pool: args[0], Ids: args[1:], Wait: wait, Reason: reason})
				if err != nil {
					return err
				}
				p := out(cmd)
				if p.json {
					return p.message(resp)
				}
				_, err = fmt.Fprintf(p.w, "removed %d instances from pool %s (%d leases revoked); %d leave when their leases end\n",
					resp.GetRemoved(), args[0], resp.GetRevoked(), resp.GetRemoving())
				return err
			})
		},
	}
	cmd.Flags().BoolVar(&wait, "wait", false, "let the leases holding them run until they end, instead of revoking them")
	cmd.Flags().StringVar(&reason, "reason", "", "why, told to the holders of revoked leases (at most 512 bytes)")
	return cmd
}

func newResourceListCmd(g *globals, out func(*cobra.Command) *printer) *cobra.Command {
	return &cobra.Command{
		Use:   "list POOL",
		Short: "List the instances of an active or passive pool",
		Long: `List the instances of POOL with the lease that holds each, and, for a
passive pool, its live providers.`,
		Example: `  tollgate resource list orders-db
  tollgate resource list gpu-workers -o json`,
		Args: exactArgs("POOL"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.adminCall(cmd, func(ctx context.Context, adm tollgatev1.AdminServiceClient) error {
				// Follow the pages and print them as one list.
				all := &tollgatev1.ListResourcesResponse{}
				req := &tollgatev1.ListResourcesRequest{Pool: args[0], PageSize: 1000}
				for {
					resp, err := adm.ListResources(ctx, req)
					if err != nil {
						return err
					}
					all.Resources = append(all.Resources, resp.GetResources()...)
					all.Providers = append(all.Providers, resp.GetProviders()...)
					if resp.GetNextPageToken() == "" {
						return out(cmd).resources(all)
					}
					req.PageToken = resp.GetNextPageToken()
				}
			})
		},
	}
}

// resources prints a table of instances and one of providers, or with
// -o json, resp.
func (p *printer) resources(resp *tollgatev1.ListResourcesResponse) error {
	if p.json {
		return p.message(resp)
	}
	tw := tabwriter.NewWriter(p.w, 0, 0, 2, ' ', 0)
	if len(resp.GetResources()) == 0 {
		fmt.Fprintln(tw, "no instances")
	} else {
		fmt.Fprintln(tw, "ID\tSTATE\tLEASE\tCLIENT\tPROVIDER\tATTRIBUTES")
		for _, r := range resp.GetResources() {
			state := "free"
			switch {
			case r.GetRemoving():
				state = "held, removing"
			case r.GetLeaseId() != "":
				state = "held"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.GetResource().GetId(), state, dash(r.GetLeaseId()), dash(r.GetClientId()), dash(r.GetResource().GetProviderId()), dash(attrText(r.GetResource().GetAttributes())))
		}
	}
	if len(resp.GetProviders()) > 0 {
		fmt.Fprintln(tw, "\nPROVIDER\tINSTANCES\tTTL\tIDENTITY\tADDRESS\tJOINED")
		for _, pr := range resp.GetProviders() {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\n", pr.GetId(), pr.GetResources(), duration(pr.GetTtl()), dash(pr.GetIdentity()), dash(pr.GetAddress()), timestamp(pr.GetJoinTime()))
		}
	}
	return tw.Flush()
}

func newResourceProvideCmd(g *globals) *cobra.Command {
	var (
		id   string
		ttl  time.Duration
		attr attrFlags
	)
	cmd := &cobra.Command{
		Use:   "provide POOL ID...",
		Short: "Offer instances to a passive pool until interrupted",
		Long: `Register as a provider of the passive pool POOL (--id names it) and offer the
instances ID... for as long as this command runs. Ctrl-C (or SIGTERM) takes
them out of the pool at once and revokes the leases on them. If the command
dies without a word (kill -9, a lost machine), the server notices the broken
connection, or at the latest misses its keep-alive after --ttl, and does the
same. If the stream breaks while the command runs (a server restart), it
registers again by itself.`,
		Example: `  tollgate resource provide gpu-workers --id worker-7 slot-1 slot-2 --attr host=worker-7.internal
  tollgate resource provide gpu-workers --id $(hostname) --ttl 5s gpu-0`,
		Args: minArgs("POOL", "ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if id == "" {
				return usageErrorf("--id is required: name this provider (unique among the pool's providers)")
			}
			rs, err := attr.resources(args[1:])
			if err != nil {
				return err
			}
			c, err := g.dial()
			if err != nil {
				return err
			}
			defer c.Close()
			ctx := cmd.Context()
			rctx, cancel := context.WithTimeout(ctx, g.timeout)
			// The pool check finds the server that leads the pool's
			// shard (a NOT_LEADER answer is followed) before the stream.
			if _, err := tollgatev1.NewAdminServiceClient(c.Conn()).GetPool(rctx, &tollgatev1.GetPoolRequest{Name: args[0]}); err != nil && !adminRefused(err) {
				cancel()
				return err
			}
			p, err := c.NewProvider(rctx, args[0], id, client.WithProviderTTL(ttl), client.WithResources(clientResources(rs)...))
			cancel()
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "providing %d instances to pool %s as %s (Ctrl-C to withdraw them)\n", len(rs), args[0], id)
			select {
			case <-ctx.Done():
				_ = p.Close()
				fmt.Fprintf(cmd.OutOrStdout(), "withdrew the instances of %s from pool %s\n", id, args[0])
				return nil
			case <-p.Done():
				return fmt.Errorf("provider %s of pool %s ended: %w", id, args[0], p.Err())
			}
		},
	}
	cmd.Flags().StringVar(&id, "id", "", "this provider's id, unique among the pool's live providers (required)")
	cmd.Flags().DurationVar(&ttl, "ttl", 0, "keep-alive TTL: the server drops the instances if it hears nothing for this long (0: 10s; 1s to 5m)")
	attr.register(cmd.Flags())
	return cmd
}

// resourceConfigRows adds a pool's resource settings to pool get.
func resourceConfigRows(row func(string, any), pool *tollgatev1.Pool) {
	switch pool.GetResourceKind() {
	case tollgatev1.ResourceKind_RESOURCE_KIND_ACTIVE, tollgatev1.ResourceKind_RESOURCE_KIND_PASSIVE:
		row("resource_kind", poolconv.EnumText(pool.GetResourceKind()))
		row("selection_policy", poolconv.EnumText(pool.GetSelectionPolicy()))
	}
}

// resourceStatusRows adds a resource pool's instances to pool get.
func resourceStatusRows(row func(string, any), pool *tollgatev1.Pool, st *tollgatev1.PoolStatus) {
	switch pool.GetResourceKind() {
	case tollgatev1.ResourceKind_RESOURCE_KIND_ACTIVE:
		row("instances", fmt.Sprintf("%d (%d free)", st.GetResources(), st.GetResourcesFree()))
	case tollgatev1.ResourceKind_RESOURCE_KIND_PASSIVE:
		row("instances", fmt.Sprintf("%d (%d free) from %d providers", st.GetResources(), st.GetResourcesFree(), st.GetProviders()))
	}
}

// resourceSuffix describes an instance's provider and attributes after
// its id: " (provider w1; addr=...)".
func resourceSuffix(provider string, attrs map[string]string) string {
	var parts []string
	if provider != "" {
		parts = append(parts, "provider "+provider)
	}
	if a := attrText(attrs); a != "" {
		parts = append(parts, a)
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, "; ") + ")"
}

// attrText renders attributes as "k=v k2=v2", sorted by key.
func attrText(attrs map[string]string) string {
	keys := slices.Sorted(maps.Keys(attrs))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + strconv.Quote(attrs[k])
	}
	return strings.Join(parts, " ")
}

// instanceIDs lists a lease's instances for tables; "-" for none.
func instanceIDs(rs []*tollgatev1.Resource) string {
	ids := make([]string, len(rs))
	for i, r := range rs {
		ids[i] = r.GetId()
	}
	return dash(strings.Join(ids, ","))
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
