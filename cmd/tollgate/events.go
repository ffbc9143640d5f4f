package main

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tollgate/tollgate/client"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
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
(RESOURCE_EXHAUSTED); run the command again, with --recent to catch up.

On a cluster (--server a,b,c) it follows the leader: when the server it
watches stops leading (NOT_LEADER), shuts down or goes away (killed, its
connection lost), it goes on with the new leader's events, starting with
those the new leader kept (its leader_changed among them).`,
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
			following := false // after a NOT_LEADER, until the next event
			for {
				resp, err := st.Recv()
				if err != nil {
					if ctx.Err() != nil && status.Code(err) == codes.Canceled {
						return nil // Ctrl-C
					}
					e, ok := client.FromError(err)
					cluster := strings.Contains(g.server, ",")
					if ok && !cluster && errors.Is(e, apierr.ErrNotLeader) {
						if leader := e.Metadata["leader"]; leader != "" && leader != g.server {
							return &followLeader{server: g.server, leader: leader, err: err} // run follows it
						}
					}
					handedOff := ok && (errors.Is(e, apierr.ErrNotLeader) ||
						cluster && errors.Is(e, apierr.ErrShuttingDown) ||
						cluster && e.Code == codes.Unavailable && e.Reason == "") // the connection broke: killed, say
					if !handedOff {
						return err
					}
					// The server stopped leading, or one server of several
					// shut down or went away: follow the leader, from the
					// events it kept (its leader_changed among them),
					// trying again as long as no server leads yet (the new
					// call waits for one that reports SERVING).
					if !following {
						fmt.Fprintf(cmd.ErrOrStderr(), "tollgate: %v; following the new leader\n", err)
						following = true
					}
					select {
					case <-ctx.Done():
						return nil
					case <-time.After(max(e.RetryAfter, 50*time.Millisecond)):
					}
					if next, err := adm.WatchEvents(ctx, &tollgatev1.WatchEventsRequest{Pool: pool, IncludeRecent: true}); err == nil {
						st = next
					}
					continue
				}
				following = false
				if lost := resp.GetUnreachable(); len(lost) > 0 {
					fmt.Fprintf(cmd.ErrOrStderr(), "tollgate: the events of %s no longer reach this watch (it left, died or did not answer); run again to include it\n", strings.Join(lost, ", "))
					continue
				}
				ev := resp.GetEvent()
				var line string
				if format.json {
					b, err := jsonMessage(ev)
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
// there is of lease, client, actor and detail, and the server that
// recorded it.
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
	if ev.GetServer() != "" {
		parts = append(parts, "on="+ev.GetServer())
	}
	return strings.Join(parts, "  ")
}
