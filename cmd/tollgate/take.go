package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/durationpb"

	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

func newTakeCmd(g *globals) *cobra.Command {
	var (
		n       int64
		maxWait time.Duration
		format  outputFlag
	)
	cmd := &cobra.Command{
		Use:   "take POOL [flags]",
		Short: "Take rate tokens from a pool",
		Long: `Take N rate tokens from POOL's token bucket. If they are not available now,
the server waits for them up to --max-wait; if they would not come by then,
it refuses at once (RATE_LIMITED) and says when they would.

It prints "took N tokens from POOL (waited D)"; with -o json, the
TakeResponse ({"tokens": N, "waited": "0.25s", ...}).`,
		Example: `  tollgate take api.github.com
  tollgate take api.github.com -n 10 --max-wait 2s -o json`,
		Args: exactArgs("POOL"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if maxWait < 0 {
				return usageErrorf("--max-wait must not be negative, not %v", maxWait)
			}
			c, err := g.dial()
			if err != nil {
				return err
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), maxWait+g.timeout)
			defer cancel()
			resp, err := tollgatev1.NewLimiterServiceClient(c.Conn()).Take(ctx, &tollgatev1.TakeRequest{
				Pool:    args[0],
				Tokens:  &n,
				MaxWait: durationpb.New(maxWait),
			})
			if err != nil {
				return err
			}
			if format.json {
				return format.printer(cmd.OutOrStdout()).message(resp)
			}
			unit := "tokens"
			if resp.GetTokens() == 1 {
				unit = "token"
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "took %d %s from %s (waited %v)\n", resp.GetTokens(), unit, args[0], resp.GetWaited().AsDuration())
			return err
		},
	}
	cmd.Flags().Int64VarP(&n, "tokens", "n", 1, "number of tokens (at most the pool's burst)")
	cmd.Flags().DurationVar(&maxWait, "max-wait", 0, "longest time to wait for the tokens (0: they must be available now)")
	cmd.Flags().VarP(&format, "output", "o", "output format: text or json")
	return cmd
}
