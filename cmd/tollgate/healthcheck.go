package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/health/grpc_health_v1"
)

// newHealthcheckCmd is "tollgate healthcheck": the gRPC health of --server,
// or a GET of a server's /readyz for images without curl (the Dockerfile's
// HEALTHCHECK).
func newHealthcheckCmd(g *globals) *cobra.Command {
	var url string
	cmd := &cobra.Command{
		Use:   "healthcheck",
		Short: "Check that a server is up (its gRPC health, or GET its /readyz)",
		Long: `Without --url, ask each server of --server (or $TOLLGATE_SERVER) for its gRPC
health (grpc.health.v1.Health/Check of the server as a whole) and exit with
status 0 if each answers SERVING, else 1 saying what it got. The --tls-*
flags and --token-file apply as for every client command.

With --url, GET that URL instead (the /readyz of the server's HTTP listener,
serve --http) and exit with status 0 if it answers 200. For container health
checks where no curl is installed: the Docker image runs it. /readyz answers
200 while the server serves and 503 once it shuts down; /healthz answers 200
while the process runs. Over https the server's certificate is checked
against --tls-ca (or the system's CA roots without it), and --tls-cert and
--tls-key present a client certificate.

--timeout bounds the whole check.`,
		Example: `  tollgate healthcheck
  tollgate healthcheck --server tollgate-2:7070 --tls-ca ca.pem
  tollgate healthcheck --url http://127.0.0.1:7071/readyz
  tollgate healthcheck --url https://tollgate.internal:7071/readyz --tls-ca ca.pem`,
		Args: exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
			defer cancel()
			if url != "" {
				return g.getHealth(ctx, cmd, url)
			}
			for _, addr := range strings.Split(g.server, ",") {
				if addr = strings.TrimSpace(addr); addr == "" {
					continue
				}
				if err := g.grpcHealth(ctx, cmd, addr); err != nil {
					return err
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&url, "url", "", "GET this URL (a server's /readyz or /healthz) instead of asking --server's gRPC health")
	return cmd
}

// grpcHealth asks the server at addr for its overall gRPC health.
func (g *globals) grpcHealth(ctx context.Context, cmd *cobra.Command, addr string) error {
	d, err := g.sec.dialer()
	if err != nil {
		return err
	}
	d.ClientID = cliClientID()
	c, err := d.Dial(addr)
	if err != nil {
		return err
	}
	defer c.Close()
	resp, err := grpc_health_v1.NewHealthClient(c.Conn()).Check(ctx, &grpc_health_v1.HealthCheckRequest{})
	if err != nil {
		return fmt.Errorf("%s: %w", addr, err)
	}
	if st := resp.GetStatus(); st != grpc_health_v1.HealthCheckResponse_SERVING {
		return fmt.Errorf("%s answered %s", addr, st)
	}
	_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s: SERVING\n", addr)
	return err
}

// getHealth GETs url, over TLS with the --tls-* flags.
func (g *globals) getHealth(ctx context.Context, cmd *cobra.Command, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return usageErrorf("--url %q: %v", url, err)
	}
	cfg, err := g.sec.tlsConfig()
	if err != nil {
		return err
	}
	hc := http.DefaultClient
	if cfg != nil {
		hc = &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("%s: %w", url, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s answered %s", url, resp.Status)
	}
	_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s: %s\n", url, resp.Status)
	return err
}
