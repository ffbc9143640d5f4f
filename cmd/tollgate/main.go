// Command tollgate is Tollgate's server and command-line client.
//
//	tollgate serve                      run a server
//	tollgate pool create|get|list|update|delete|suspend|resume|drain ...
//	tollgate lease list|get|revoke ...
//	tollgate resource add|remove|list|provide ...
//	tollgate client list [--pool P]     the connected clients and what they hold
//	tollgate acquire POOL               hold a lease until Ctrl-C
//	tollgate run POOL -- CMD ARGS...    run a command while holding a lease
//	tollgate take POOL -n N             take rate tokens
//	tollgate events [--pool P]          tail the server's events until Ctrl-C
//	tollgate stats [POOL...]            a table of pools' counters, live on a terminal
//	tollgate version                    the version and build of this binary
//	tollgate healthcheck [--url U]      GET a server's /readyz (for container health checks)
//	tollgate status                     each server of --server a,b,c: its role, the leader, its epoch
//	tollgate bench [--peer redis]       pairs/s of Acquire + Release, beside a Redis semaphore
//
// Every client command talks to --server (default 127.0.0.1:7070, or the
// TOLLGATE_SERVER environment variable): one address, or a comma-separated
// list of the servers of a cluster, whose leader the command finds. Errors are printed as
// "tollgate: <message> (<CODE> <REASON>)"; the exit status is 0 on success,
// 1 on failure and 2 on a usage error (tollgate run: see its help).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/grpc/codes"

	"github.com/tollgate/tollgate/client"
)

// Exit statuses.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}

// run runs the tollgate command line args (without the program name) with
// ctx (cancelled by Ctrl-C), writing to stdout and stderr and reading the
// environment through getenv, and returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	root, started := newRootCmd(stdout, stderr, getenv)
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return exitOK
	}
	var es statusError
	if errors.As(err, &es) { // run: the command's status
		if es.msg != "" {
			fmt.Fprintln(stderr, es.msg)
		}
		return es.code
	}
	fmt.Fprintln(stderr, formatError(err))
	var ue usageError
	if !*started || errors.As(err, &ue) {
		if cmd != nil {
			fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
		}
		return exitUsage
	}
	return exitError
}

// globals are the flags every client command shares.
type globals struct {
	server  string
	timeout time.Duration
	sec     clientSecurity // --tls-*, --token-file
}

// newRootCmd returns the tollgate command with all its subcommands. The
// returned flag is set once a command's own code starts running, so errors
// before that (flags, arguments, unknown commands) are usage errors.
func newRootCmd(stdout, stderr io.Writer, getenv func(string) string) (*cobra.Command, *bool) {
	g := &globals{}
	started := new(bool)
	root := &cobra.Command{
		Use:   "tollgate",
		Short: "Tollgate: a gRPC rate-and-concurrency control plane",
		Long: `Tollgate grants concurrency permits (leases with deadlines) and token-bucket
rate tokens per named resource pool, to many processes on many machines.

This command runs a server (tollgate serve) and talks to one: it manages
pools (tollgate pool ...), holds a lease (tollgate acquire), runs a command
under one (tollgate run) and takes rate tokens (tollgate take). Client
commands talk to --server, which defaults to $TOLLGATE_SERVER or
` + client.DefaultServer + `.`,
		SilenceErrors: true,
		SilenceUsage:  true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			*started = true
			if cmd.Flags().Lookup("server") == nil { // serve, version: no client flags
				return nil
			}
			if g.timeout <= 0 {
				return usageErrorf("--timeout must be positive, not %v", g.timeout)
			}
			if strings.TrimSpace(g.server) == "" {
				return usageErrorf("--server is empty; give host:port, or a comma-separated list of them")
			}
			return nil
		},
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })

	server := client.DefaultServer
	if env := getenv("TOLLGATE_SERVER"); env != "" {
		server = env
	}
	root.Version = versionString()
	root.SetVersionTemplate("{{.Version}}\n")
	root.AddCommand(newServeCmd(), newVersionCmd(), newHealthcheckCmd(), newBenchCmd())
	for _, c := range []*cobra.Command{newPoolCmd(g), newLeaseCmd(g), newAcquireCmd(g), newRunCmd(g), newTakeCmd(g), newEventsCmd(g), newStatsCmd(g), newResourceCmd(g), newClientCmd(g), newStatusCmd(g)} {
		g.register(c.PersistentFlags(), server)
		root.AddCommand(c)
	}
	return root, started
}

// register adds the client flags to a client command (and its
// subcommands); serve has none of them.
func (g *globals) register(pf *pflag.FlagSet, server string) {
	pf.StringVar(&g.server, "server", server, "Tollgate server address (host:port), or a comma-separated list of the servers of a cluster (calls go to the leader); env TOLLGATE_SERVER")
	g.sec.register(pf)
	pf.DurationVar(&g.timeout, "timeout", 10*time.Second, "deadline of each admin call (pool commands, and acquire's pool check and release), and added to take's --max-wait")
}

// dial returns a client of the --server address.
func (g *globals) dial() (*client.Client, error) {
	opts, err := g.sec.options()
	if err != nil {
		return nil, err
	}
	return client.Dial(g.server, append(opts, client.WithClientID(cliClientID()))...)
}

// cliClientID names the CLI to the server: "tollgate-cli@<host>-<pid>".
func cliClientID() string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown"
	}
	return fmt.Sprintf("tollgate-cli@%s-%d", host, os.Getpid())
}

// usageError is a mistake in the command line (exit status 2).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usageErrorf(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// exactArgs requires exactly the named positional arguments.
func exactArgs(names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) == len(names) {
			for i, a := range args {
				if a == "" {
					return usageErrorf("%s is empty", names[i])
				}
			}
			return nil
		}
		if len(args) < len(names) {
			return usageErrorf("missing %s", strings.Join(names[len(args):], " "))
		}
		return usageErrorf("too many arguments: %q (want %s)", args[len(names):], strings.Join(names, " "))
	}
}

// minArgs requires the named positional arguments, the last of which may
// repeat: "POOL ID..." is minArgs("POOL", "ID").
func minArgs(names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < len(names) {
			return usageErrorf("missing %s", strings.Join(names[len(args):], " "))
		}
		for i, a := range args {
			if a == "" {
				return usageErrorf("%s is empty", names[min(i, len(names)-1)])
			}
		}
		return nil
	}
}

// formatError renders an error for people: a server error as
// "tollgate: <message> (<CODE> <REASON>)", anything else as
// "tollgate: <error>".
func formatError(err error) string {
	msg := err.Error()
	if e, ok := client.FromError(err); ok && !errors.Is(err, client.ErrLeaseLost) {
		msg = e.Error()
		if e.Code == codes.DeadlineExceeded && e.Reason == "" {
			msg += "; the server did not answer in time (raise --timeout?)"
		}
		if e.Code == codes.Unavailable && e.Reason == "" {
			msg += "; is a server running there? (set --server or TOLLGATE_SERVER)"
		}
	}
	return "tollgate: " + strings.TrimPrefix(msg, "tollgate: ")
}
