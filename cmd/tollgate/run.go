package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/tollgate/tollgate/client"
)

// statusError is an error that ends tollgate with status code, having
// printed nothing (or its message, when msg is set).
type statusError struct {
	code int
	msg  string
}

func (e statusError) Error() string { return e.msg }

func newRunCmd(g *globals) *cobra.Command {
	var (
		lf    leaseFlags
		grace time.Duration
	)
	cmd := &cobra.Command{
		Use:   "run POOL [flags] -- COMMAND [ARGS...]",
		Short: "Run a command while holding a lease",
		Long: `Acquire a lease from POOL (waiting in its queue like tollgate acquire), run
COMMAND with it, renewing it in the background, and release it when COMMAND
exits: like flock(1) or "etcdctl lock", so that cron jobs and shell scripts
share a limit with services.

COMMAND runs with tollgate's environment plus:

  TOLLGATE_POOL            the pool
  TOLLGATE_LEASE_ID        the lease's id
  TOLLGATE_FENCING_TOKEN   the lease's fencing token (pass it to the system
                           you protect, which refuses older tokens)
  TOLLGATE_WEIGHT          the permit weight held
  TOLLGATE_RESOURCES       in an active or passive pool, the ids of the
                           instances the lease is bound to, comma-separated
  TOLLGATE_RESOURCES_JSON  the same instances with their provider and
                           attributes, as a JSON array

tollgate exits with COMMAND's exit status (128+N when a signal N killed it)
and forwards SIGINT and SIGTERM to it. If the lease is lost while COMMAND
runs (it expired or was revoked on the server, or could not be renewed in
time), tollgate sends COMMAND SIGTERM, then SIGKILL if it is still running
after --grace, says so and exits with status 1. A COMMAND that cannot be
started exits 127 (not found) or 126.`,
		Example: `  tollgate run nightly-backup -- pg_dump -f /backups/orders.sql orders
  tollgate run orders-db --weight 2 --wait-timeout 10m -- ./migrate.sh
  tollgate run gpu --ttl 1m --grace 30s -- sh -c 'train --device "$TOLLGATE_RESOURCES"'`,
		Args: func(cmd *cobra.Command, args []string) error {
			dash := cmd.ArgsLenAtDash()
			if dash < 0 || len(args) == dash {
				return usageErrorf("give the command after --: tollgate run POOL [flags] -- COMMAND [ARGS...]")
			}
			return exactArgs("POOL")(cmd, args[:dash])
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if grace <= 0 {
				return usageErrorf("--grace must be positive, not %v", grace)
			}
			opts, err := lf.options(cmd.Flags())
			if err != nil {
				return err
			}
			return runWithLease(cmd, g, args[0], args[cmd.ArgsLenAtDash():], lf.try, opts, grace)
		},
	}
	lf.register(cmd.Flags(), "wait")
	cmd.Flags().DurationVar(&grace, "grace", 10*time.Second, "how long COMMAND has to exit after SIGTERM once the lease is lost, before SIGKILL")
	return cmd
}

// runWithLease acquires a lease of pool, runs argv under it and releases
// it; see newRunCmd.
func runWithLease(cmd *cobra.Command, g *globals, pool string, argv []string, try bool, opts []client.AcquireOption, grace time.Duration) error {
	// Signals forwarded to the command; until it starts, they cancel the
	// command's context (main), which gives up the wait.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)

	ctx := cmd.Context()
	c, l, err := acquireLease(ctx, g, pool, try, opts, printQueue(cmd.OutOrStdout(), cmd.ErrOrStderr(), false, pool))
	if err != nil {
		return err
	}
	defer c.Close()
	if ctx.Err() != nil { // interrupted as the lease was granted
		return errors.Join(ctx.Err(), releaseLease(ctx, g, l))
	}

	child := exec.Command(argv[0], argv[1:]...)
	child.Stdin, child.Stdout, child.Stderr = cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr()
	child.Env = append(os.Environ(), leaseEnv(l)...)
	child.WaitDelay = time.Second // a grandchild holding its output open does not hold tollgate
	if err := child.Start(); err != nil {
		rerr := releaseLease(ctx, g, l)
		code := 126
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			code = 127
		}
		return statusError{code, "tollgate: " + errors.Join(fmt.Errorf("cannot run the command: %w", err), rerr).Error()}
	}
	exited := make(chan error, 1)
	go func() { exited <- child.Wait() }()

	var lost error
	var kill <-chan time.Time
	leaseDone := l.Done()
	for {
		select {
		case s := <-sigs:
			_ = child.Process.Signal(s)
			continue
		case <-leaseDone:
			leaseDone = nil
			lost = l.Err()
			fmt.Fprintf(cmd.ErrOrStderr(), "tollgate: %s; sending the command SIGTERM (SIGKILL in %v)\n", lostText(lost), grace)
			_ = child.Process.Signal(syscall.SIGTERM)
			kill = time.After(grace)
			continue
		case <-kill:
			fmt.Fprintf(cmd.ErrOrStderr(), "tollgate: the command did not exit within --grace %v of SIGTERM; sending SIGKILL\n", grace)
			_ = child.Process.Kill()
			kill = nil
			continue
		case err = <-exited:
		}
		break
	}
	status := childStatus(child.ProcessState)
	if lost != nil {
		return statusError{exitError, fmt.Sprintf("tollgate: the command ran without its lease from when it was lost, and exited with status %d", status)}
	}
	if rerr := releaseLease(ctx, g, l); rerr != nil {
		if errors.Is(rerr, client.ErrLeaseLost) { // lost as the command exited
			return statusError{exitError, fmt.Sprintf("%s; the command exited with status %d", formatError(rerr), status)}
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "%s; the server frees the lease when its TTL passes\n", formatError(fmt.Errorf("releasing lease %s: %w", l.ID(), rerr)))
	}
	if err != nil && child.ProcessState == nil {
		return err
	}
	return statusError{code: status}
}

// lostText says that l's lease was lost and why.
func lostText(err error) string {
	return strings.TrimPrefix(formatError(err), "tollgate: ")
}

// childStatus is a finished command's exit status as a shell reports it:
// its exit code, or 128+N when signal N killed it.
func childStatus(ps *os.ProcessState) int {
	if ps == nil {
		return exitError
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// leaseEnv is the environment run gives its command about l.
func leaseEnv(l *client.Lease) []string {
	env := []string{
		"TOLLGATE_POOL=" + l.Pool(),
		"TOLLGATE_LEASE_ID=" + l.ID(),
		"TOLLGATE_FENCING_TOKEN=" + strconv.FormatUint(l.FencingToken(), 10),
		"TOLLGATE_WEIGHT=" + strconv.FormatInt(l.Weight(), 10),
	}
	if rs := l.Resources(); len(rs) > 0 {
		ids := make([]string, len(rs))
		for i, r := range rs {
			ids[i] = r.ID
		}
		b, _ := json.Marshal(resourcesJSON(rs)) // strings only: cannot fail
		env = append(env, "TOLLGATE_RESOURCES="+strings.Join(ids, ","), "TOLLGATE_RESOURCES_JSON="+string(b))
	}
	return env
}
