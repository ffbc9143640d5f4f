package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// newPoolSuspendCmd is "tollgate pool suspend".
func newPoolSuspendCmd(g *globals, out func(*cobra.Command) *printer) *cobra.Command {
	var revokeHeld bool
	cmd := &cobra.Command{
		Use:   "suspend NAME",
		Short: "Stop a pool's grants until it is resumed",
		Long: `Suspend pool NAME: it grants no leases until "tollgate pool resume". Acquires
keep waiting in its queue (no-wait ones fail at once). Held leases continue,
or with --revoke-held are all revoked at once (their holders are told).
Exact tokens (take) and rate shares are not affected. The suspension is
stored with the pool and survives a server restart.`,
		Example: `  tollgate pool suspend orders-db
  tollgate pool suspend orders-db --revoke-held`,
		Args: exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.adminCall(cmd, func(ctx context.Context, adm tollgatev1.AdminServiceClient) error {
				resp, err := adm.SuspendPool(ctx, &tollgatev1.SuspendPoolRequest{Name: args[0], RevokeHeld: revokeHeld})
				if err != nil {
					return err
				}
				return out(cmd).poolState(resp, "suspended", args[0], resp.GetStatus())
			})
		},
	}
	cmd.Flags().BoolVar(&revokeHeld, "revoke-held", false, "revoke every held lease too")
	return cmd
}

// newPoolResumeCmd is "tollgate pool resume".
func newPoolResumeCmd(g *globals, out func(*cobra.Command) *printer) *cobra.Command {
	return &cobra.Command{
		Use:     "resume NAME",
		Short:   "Let a suspended pool grant again",
		Long:    `Resume pool NAME after "tollgate pool suspend": waiters that fit are granted at once.`,
		Example: `  tollgate pool resume orders-db`,
		Args:    exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.adminCall(cmd, func(ctx context.Context, adm tollgatev1.AdminServiceClient) error {
				resp, err := adm.ResumePool(ctx, &tollgatev1.ResumePoolRequest{Name: args[0]})
				if err != nil {
					return err
				}
				return out(cmd).poolState(resp, "resumed", args[0], resp.GetStatus())
			})
		},
	}
}

// newPoolDrainCmd is "tollgate pool drain".
func newPoolDrainCmd(g *globals, out func(*cobra.Command) *printer) *cobra.Command {
	return &cobra.Command{
		Use:   "drain NAME",
		Short: "Wait until a pool holds no leases",
		Long: `Wait until pool NAME holds no leases, for at most --timeout (default 10s);
past it, the command fails saying what is still held. Drain does not stop
grants: suspend the pool first so that it stays drained.`,
		Example: `  tollgate pool suspend orders-db && tollgate pool drain orders-db --timeout 10m`,
		Args:    exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.adminCall(cmd, func(ctx context.Context, adm tollgatev1.AdminServiceClient) error {
				resp, err := adm.DrainPool(ctx, &tollgatev1.DrainPoolRequest{Name: args[0]})
				if err != nil {
					return err
				}
				return out(cmd).poolState(resp, "drained", args[0], resp.GetStatus())
			})
		},
	}
}

// poolState prints "<what> pool NAME" and what it holds; with -o json, resp.
func (p *printer) poolState(resp proto.Message, what, name string, st *tollgatev1.PoolStatus) error {
	if p.json {
		return p.message(resp)
	}
	suspended := ""
	if st.GetSuspended() {
		suspended = ", suspended"
	}
	_, err := fmt.Fprintf(p.w, "%s pool %s: held %d in %d leases, %d waiting%s\n", what, name, st.GetHeld(), st.GetLeases(), st.GetWaiting(), suspended)
	return err
}
