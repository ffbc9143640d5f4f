package main

import (
	"context"
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
	"google.golang.org/grpc/codes"

	"github.com/tollgate/tollgate/client"
)

// statusError is an error that ends tollgate with status code, having
// printed nothing (or its message, when msg is set).
type statusError struct {
	code int
	msg  string
}

func (e statusError) Error() string { return e.msg }

// Exit statuses of tollgate run's own outcomes, apart from the command's
// (0-255, 128+N when signal N killed it), usage errors (exitUsage) and a
// command that cannot be started (126, or 127 when it is not found). They
// sit above the range of signals (128+64) so a script can tell them apart.
const (
	exitRunBusy        = 241 // --try found no capacity, --wait-timeout passed, or the queue is full (--conflict-exit-code)
	exitRunNoPool      = 242 // no such pool
	exitRunUnreachable = 243 // no server answered
	exitRunFailed      = 244 // any other failure before the command ran (refused, TLS, token...)
	exitRunInterrupted = 245 // a signal ended the wait for the lease
	exitRunLeaseLost   = 246 // the lease was lost while the command ran
)

func newRunCmd(g *globals) *cobra.Command {
	var (
		lf       leaseFlags
		grace    time.Duration
		conflict int
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

On Linux, COMMAND runs in a process group of its own, and nothing of that
group outlives the lease: SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and
SIGUSR2 sent to tollgate are passed on to the whole group, once; if tollgate
dies in any way (even kill -9), a small keeper process in the group kills
the group; and when COMMAND exits, whatever it left running in its group is
killed (SIGKILL) before the lease is released. At a terminal, the group has
the terminal while it runs (Ctrl-C reaches it once); Ctrl-Z stops it and
tollgate, which then stops renewing: a lease whose TTL passes while stopped
is lost. On other systems COMMAND is an ordinary child in tollgate's process
group: SIGINT and SIGTERM are passed on to it (a terminal's Ctrl-C reaches it
from the terminal too), and if tollgate dies, COMMAND keeps running.

If the lease is lost while COMMAND runs (it expired or was revoked on the
server, or could not be renewed in time), tollgate sends the group SIGTERM,
then SIGKILL if COMMAND is still running after --grace, says so and exits
246.

Exit status: COMMAND's own (128+N when signal N killed it); 126 when it
cannot be run, 127 when it is not found; 2 on a usage error; otherwise
tollgate's own outcome:

  241  busy: --try found no capacity, --wait-timeout passed or the queue is full
       (choose another code with --conflict-exit-code)
  242  no such pool
  243  no server answered (none running at --server, or --timeout passed)
  244  any other failure before COMMAND ran (refused by the server, TLS...)
  245  a signal ended the wait for the lease
  246  the lease was lost while COMMAND ran`,
		Example: `  tollgate run nightly-backup -- pg_dump -f /backups/orders.sql orders
  tollgate run orders-db --weight 2 --wait-timeout 10m -- ./migrate.sh
  tollgate run gpu --ttl 1m --grace 30s -- sh -c 'train --device "$TOLLGATE_RESOURCES"'
  tollgate run reindex --try -E 0 -- ./reindex.sh   # busy: skip this run quietly`,
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
			if conflict < 0 || conflict > 255 {
				return usageErrorf("--conflict-exit-code must be 0 to 255, not %d", conflict)
			}
			opts, err := lf.options(cmd.Flags())
			if err != nil {
				return err
			}
			return runWithLease(cmd, g, args[0], args[cmd.ArgsLenAtDash():], lf.try, opts, grace, conflict)
		},
	}
	lf.register(cmd.Flags(), "wait")
	cmd.Flags().DurationVar(&grace, "grace", 10*time.Second, "how long COMMAND has to exit after SIGTERM once the lease is lost, before SIGKILL")
	cmd.Flags().IntVarP(&conflict, "conflict-exit-code", "E", exitRunBusy, "exit status when the pool is busy (--try found no capacity, --wait-timeout passed, or the queue is full)")
	return cmd
}

// runWithLease acquires a lease of pool, runs argv under it and releases
// it; see newRunCmd.
func runWithLease(cmd *cobra.Command, g *globals, pool string, argv []string, try bool, opts []client.AcquireOption, grace time.Duration, conflict int) error {
	// Signals are passed on to the command; until it starts, they give up
	// the wait.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, forwardedSignals...)
	defer signal.Stop(sigs)
	ctx, interrupt := context.WithCancel(cmd.Context())
	defer interrupt()
	acquired := make(chan struct{})
	waited := make(chan struct{})
	go func() {
		defer close(waited)
		select {
		case <-sigs:
			interrupt()
		case <-acquired:
		}
	}()

	c, l, err := acquireLease(ctx, g, pool, try, opts, printQueue(cmd.OutOrStdout(), cmd.ErrOrStderr(), false, pool))
	close(acquired)
	<-waited
	if err != nil {
		return runFailure(ctx, err, conflict)
	}
	defer c.Close()
	if ctx.Err() != nil { // interrupted as the lease was granted
		return runFailure(ctx, errors.Join(ctx.Err(), releaseLease(ctx, g, l)), conflict)
	}

	child := exec.Command(argv[0], argv[1:]...)
	child.Stdin, child.Stdout, child.Stderr = cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr()
	child.Env = append(os.Environ(), leaseEnv(l)...)
	child.WaitDelay = time.Second // a grandchild holding its output open does not hold tollgate
	proc, err := startCommand(child)
	if err != nil {
		rerr := releaseLease(ctx, g, l)
		code := 126
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			code = 127
		}
		return statusError{code, "tollgate: " + errors.Join(fmt.Errorf("cannot run the command: %w", err), rerr).Error()}
	}
	exited := make(chan error, 1)
	go func() { exited <- proc.wait() }()

	var lost error
	var kill <-chan time.Time
	leaseDone := l.Done()
	for {
		select {
		case s := <-sigs:
			proc.signal(s.(syscall.Signal))
			continue
		case <-proc.stopped():
			proc.suspend()
			continue
		case <-leaseDone:
			leaseDone = nil
			lost = l.Err()
			fmt.Fprintf(cmd.ErrOrStderr(), "tollgate: %s; sending the command SIGTERM (SIGKILL in %v)\n", lostText(lost), grace)
			proc.signal(syscall.SIGTERM)
			kill = time.After(grace)
			continue
		case <-kill:
			fmt.Fprintf(cmd.ErrOrStderr(), "tollgate: the command did not exit within --grace %v of SIGTERM; sending SIGKILL\n", grace)
			proc.signal(syscall.SIGKILL)
			kill = nil
			continue
		case err = <-exited:
		}
		break
	}
	proc.end() // before the release: nothing the command left behind runs without the lease
	status := childStatus(child.ProcessState)
	if lost != nil {
		return statusError{exitRunLeaseLost, fmt.Sprintf("tollgate: the command ran without its lease from when it was lost, and exited with status %d", status)}
	}
	if rerr := releaseLease(ctx, g, l); rerr != nil {
		if errors.Is(rerr, client.ErrLeaseLost) { // lost as the command exited
			return statusError{exitRunLeaseLost, fmt.Sprintf("%s; the command exited with status %d", formatError(rerr), status)}
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "%s; the server frees the lease when its TTL passes\n", formatError(fmt.Errorf("releasing lease %s: %w", l.ID(), rerr)))
	}
	if err != nil && child.ProcessState == nil {
		return err
	}
	return statusError{code: status}
}

// runFailure is err, from before the command ran, with the exit status
// that tells its kind (see newRunCmd); ctx is the wait's, cancelled by a
// signal.
func runFailure(ctx context.Context, err error, conflict int) error {
	var fl *followLeader
	if errors.As(err, &fl) { // nothing ran: run goes again on the leader
		return fl
	}
	code := exitRunFailed
	e, ok := client.FromError(err)
	switch {
	case ctx.Err() != nil:
		code = exitRunInterrupted
	case !ok:
	case e.Reason == "NO_CAPACITY" || e.Reason == "WAIT_TIMEOUT" || e.Reason == "QUEUE_FULL":
		code = conflict
	case e.Reason == "POOL_NOT_FOUND":
		code = exitRunNoPool
	case e.Reason == "" && (e.Code == codes.Unavailable || e.Code == codes.DeadlineExceeded):
		code = exitRunUnreachable
	}
	return statusError{code, formatError(err)}
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
