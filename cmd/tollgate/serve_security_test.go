package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/testwait"
	"github.com/tollgate/tollgate/server/tlstest"
)

// startServe runs "tollgate serve args..." in-process and returns the gRPC
// and HTTP addresses it prints; it stops at the end of the test.
func startServe(t *testing.T, args ...string) (grpcAddr, httpAddr string) {
	t.Helper()
	grpcAddr, httpAddr, _ = startStoppableServe(t, args...)
	return grpcAddr, httpAddr
}

// startStoppableServe is startServe that also returns a stop function:
// it shuts the server down (as SIGTERM does) and waits for it to exit.
func startStoppableServe(t *testing.T, args ...string) (grpcAddr, httpAddr string, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var stderr cliBuffer
	done := make(chan int, 1)
	args = append([]string{"serve", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0", "--shutdown-timeout", "2s"}, args...)
	go func() { done <- run(ctx, args, io.Discard, &stderr, func(string) string { return "" }) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if code := <-done; code != 0 {
				t.Errorf("serve exited with %d:\n%s", code, stderr.String())
			}
		})
	}
	t.Cleanup(stop)
	grpcRe := regexp.MustCompile(`serving on (\S+)`)
	httpRe := regexp.MustCompile(`metrics on https?://(\S+)/`)
	deadline := time.Now().Add(cliWaitLimit)
	for {
		out := stderr.String()
		g, h := grpcRe.FindStringSubmatch(out), httpRe.FindStringSubmatch(out)
		if g != nil && h != nil {
			return g[1], h[1], stop
		}
		select {
		case code := <-done:
			done <- code
			t.Fatalf("serve exited with %d:\n%s", code, out)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not start:\n%s", out)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// serve refuses a non-loopback address without TLS and authentication,
// saying how to fix it, and checks that its security flags fit together.
func TestServeSecurityFlags(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := []string{"serve", "--data-dir", dir, "--http", ""}
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--listen", "0.0.0.0:0"}, []string{"refusing to serve", "not a loopback address", "--tls-cert", "--insecure-allow-remote"}},
		{[]string{"--listen", "127.0.0.1:0", "--http", "0.0.0.0:0"}, []string{"refusing to serve", "--http", "--insecure-allow-remote"}},
		{[]string{"--tls-cert", "x.pem"}, []string{"--tls-cert and --tls-key go together"}},
		{[]string{"--admin-names", "ops"}, []string{"--admin-names", "--client-ca"}},
		{[]string{"--policy", "p.yaml"}, []string{"--policy", "--client-ca"}},
		{[]string{"--admin-token-file", tokenFile}, []string{"at least 16 characters"}},
		{[]string{"--client-burst", "-2"}, []string{"--client-burst"}},
		{[]string{"--mark-event-interval", "-1s"}, []string{"--mark-event-interval must be 0", "or positive"}},
	} {
		r := runCLI(t, "", append(base, c.args...)...)
		r.mustFail(t, 1, c.want...)
	}
}

// A server with mutual TLS and admin names: the CLI's --tls-* flags reach
// it, only the admin certificate may change pools, and HTTPS serves the
// probes to anyone and the rest to certificate holders.
func TestServeMutualTLS(t *testing.T) {
	ca := tlstest.NewCA(t, "test CA")
	dir := t.TempDir()
	srvFiles := ca.WriteFiles(t, dir, "server")
	admin := ca.WriteFiles(t, dir, "ops")
	worker := ca.WriteFiles(t, dir, "worker-1")
	addr, httpAddr := startServe(t, "--tls-cert", srvFiles.Cert, "--tls-key", srvFiles.Key,
		"--client-ca", srvFiles.CA, "--admin-names", "ops")

	as := func(f tlstest.Files) []string {
		return []string{"--tls-ca", f.CA, "--tls-cert", f.Cert, "--tls-key", f.Key}
	}
	runCLI(t, addr, append(as(admin), "pool", "create", "db", "--concurrency", "2")...).mustSucceed(t)
	runCLI(t, addr, append(as(worker), "pool", "create", "x", "--concurrency", "2")...).
		mustFail(t, 1, "PERMISSION_DENIED", `"worker-1" is not an admin`)
	runCLI(t, addr, append(as(worker), "take", "db")...).mustFail(t, 1, "no rate limit")
	runCLI(t, addr, "--tls-ca", srvFiles.CA, "pool", "list").mustFail(t, 1)

	pool := tlsPool(t, srvFiles.CA)
	anon := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: cliWaitLimit}
	if code := httpGet(t, anon, "https://"+httpAddr+"/readyz"); code != 200 {
		t.Errorf("/readyz without a certificate = %d", code)
	}
	if code := httpGet(t, anon, "https://"+httpAddr+"/metrics"); code != 401 {
		t.Errorf("/metrics without a certificate = %d, want 401", code)
	}
	cert, err := tls.LoadX509KeyPair(worker.Cert, worker.Key)
	if err != nil {
		t.Fatal(err)
	}
	viewer := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}}, Timeout: cliWaitLimit}
	if code := httpGet(t, viewer, "https://"+httpAddr+"/api/pools"); code != 200 {
		t.Errorf("/api/pools with a certificate = %d", code)
	}
}

// A server with an admin token: the CLI's --token-file reaches it.
func TestServeAdminToken(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("0123456789abcdef0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr, _ := startServe(t, "--admin-token-file", tokenFile)
	runCLI(t, addr, "pool", "create", "db", "--concurrency", "2").mustFail(t, 1, "UNAUTHENTICATED", "Bearer")
	runCLI(t, addr, "--token-file", tokenFile, "pool", "create", "db", "--concurrency", "2").mustSucceed(t)
}

func tlsPool(t *testing.T, caFile string) *x509.CertPool {
	t.Helper()
	p, err := auth.LoadCertPool(caFile)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func httpGet(t *testing.T, c *http.Client, url string) int {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// On SIGHUP, serve reads its admin token file again: after a rotation the
// new token works and the old one is refused, without a restart; a file
// that cannot be read keeps the token in use.
func TestServeReloadsTokenOnSIGHUP(t *testing.T) {
	hup := make(chan os.Signal) // unbuffered: a send returns when serve took it, so after the reload before it
	saved := reloadSignals
	reloadSignals = func() (<-chan os.Signal, func()) { return hup, func() {} }
	t.Cleanup(func() { reloadSignals = saved })

	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	oldFile, newFile := filepath.Join(dir, "old"), filepath.Join(dir, "new")
	for f, tok := range map[string]string{tokenFile: "0123456789abcdef-old-token-0000", oldFile: "0123456789abcdef-old-token-0000", newFile: "0123456789abcdef-new-token-1111"} {
		if err := os.WriteFile(f, []byte(tok+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	addr, _ := startServe(t, "--admin-token-file", tokenFile)
	runCLI(t, addr, "--token-file", oldFile, "pool", "create", "db", "--concurrency", "2").mustSucceed(t)

	b, _ := os.ReadFile(newFile)
	if err := os.WriteFile(tokenFile, b, 0o600); err != nil {
		t.Fatal(err)
	}
	hup <- syscall.SIGHUP
	testwait.For(t, "the new token to be accepted", func() bool {
		return runCLI(t, addr, "--token-file", newFile, "pool", "get", "db").code == 0
	})
	runCLI(t, addr, "--token-file", oldFile, "pool", "get", "db").mustFail(t, 1, "UNAUTHENTICATED")

	if err := os.WriteFile(tokenFile, []byte("short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	hup <- syscall.SIGHUP
	hup <- syscall.SIGHUP // taken only after the reload of the first ran
	runCLI(t, addr, "--token-file", newFile, "pool", "get", "db").mustSucceed(t)
}
