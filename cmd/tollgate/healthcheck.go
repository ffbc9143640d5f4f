package main

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/spf13/cobra"
)

// newHealthcheckCmd is "tollgate healthcheck": a GET of the server's
// /readyz for images without curl (the Dockerfile's HEALTHCHECK).
func newHealthcheckCmd() *cobra.Command {
	var (
		url     string
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "healthcheck",
		Short: "Check that a server is ready (GET its /readyz)",
		Long: `GET --url (the /readyz of the server's HTTP listener, serve --http) and exit
with status 0 if it answers 200, else 1 saying what it got. For container
health checks where no curl is installed: the Docker image runs it.

/readyz answers 200 while the server serves and 503 once it shuts down;
/healthz answers 200 while the process runs. Over https the server's
certificate is checked with the system's CA roots.`,
		Example: `  tollgate healthcheck
  tollgate healthcheck --url http://127.0.0.1:7071/healthz`,
		Args: exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if err != nil {
				return usageErrorf("--url %q: %v", url, err)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return fmt.Errorf("%s: %w", url, err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s answered %s", url, resp.Status)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s: %s\n", url, resp.Status)
			return err
		},
	}
	cmd.Flags().StringVar(&url, "url", "http://127.0.0.1:7071/readyz", "URL to GET")
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Second, "longest wait for the answer")
	return cmd
}
