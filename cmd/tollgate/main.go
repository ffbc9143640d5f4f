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
//	tollgate healthcheck [--url U]      --server's gRPC health, or GET a server's /readyz
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
	"net"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/tollgate/tollgate/client"
	"github.com/tollgate/tollgate/internal/suggest"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
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
	root, started, finish := newRootCmd(stdout, stderr, getenv)
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	finish()
	for hops := 0; hops < maxLeaderHops; hops++ {
		var fl *followLeader
		if !errors.As(err, &fl) {
			break
		}
		// Nothing was applied: run the command again on the leader.
		if fl.shard != "" {
			fmt.Fprintf(stderr, "tollgate: %s does not lead shard %s; following its answer to its leader, %s\n", fl.server, fl.shard, fl.leader)
		} else {
			fmt.Fprintf(stderr, "tollgate: %s is not the leader; following its answer to the leader, %s\n", fl.server, fl.leader)
		}
		args = withServer(args, fl.leader)
		root, started, finish = newRootCmd(stdout, stderr, getenv)
		root.SetArgs(args)
		cmd, err = root.ExecuteContextC(ctx)
		finish()
	}
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
	server := ""
	if cmd != nil {
		if f := cmd.Flags().Lookup("server"); f != nil {
			server = f.Value.String()
		}
	}
	fmt.Fprintln(stderr, formatErrorAt(err, server))
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
	hops    *hops          // for several servers: the servers answers named
}

// newRootCmd returns the tollgate command with all its subcommands. The
// returned flag is set once a command's own code starts running, so errors
// before that (flags, arguments, unknown commands) are usage errors; the
// returned func closes what the command left open once it has run.
func newRootCmd(stdout, stderr io.Writer, getenv func(string) string) (*cobra.Command, *bool, func()) {
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
			warnDeprecated(cmd)
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
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error { return usageError{flagHint(cmd, err)} })

	server := client.DefaultServer
	if env := getenv("TOLLGATE_SERVER"); env != "" {
		server = env
	}
	root.Version = versionString()
	root.SetVersionTemplate("{{.Version}}\n")
	root.AddCommand(newServeCmd(), newVersionCmd(), newBenchCmd())
	for _, c := range []*cobra.Command{newHealthcheckCmd(g), newPoolCmd(g), newLeaseCmd(g), newAcquireCmd(g), newRunCmd(g), newTakeCmd(g), newEventsCmd(g), newStatsCmd(g), newResourceCmd(g), newClientCmd(g), newStatusCmd(g)} {
		g.register(c.PersistentFlags(), server)
		root.AddCommand(c)
	}
	return root, started, func() { g.hops.close() }
}

// register adds the client flags to a client command (and its
// subcommands); serve has none of them.
func (g *globals) register(pf *pflag.FlagSet, server string) {
	pf.StringVar(&g.server, "server", server, "Tollgate server address (host:port; host alone means port 7070), or a comma-separated list of the servers of a cluster (calls go to the leader); env TOLLGATE_SERVER")
	g.sec.register(pf)
	pf.DurationVar(&g.timeout, "timeout", 10*time.Second, "deadline of each admin call (pool commands, and acquire's pool check and release), and added to take's --max-wait")
}

// dial returns a client of the --server address. For a list of servers,
// whose calls wait for a leader, it first fails fast when no server of
// the list accepts a connection (probeCluster).
func (g *globals) dial() (*client.Client, error) {
	d, err := g.sec.dialer()
	if err != nil {
		return nil, err
	}
	if err := probeCluster(g.server, min(g.timeout, probeTimeout)); err != nil {
		return nil, err
	}
	d.ClientID = cliClientID()
	if !strings.Contains(g.server, ",") {
		d.GRPCOptions = append(d.GRPCOptions, grpc.WithChainUnaryInterceptor(stopAtLeaderHint(g.server)))
	} else {
		g.hops = &hops{d: d}
		d.GRPCOptions = append(slices.Clip(d.GRPCOptions), grpc.WithChainUnaryInterceptor(g.hops.follow))
	}
	c, err := d.Dial(g.server)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// hops are the connections a command given several servers opened to
// servers that NOT_LEADER answers named: the client routes its lease and
// rate calls by pool itself, but not the calls on its Conn() (the admin
// calls), which go to any server of the list.
type hops struct {
	d     client.Dialer
	mu    sync.Mutex
	conns map[string]*client.Client
}

// maxHopConns bounds the servers a command opens a connection to by
// following answers.
const maxHopConns = 16

// follow is the unary interceptor of a command given several servers: a
// call answered NOT_LEADER naming another server (the leader of the
// pool's shard) is sent again to that server, at most maxLeaderHops
// times; nothing was applied where it was refused.
func (h *hops) follow(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoker(ctx, method, req, reply, cc, opts...)
	for range maxLeaderHops {
		leader := ""
		var fl *followLeader
		if errors.As(err, &fl) {
			leader, err = fl.leader, fl.err
		} else if e, ok := client.FromError(err); ok && e.Is(apierr.ErrNotLeader) {
			leader = e.Metadata["leader"]
		}
		if leader == "" {
			return err
		}
		c, derr := h.conn(leader)
		if derr != nil {
			return err
		}
		err = c.Conn().Invoke(ctx, method, req, reply, opts...)
	}
	var fl *followLeader
	if errors.As(err, &fl) {
		return fl.err
	}
	return err
}

// conn returns the connection to addr, dialing it the first time.
func (h *hops) conn(addr string) (*client.Client, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if c, ok := h.conns[addr]; ok {
		return c, nil
	}
	if len(h.conns) >= maxHopConns {
		return nil, fmt.Errorf("more than %d servers named", maxHopConns)
	}
	d := h.d
	d.GRPCOptions = append(slices.Clip(d.GRPCOptions), grpc.WithChainUnaryInterceptor(stopAtLeaderHint(addr)))
	c, err := d.Dial(addr)
	if err != nil {
		return nil, err
	}
	if h.conns == nil {
		h.conns = map[string]*client.Client{}
	}
	h.conns[addr] = c
	return c, nil
}

// close closes the connections (nil: none were opened).
func (h *hops) close() {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range h.conns {
		c.Close()
	}
	h.conns = nil
}

// maxLeaderHops is how many NOT_LEADER answers naming the leader a
// command given one server follows: the server asked first may name a
// server that has just handed the pool's shard on (a planned move), which
// names the next.
const maxLeaderHops = 3

// followLeader is the error of a call that one server (the command's only
// --server) answered NOT_LEADER naming the leader (of the cluster, or of
// the shard of the pool the call is about): run runs the command again
// with --server set to the leader. Every command is about one pool at
// most, so the leader of its first call's pool leads every call it makes.
// It does not unwrap, so that the client does not send the call again to
// the same server.
type followLeader struct {
	server, leader string
	shard          string // the answer's "shard"; empty from a server that predates shards
	err            error
}

func (e *followLeader) Error() string {
	return fmt.Sprintf("%s is not the leader (the leader is %s): %v", e.server, e.leader, e.err)
}

// stopAtLeaderHint returns the unary interceptor of a connection to one
// server, self: a NOT_LEADER answer that names another server as the
// leader ends the call with a *followLeader (the client would send it to
// self again).
func stopAtLeaderHint(self string) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if e, ok := client.FromError(err); ok && e.Is(apierr.ErrNotLeader) {
			if leader := e.Metadata["leader"]; leader != "" && leader != self {
				return &followLeader{server: self, leader: leader, shard: e.Metadata["shard"], err: err}
			}
		}
		return err
	}
}

// withServer returns args with --server set to server: any --server
// before "--" is dropped and the new one put first.
func withServer(args []string, server string) []string {
	out := []string{"--server", server}
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return append(out, args[i:]...)
		case a == "--server":
			i++
		case strings.HasPrefix(a, "--server="):
		default:
			out = append(out, a)
		}
	}
	return out
}

// probeTimeout bounds probeCluster's wait for a connection.
const probeTimeout = 2 * time.Second

// probeCluster opens a TCP connection to each host:port of a
// comma-separated list of servers at once, within timeout, and returns an
// error naming every server and why, when each one refused (or could not
// be resolved). It returns nil for one address (whose calls fail fast by
// themselves), when any server accepts, and when one did not answer in
// time (it may be slow, not down: the call's own deadline tells).
func probeCluster(list string, timeout time.Duration) error {
	var addrs []string
	for _, a := range strings.Split(list, ",") {
		if a = strings.TrimSpace(a); a != "" {
			if _, _, err := net.SplitHostPort(a); err != nil {
				return nil // not host:port: leave it to the client
			}
			addrs = append(addrs, a)
		}
	}
	if len(addrs) < 2 {
		return nil
	}
	errs := make([]error, len(addrs))
	var wg sync.WaitGroup
	for i, a := range addrs {
		wg.Go(func() {
			conn, err := net.DialTimeout("tcp", a, timeout)
			if err == nil {
				conn.Close()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	why := make([]string, len(addrs))
	for i, err := range errs {
		var ne net.Error
		if err == nil || errors.As(err, &ne) && ne.Timeout() {
			return nil
		}
		why[i] = err.Error()
	}
	return fmt.Errorf("no server of the list answered: %s (is one running? set --server or TOLLGATE_SERVER)", strings.Join(why, "; "))
}

// cliClientID names the CLI to the server: "tollgate-cli@<host>-<pid>".
func cliClientID() string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown"
	}
	return fmt.Sprintf("tollgate-cli@%s-%d", host, os.Getpid())
}

// flagHint adds "did you mean --X?" to an unknown flag's error, naming
// the command's flags closest to it.
func flagHint(cmd *cobra.Command, err error) error {
	name, ok := strings.CutPrefix(err.Error(), "unknown flag: --")
	if !ok {
		return err
	}
	var names []string
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if !f.Hidden && f.Deprecated == "" {
			names = append(names, f.Name)
		}
	})
	hint := suggest.Hint(suggest.Near(name, names), func(n string) string { return "--" + n })
	if hint == "" {
		return err
	}
	return fmt.Errorf("%w%s", err, hint)
}

// deprecatedName is the annotation of a flag kept as the old name of
// another: its value is the new name.
const deprecatedName = "tollgate/deprecated-name-of"

// deprecate hides the flag old of f, an old name of the flag named
// current, which still works: warnDeprecated says so on stderr (pflag's
// own notice would go to stdout, among the command's output).
func deprecate(f *pflag.FlagSet, old, current string) {
	_ = f.MarkHidden(old)                                       // the flag was just added
	_ = f.SetAnnotation(old, deprecatedName, []string{current}) // likewise
}

// warnDeprecated prints a line on stderr for each deprecated flag name on
// cmd's command line.
func warnDeprecated(cmd *cobra.Command) {
	cmd.Flags().Visit(func(f *pflag.Flag) {
		if cur := f.Annotations[deprecatedName]; len(cur) == 1 {
			fmt.Fprintf(cmd.ErrOrStderr(), "tollgate: --%s is deprecated; use --%s (it means the same)\n", f.Name, cur[0])
		}
	})
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
func formatError(err error) string { return formatErrorAt(err, "") }

// formatErrorAt is formatError for a command that talked to server (its
// --server; "" if unknown): a failure to reach it says what was wrong and
// what to type instead.
func formatErrorAt(err error, server string) string {
	msg := err.Error()
	if e, ok := client.FromError(err); ok && !errors.Is(err, client.ErrLeaseLost) {
		msg = e.Error()
		if e.Code == codes.DeadlineExceeded && e.Reason == "" && !strings.Contains(e.Message, "could be reached") {
			msg += "; the server did not answer in time (raise --timeout?)"
		}
		if e.Code == codes.Unavailable && e.Reason == "" {
			msg += connectionHint(e.Message, server)
		}
	}
	var h hinted
	if errors.As(err, &h) && !strings.HasSuffix(msg, h.hint) {
		msg += "; " + h.hint
	}
	return "tollgate: " + strings.TrimPrefix(msg, "tollgate: ")
}

// hinted is err with advice for the person who ran the command: the
// message ends with it, while the exit status and client.FromError still
// see err.
type hinted struct {
	err  error
	hint string
}

func (h hinted) Error() string { return h.err.Error() + "; " + h.hint }
func (h hinted) Unwrap() error { return h.err }

// connectionHint says, from the message of a failed connection to server,
// what was likely wrong and what to type instead.
func connectionHint(msg, server string) string {
	at := "there"
	if server != "" {
		at = "at " + server
	}
	switch {
	case strings.Contains(msg, "frame too large") || strings.Contains(msg, "HTTP/1.1"):
		return "; this looks like Tollgate's HTTP port (serve --http, 7071 by default): use the gRPC port (serve --listen, 7070 by default)"
	case strings.Contains(msg, "tls: certificate required"):
		return "; the server requires a client certificate: give --tls-cert and --tls-key"
	case strings.Contains(msg, "x509:") || strings.Contains(msg, "tls: failed to verify"):
		return "; the server's certificate could not be verified: give --tls-ca with the CA that signed it"
	case strings.Contains(msg, "first record does not look like a TLS handshake"):
		return "; the server " + at + " does not use TLS: drop --tls-ca, --tls-cert and --tls-key"
	case strings.Contains(msg, "broken pipe") || strings.Contains(msg, "connection reset by peer"):
		// A TLS 1.3 server that wants a client certificate may refuse it
		// after the client's side of the handshake is done: the first
		// write fails.
		return "; the server " + at + " closed the connection: if it requires a client certificate (serve --client-ca), give --tls-cert and --tls-key; if it uses TLS, give --tls-ca; if it is Tollgate's HTTP port, use the gRPC port (7070 by default)"
	case strings.Contains(msg, "error reading server preface: EOF"):
		return "; the server " + at + " closed the connection before speaking gRPC: if it uses TLS, give --tls-ca (the CA of its certificate); if it is Tollgate's HTTP port, use the gRPC port (7070 by default)"
	}
	return "; no server answered " + at + " (is one running? set --server or TOLLGATE_SERVER)"
}
