package main

import (
	"bytes"
	"context"
	"net"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/limiter/fakeclock"
	"github.com/tollgate/tollgate/server"
)

// cliWaitLimit bounds every wait of the tests.
const cliWaitLimit = 10 * time.Second

// cliServer is a Tollgate server with a fake clock on a loopback port.
type cliServer struct {
	addr  string
	srv   *server.Server
	clock *fakeclock.Clock
}

func newCLIServer(t *testing.T) *cliServer {
	t.Helper()
	ts := &cliServer{clock: fakeclock.New(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))}
	ts.srv = server.New(server.Config{Clock: ts.clock, ShutdownTimeout: time.Second})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ts.addr = lis.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ts.srv.Serve(ctx, lis) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return ts
}

func (ts *cliServer) pool(t *testing.T, cfg limiter.PoolConfig) {
	t.Helper()
	if _, err := ts.srv.Engine().CreatePool(cfg); err != nil {
		t.Fatal(err)
	}
}

func (ts *cliServer) info(t *testing.T, name string) limiter.PoolInfo {
	t.Helper()
	info, err := ts.srv.Engine().GetPool(name)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// cliBuffer is a bytes.Buffer safe for a command writing while the test
// reads.
type cliBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *cliBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *cliBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// cliResult is what a command run printed and returned.
type cliResult struct {
	stdout, stderr string
	code           int
}

// tollgate runs the command line args in-process with --server addr
// (unless addr is empty) and no environment.
func runCLI(t *testing.T, addr string, args ...string) cliResult {
	t.Helper()
	return runCLICtx(t, context.Background(), addr, args...)
}

func runCLICtx(t *testing.T, ctx context.Context, addr string, args ...string) cliResult {
	t.Helper()
	var stdout, stderr cliBuffer
	if addr != "" {
		args = append([]string{"--server", addr}, args...)
	}
	code := run(ctx, args, &stdout, &stderr, func(string) string { return "" })
	return cliResult{stdout.String(), stderr.String(), code}
}

// mustSucceed fails unless r has exit status 0.
func (r cliResult) mustSucceed(t *testing.T) cliResult {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("exit status %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	return r
}

// mustFail fails unless r has exit status code and stderr starts with
// "tollgate: " and contains every one of want.
func (r cliResult) mustFail(t *testing.T, code int, want ...string) {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit status %d, want %d\nstdout:\n%s\nstderr:\n%s", r.code, code, r.stdout, r.stderr)
	}
	if !strings.HasPrefix(r.stderr, "tollgate: ") {
		t.Fatalf("stderr does not start with \"tollgate: \":\n%s", r.stderr)
	}
	for _, w := range want {
		if !strings.Contains(r.stderr, w) {
			t.Fatalf("stderr lacks %q:\n%s", w, r.stderr)
		}
	}
}

func TestServerFromEnvironment(t *testing.T) {
	ts := newCLIServer(t)
	ts.pool(t, limiter.PoolConfig{Name: "db", ConcurrencyLimit: 1})
	var stdout, stderr bytes.Buffer
	env := func(k string) string {
		if k == "TOLLGATE_SERVER" {
			return ts.addr
		}
		return ""
	}
	if code := run(context.Background(), []string{"pool", "list"}, &stdout, &stderr, env); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if !strings.Contains(stdout.String(), "db") {
		t.Fatalf("pool list via TOLLGATE_SERVER:\n%s", stdout.String())
	}
}

func TestUnreachableServer(t *testing.T) {
	// Nothing listens on port 1.
	runCLI(t, "127.0.0.1:1", "pool", "list").mustFail(t, 1, "(UNAVAILABLE)")
	runCLI(t, "127.0.0.1:1", "--timeout", "1s", "acquire", "db").mustFail(t, 1, "(UNAVAILABLE)")
	runCLI(t, "127.0.0.1:1", "take", "db").mustFail(t, 1, "(UNAVAILABLE)")
}

func TestCLIUsageErrors(t *testing.T) {
	ts := newCLIServer(t)
	ts.pool(t, limiter.PoolConfig{Name: "db", ConcurrencyLimit: 1})
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"pol"}, `unknown command "pol"`},
		{[]string{"pool", "get"}, "missing NAME"},
		{[]string{"pool", "get", "a", "b"}, "too many arguments"},
		{[]string{"pool", "get", ""}, "NAME is empty"},
		{[]string{"pool", "get", "db", "--bogus"}, "unknown flag: --bogus"},
		{[]string{"pool", "get", "db", "-o", "yaml"}, `-o "yaml" is not an output format`},
		{[]string{"pool", "create", "x", "--concurrency", "many"}, "invalid argument"},
		{[]string{"pool", "create", "x", "--ttl", "5"}, "missing unit"},
		{[]string{"pool", "update", "db"}, "nothing to update"},
		{[]string{"pool", "list", "extra"}, "too many arguments"},
		{[]string{"--timeout", "0", "pool", "list"}, "--timeout must be positive"},
		{[]string{"acquire"}, "missing POOL"},
		{[]string{"acquire", "db", "--try", "--wait-timeout", "1s"}, "--try does not wait"},
		{[]string{"acquire", "db", "--wait-timeout", "-1s"}, "--wait-timeout must not be negative"},
		{[]string{"take", "db", "--max-wait", "-1s"}, "--max-wait must not be negative"},
		{[]string{"take", "db", "-n", "x"}, "invalid argument"},
		{[]string{"acquire", "db", "--weigth", "2"}, "unknown flag: --weigth (did you mean --weight?)"},
		{[]string{"pool", "list", "--sever", "x"}, "unknown flag: --sever (did you mean --server?)"},
		{[]string{"run", "db", "--wait-timeout", "-1s", "--", "true"}, "--wait-timeout must not be negative"},
		{[]string{"run", "db", "--wait", "-1s", "--", "true"}, "--wait must not be negative"},
		{[]string{"run", "db", "--try", "--wait", "1s", "--", "true"}, "--try does not wait; drop --wait"},
	} {
		t.Run(strings.Join(tc.args, "_"), func(t *testing.T) {
			r := runCLI(t, ts.addr, tc.args...)
			r.mustFail(t, 2, tc.want, "--help' for usage.")
		})
	}
	if r := runCLI(t, "", "--server", " ", "pool", "list"); r.code != 2 {
		t.Fatalf("empty --server: exit %d", r.code)
	}
}

func TestEveryCommandHasHelp(t *testing.T) {
	root, _, _ := newRootCmd(&bytes.Buffer{}, &bytes.Buffer{}, func(string) string { return "" })
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Name() == "help" || c.Name() == "completion" || strings.HasPrefix(c.CommandPath(), "tollgate completion") {
			return
		}
		t.Run(c.CommandPath(), func(t *testing.T) {
			if c.Short == "" {
				t.Fatalf("%s has no Short help", c.CommandPath())
			}
			args := append(strings.Fields(c.CommandPath())[1:], "--help")
			r := runCLI(t, "", args...).mustSucceed(t)
			if !strings.Contains(r.stdout, "Usage:") || !strings.Contains(r.stdout, c.Short[:10]) && !strings.Contains(r.stdout, c.Long) {
				t.Fatalf("help of %s:\n%s", c.CommandPath(), r.stdout)
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// Help lists only the flags a command takes, with the defaults it applies.
func TestHelpOffersOnlyUsableFlags(t *testing.T) {
	serve := runCLI(t, "", "serve", "--help").mustSucceed(t).stdout
	for _, client := range []string{"--server", "--timeout", "--token-file", "--tls-ca"} {
		if strings.Contains(serve, client) {
			t.Errorf("serve --help offers the client flag %s", client)
		}
	}
	if strings.Contains(serve, "each pool needs") {
		t.Error("serve --help says each pool needs a concurrency or a rate")
	}
	runCLI(t, "", "serve", "--server", "x:1").mustFail(t, 2, "unknown flag: --server")
	if update := runCLI(t, "", "pool", "update", "--help").mustSucceed(t).stdout; strings.Contains(update, "--kind") {
		t.Error("pool update --help offers --kind, which the server refuses")
	}
	create := runCLI(t, "", "pool", "create", "--help").mustSucceed(t).stdout
	for _, want := range []string{"--kind", "--server", `this fraction (0: the default; off: no event) (default 0.9)`, `(default 0.1)`, "(default 10m0s)"} {
		if !strings.Contains(create, want) {
			t.Errorf("pool create --help lacks %q:\n%s", want, create)
		}
	}
}

func TestVersion(t *testing.T) {
	v := runCLI(t, "", "version").mustSucceed(t).stdout
	if !regexp.MustCompile(`^tollgate \S+ \(.+, go1\.\d+.* [a-z0-9]+/[a-z0-9]+\)\n$`).MatchString(v) {
		t.Fatalf("version printed %q", v)
	}
	if f := runCLI(t, "", "--version").mustSucceed(t).stdout; f != v {
		t.Fatalf("--version printed %q, version %q", f, v)
	}
	version = "v9.8.7"
	defer func() { version = "" }()
	if v := runCLI(t, "", "version").mustSucceed(t).stdout; !strings.HasPrefix(v, "tollgate v9.8.7 (") {
		t.Fatalf("with -X main.version: %q", v)
	}
}

// freeAddr returns a loopback address where nothing listens (a port that
// was free a moment ago).
func freeAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return addr
}
