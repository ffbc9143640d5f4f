package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/tollgate/tollgate/client"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

func newAcquireCmd(g *globals) *cobra.Command {
	var (
		weight      int64
		ttl         time.Duration
		priority    int32
		waitTimeout time.Duration
		try         bool
		description string
	)
	cmd := &cobra.Command{
		Use:   "acquire POOL [flags]",
		Short: "Acquire a lease and hold it until Ctrl-C",
		Long: `Acquire a lease from POOL, waiting in the pool's queue until it is granted
(or --wait-timeout passes; with --try, not at all), then hold it, renewing it
in the background, until Ctrl-C (or SIGTERM), and release it.

It prints "acquired lease <id> fencing_token=<n> weight=<w> expires <time>"
once granted and "released lease <id>" at the end. If the lease is lost
while held (it expired or was revoked on the server, or could not be renewed
in time), it says so and exits with status 1.`,
		Example: `  tollgate acquire orders-db
  tollgate acquire orders-db --weight 2 --ttl 30s --wait-timeout 1m
  tollgate acquire gpu --try --description "manual maintenance"`,
		Args: exactArgs("POOL"),
		RunE: func(cmd *cobra.Command, args []string) error {
			pool := args[0]
			if waitTimeout < 0 {
				return usageErrorf("--wait-timeout must not be negative, not %v", waitTimeout)
			}
			if try && waitTimeout != 0 {
				return usageErrorf("--try does not wait; drop --wait-timeout")
			}
			var opts []client.AcquireOption
			if cmd.Flags().Changed("weight") {
				opts = append(opts, client.Weight(weight))
			}
			if cmd.Flags().Changed("ttl") {
				opts = append(opts, client.TTL(ttl))
			}
			if priority != 0 {
				opts = append(opts, client.Priority(priority))
			}
			if waitTimeout != 0 {
				opts = append(opts, client.WaitTimeout(waitTimeout))
			}
			if description != "" {
				opts = append(opts, client.Description(description))
			}
			return holdLease(cmd, g, pool, try, opts)
		},
	}
	f := cmd.Flags()
	f.Int64Var(&weight, "weight", 1, "permit weight to hold")
	f.DurationVar(&ttl, "ttl", 0, "lease TTL, renewed every TTL/3 (default: the pool's default_lease_ttl)")
	f.Int32Var(&priority, "priority", 0, "place in the wait queue: higher is granted first")
	f.DurationVar(&waitTimeout, "wait-timeout", 0, "longest wait in the queue (0: until Ctrl-C)")
	f.BoolVar(&try, "try", false, "fail at once (NO_CAPACITY) rather than wait")
	f.StringVar(&description, "description", "", "note shown to operators with the lease")
	return cmd
}

// holdLease acquires a lease, holds it until cmd's context ends or it is
// lost, and releases it.
func holdLease(cmd *cobra.Command, g *globals, pool string, try bool, opts []client.AcquireOption) error {
	out := cmd.OutOrStdout()
	ctx := cmd.Context()
	c, err := g.dial()
	if err != nil {
		return err
	}
	defer c.Close()

	// Fail fast (within --timeout) if the server is not there or the pool
	// does not exist, rather than wait for a connection forever.
	pctx, cancel := context.WithTimeout(ctx, g.timeout)
	_, err = tollgatev1.NewAdminServiceClient(c.Conn()).GetPool(pctx, &tollgatev1.GetPoolRequest{Name: pool})
	cancel()
	if err != nil && !adminRefused(err) { // a non-admin cannot check: let the acquire tell
		return err
	}

	var l *client.Lease
	if try {
		l, err = c.TryAcquire(ctx, pool, opts...)
	} else {
		l, err = c.Acquire(ctx, pool, opts...)
	}
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("gave up waiting for a lease of pool %q: %w", pool, err)
		}
		return err
	}
	fmt.Fprintf(out, "acquired lease %s fencing_token=%d weight=%d expires %s (ttl %v, renewed in the background; Ctrl-C to release)\n",
		l.ID(), l.FencingToken(), l.Weight(), l.Expiry().Format(time.RFC3339Nano), l.TTL())
	for _, r := range l.Resources() {
		fmt.Fprintf(out, "  instance %s%s\n", r.ID, resourceSuffix(r.Provider, r.Attributes)) // resource.go
	}

	select {
	case <-ctx.Done():
	case <-l.Done():
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.timeout)
	defer cancel()
	if err := l.Release(rctx); err != nil {
		return err
	}
	fmt.Fprintf(out, "released lease %s\n", l.ID())
	return nil
}
