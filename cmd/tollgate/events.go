package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// newEventsCmd is "tollgate events": it tails the server's event stream
// (AdminService.WatchEvents) until Ctrl-C.
func newEventsCmd(g *globals) *cobra.Command {
	var (
		pool   string
		recent bool
		format outputFlag
	)
	cmd := &cobra.Command{
		Use:   "events",
		Short: "Tail the server's pool events until Ctrl-C",
		Long: `Print the server's events as they happen, one line each (time, type, pool,
detail), until Ctrl-C: pool changes made through the admin API, leases that
ended without their holder's release (expired, revoked), changes made
by adaptive control, and the pools' event marks crossed (pool_overload,
pool_near_full, pool_low_utilisation, pool_drained). --recent first prints the events the server kept from
before (up to 256). --pool keeps only one pool's events. With -o json each
event is one line of JSON (a PoolEvent message).

A watcher that cannot keep up is disconnected by the server
(RESOURCE_EXHAUSTED); run the command again, with --recent to catch up.`,
		Example: `  tollgate events
  tollgate events --pool orders-db --recent
  tollgate events -o json | jq .`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.dial()
			if err != nil {
				return err
			}
			defer c.Close()
			ctx := cmd.Context()
			adm := tollgatev1.NewAdminServiceClient(c.Conn())
			st, err := adm.WatchEvents(ctx, &tollgatev1.WatchEventsRequest{Pool: pool, IncludeRecent: recent})
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			for {
				resp, err := st.Recv()
				if err != nil {
					if ctx.Err() != nil && status.Code(err) == codes.Canceled {
						return nil // Ctrl-C
					}
					return err
				}
				ev := resp.GetEvent()
				var line string
				if format.json {
					b, err := protojson.Marshal(ev)
					if err != nil {
						return err
					}
					line = string(b)
				} else {
					line = eventLine(ev)
				}
				if _, err := fmt.Fprintln(w, line); err != nil {
					return err
				}
			}
		},
	}
	f := cmd.Flags()
	f.StringVar(&pool, "pool", "", "only the events of this pool")
	f.BoolVar(&recent, "recent", false, "first print the recent events the server kept")
	f.VarP(&format, "output", "o", "output format: text or json (one JSON object a line)")
	return cmd
}

// eventLine renders an event for people: time, type, pool, then what
// there is of lease, client, actor and detail.
func eventLine(ev *tollgatev1.PoolEvent) string {
	parts := []string{timestamp(ev.GetTime()), ev.GetType(), ev.GetPool()}
	if ev.GetLeaseId() != "" {
		parts = append(parts, "lease="+ev.GetLeaseId())
	}
	if ev.GetClientId() != "" {
		parts = append(parts, "client="+ev.GetClientId())
	}
	if ev.GetActor() != "" {
		parts = append(parts, "by="+ev.GetActor())
	}
	if ev.GetDetail() != "" {
		parts = append(parts, ev.GetDetail())
	}
	return strings.Join(parts, "  ")
}
