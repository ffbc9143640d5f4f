package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tollgate/tollgate/client"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// leaseFlags are the flags of the commands that acquire a lease (acquire,
// run).
type leaseFlags struct {
	weight      int64
	ttl         time.Duration
	priority    int32
	waitTimeout time.Duration
	oldWait     string // a deprecated name of --wait-timeout, or ""
	try         bool
	description string
}

// register adds the flags to f; oldWait, when not empty, is a deprecated
// name of --wait-timeout that still works.
func (lf *leaseFlags) register(f *pflag.FlagSet, oldWait string) {
	f.Int64Var(&lf.weight, "weight", 1, "permit weight to hold")
	f.DurationVar(&lf.ttl, "ttl", 0, "lease TTL, renewed every TTL/3 (0: the pool's default_lease_ttl)")
	f.Int32Var(&lf.priority, "priority", 0, "place in the wait queue: higher is granted first")
	f.DurationVar(&lf.waitTimeout, "wait-timeout", 0, "longest wait in the queue (0: until Ctrl-C)")
	if oldWait != "" {
		lf.oldWait = oldWait
		f.DurationVar(&lf.waitTimeout, oldWait, 0, "the old name of --wait-timeout")
		deprecate(f, oldWait, "wait-timeout")
	}
	f.BoolVar(&lf.try, "try", false, "fail at once (NO_CAPACITY) rather than wait")
	f.StringVar(&lf.description, "description", "", "note shown to operators with the lease")
}

// options checks the flags and returns them as acquire options.
func (lf *leaseFlags) options(f *pflag.FlagSet) ([]client.AcquireOption, error) {
	waitFlag := "wait-timeout"
	if lf.oldWait != "" && f.Changed(lf.oldWait) {
		waitFlag = lf.oldWait
	}
	if lf.waitTimeout < 0 {
		return nil, usageErrorf("--%s must not be negative, not %v", waitFlag, lf.waitTimeout)
	}
	if lf.try && lf.waitTimeout != 0 {
		return nil, usageErrorf("--try does not wait; drop --%s", waitFlag)
	}
	var opts []client.AcquireOption
	if f.Changed("weight") {
		opts = append(opts, client.WithWeight(lf.weight))
	}
	if f.Changed("ttl") {
		opts = append(opts, client.WithTTL(lf.ttl))
	}
	if lf.priority != 0 {
		opts = append(opts, client.WithPriority(lf.priority))
	}
	if lf.waitTimeout != 0 {
		opts = append(opts, client.WithWaitTimeout(lf.waitTimeout))
	}
	if lf.description != "" {
		opts = append(opts, client.WithDescription(lf.description))
	}
	return opts, nil
}

func newAcquireCmd(g *globals) *cobra.Command {
	var (
		lf     leaseFlags
		format outputFlag
	)
	cmd := &cobra.Command{
		Use:   "acquire POOL [flags]",
		Short: "Acquire a lease and hold it until Ctrl-C",
		Long: `Acquire a lease from POOL, waiting in the pool's queue until it is granted
(or --wait-timeout passes; with --try, not at all), then hold it, renewing it
in the background, until Ctrl-C (or SIGTERM), and release it.

It prints "acquired lease <id> fencing_token=<n> weight=<w> expires <time>"
once granted and "released lease <id>" at the end; with -o json, one JSON
object per line for each ({"event": "acquired", "lease_id": ...} and
{"event": "released", ...}, or {"event": "lost", "reason": ...} when the
lease was lost). While it waits, it prints its place in the
pool's queue when that changes, checked every second ("waiting in pool
"db"'s queue: position 2 of 5" on stderr; with -o json, {"event": "waiting",
"position": 2, "waiting": 5} on stdout). If the lease is lost while held (it expired or
was revoked on the server, or could not be renewed in time), it says so and
exits with status 1.`,
		Example: `  tollgate acquire orders-db
  tollgate acquire orders-db --weight 2 --ttl 30s --wait-timeout 1m
  tollgate acquire gpu --try --description "manual maintenance" -o json`,
		Args: exactArgs("POOL"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts, err := lf.options(cmd.Flags())
			if err != nil {
				return err
			}
			c, l, err := acquireLease(cmd.Context(), g, args[0], lf.try, opts, printQueue(cmd.OutOrStdout(), cmd.ErrOrStderr(), format.json, args[0]))
			if err != nil {
				return err
			}
			defer c.Close()
			out := cmd.OutOrStdout()
			if err := printAcquired(out, format.json, l); err != nil {
				return err
			}
			select {
			case <-cmd.Context().Done():
			case <-l.Done():
			}
			if err := releaseLease(cmd.Context(), g, l); err != nil {
				if format.json && errors.Is(err, client.ErrLeaseLost) {
					if jerr := json.NewEncoder(out).Encode(lostJSON(l, err)); jerr != nil {
						return errors.Join(err, jerr)
					}
				}
				return err
			}
			if format.json {
				return json.NewEncoder(out).Encode(map[string]string{"event": "released", "pool": l.Pool(), "lease_id": l.ID()})
			}
			_, err = fmt.Fprintf(out, "released lease %s\n", l.ID())
			return err
		},
	}
	lf.register(cmd.Flags(), "")
	cmd.Flags().VarP(&format, "output", "o", "output format: text or json")
	return cmd
}

// acquireLease dials --server, checks that pool exists (within --timeout,
// so that a missing server or pool fails fast rather than wait for a
// connection forever), then acquires a lease of it, waiting until ctx ends
// unless try. The caller closes the client once done with the lease.
func acquireLease(ctx context.Context, g *globals, pool string, try bool, opts []client.AcquireOption, report queueReport) (*client.Client, *client.Lease, error) {
	c, err := g.dial()
	if err != nil {
		return nil, nil, err
	}
	if !try && report != nil {
		wctx, stop := context.WithCancel(ctx)
		watched := make(chan struct{})
		go func() {
			defer close(watched)
			watchQueue(wctx, c, pool, g.timeout, time.Second, report)
		}()
		defer func() { stop(); <-watched }() // nothing is reported after the acquire ends
	}
	pctx, cancel := context.WithTimeout(ctx, g.timeout)
	_, err = tollgatev1.NewAdminServiceClient(c.Conn()).GetPool(pctx, &tollgatev1.GetPoolRequest{Name: pool})
	cancel()
	var l *client.Lease
	switch {
	case err != nil && !adminRefused(err): // a non-admin cannot check: let the acquire tell
	case try:
		l, err = c.TryAcquire(ctx, pool, opts...)
		if errors.Is(err, apierr.ErrNoCapacity) || errors.Is(err, apierr.ErrRecovering) {
			err = hinted{err, "without --try, tollgate waits in the pool's queue"}
		}
	default:
		l, err = c.Acquire(ctx, pool, opts...)
	}
	if err != nil {
		c.Close()
		if ctx.Err() != nil {
			err = fmt.Errorf("gave up waiting for a lease of pool %q: %w", pool, err)
		}
		return nil, nil, err
	}
	return c, l, nil
}

// releaseLease releases l within --timeout, even once ctx has ended.
func releaseLease(ctx context.Context, g *globals, l *client.Lease) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.timeout)
	defer cancel()
	return l.Release(rctx)
}

// leaseJSON is a granted lease as acquire -o json prints it.
type leaseJSON struct {
	Event        string         `json:"event"`
	Pool         string         `json:"pool"`
	LeaseID      string         `json:"lease_id"`
	FencingToken uint64         `json:"fencing_token"`
	Weight       int64          `json:"weight"`
	ExpireTime   time.Time      `json:"expire_time"`
	TTL          string         `json:"ttl"`
	Resources    []resourceJSON `json:"resources,omitempty"`
}

// resourceJSON is an instance a lease is bound to, in JSON.
type resourceJSON struct {
	ID         string            `json:"id"`
	Provider   string            `json:"provider,omitempty"`
	Attributes map[string]string `json:"attributes,omitempty"`
}

func resourcesJSON(rs []client.Resource) []resourceJSON {
	out := make([]resourceJSON, len(rs))
	for i, r := range rs {
		out[i] = resourceJSON{r.ID, r.Provider, r.Attributes}
	}
	return out
}

// leaseLostJSON is a lease that ended without its holder's release, as
// acquire -o json prints it.
type leaseLostJSON struct {
	Event   string `json:"event"` // "lost"
	Pool    string `json:"pool"`
	LeaseID string `json:"lease_id"`
	// Code and Reason are the server's status and reason when it said why
	// (NOT_FOUND and LEASE_EXPIRED, FAILED_PRECONDITION and LEASE_REVOKED,
	// ...); absent for a loss by the local deadline.
	Code    string `json:"code,omitempty"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message"`
}

func lostJSON(l *client.Lease, err error) leaseLostJSON {
	out := leaseLostJSON{Event: "lost", Pool: l.Pool(), LeaseID: l.ID(), Message: strings.TrimPrefix(formatError(err), "tollgate: ")}
	if e, ok := client.FromError(err); ok {
		out.Code, out.Reason = client.CodeName(e.Code), string(e.Reason)
	}
	return out
}

// printAcquired prints that l was granted, as text or a JSON line.
func printAcquired(out io.Writer, asJSON bool, l *client.Lease) error {
	if asJSON {
		return json.NewEncoder(out).Encode(leaseJSON{"acquired", l.Pool(), l.ID(), l.FencingToken(), l.Weight(), l.Expiry(), l.TTL().String(), resourcesJSON(l.Resources())})
	}
	fmt.Fprintf(out, "acquired lease %s fencing_token=%d weight=%d expires %s (ttl %v, renewed in the background; Ctrl-C to release)\n",
		l.ID(), l.FencingToken(), l.Weight(), l.Expiry().Format(time.RFC3339Nano), l.TTL())
	for _, r := range l.Resources() {
		fmt.Fprintf(out, "  instance %s%s\n", r.ID, resourceSuffix(r.Provider, r.Attributes))
	}
	return nil
}
